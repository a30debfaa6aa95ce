"""The main window: header, timeline, segment map, allocations table / call tree and stack panel.

Time travel: the timeline's cursor picks an event of one device's trace; the
window then shows ``doc.at(device, k)`` (the snapshot replayed to just after
that event) everywhere: header figures, segment map, table, stack panel and
call tree.  The cursor starts at the end, which is the snapshot as recorded.

The window composes the widgets; what they show is :attr:`MainWindow.vs` (a Qt-free
:class:`ViewState`), and each view subscribes to its events in ``view_bindings.py``
and only draws.  Files in and out (open, recent, load progress, export) are in
``file_actions.py``, the toolbar's selectors in ``selectors.py``, menus in
``main_menus.py``.
"""

from __future__ import annotations

import importlib.resources
import os
import sys

from PySide6.QtCore import QByteArray, QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..model.view.document import Document
from ..model.core.units import format_bytes
from ..model.view.view_state import ViewState
from . import main_menus
from . import settings as st
from .calltree_panel import AT_PEAK, CallTreePanel
from .file_actions import FILE_FILTER, FileActionsMixin, _local_files  # noqa: F401 (re-exported)
from .header import SummaryHeader, bind_exactness
from .loader import LoadThread
from .segment_map import SORT_FREE, SORT_SIZE, SegmentMapView
from .selectors import SelectorsMixin
from .stack_panel import StackPanel
from .table import AllocationsTable
from .timeline import TimelinePanel
from .view_bindings import bind_views

PLACEHOLDER = "Open a snapshot (Ctrl+O) or drop a file here"


def app_icon() -> QIcon:
    try:
        res = importlib.resources.files("vramscope.viewer.assets") / "vramscope.svg"
        if res.is_file():
            with importlib.resources.as_file(res) as path:
                return QIcon(os.fspath(path))
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        pass
    return QIcon()


class _State:
    """A window attribute that is the :class:`ViewState`'s (``window.cursor_k`` is
    ``window.vs.cursor_k``): the state lives in the model, the views draw it."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj.vs, self.name)

    def __set__(self, obj, value) -> None:
        setattr(obj.vs, self.name, value)


class MainWindow(FileActionsMixin, SelectorsMixin, QMainWindow):
    """``persist=False`` (screenshots) neither reads nor writes settings.

    What is shown is :attr:`vs` (a Qt-free :class:`ViewState`); the attributes below
    are views of it for the window's own code and tests.
    """

    doc = _State()
    view_doc = _State()
    selection = _State()
    cursor_device = _State()
    cursor_k = _State()
    selected_block = _State()
    selected_addr = _State()
    selected_interval = _State()
    node_mask = _State()
    search_mask = _State()

    documentChanged = Signal(object)
    loadFinished = Signal(str)  # "loaded" | "failed" | "cancelled"
    momentShown = Signal()  # the views now show the document at the cursor (a new moment)
    # File > Attach: set by the application (app.py), which knows the live side; the window
    # itself imports nothing live (no import cycle window <-> live controller).
    attach_handler = None

    def __init__(self, persist: bool = True, parent=None) -> None:
        super().__init__(parent)
        self.persist = persist
        self.vs = ViewState()
        self.live = None  # the LiveController feeding this window, if any
        self._calltree_dirty = True
        self.last_error: str | None = None
        self.error_box: QMessageBox | None = None
        self.loader: LoadThread | None = None
        self._old_loaders: list[LoadThread] = []
        self._syncing = False
        self._choices: dict = {}
        self.setWindowTitle("vramscope")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)
        self.setMinimumSize(QSize(640, 400))
        self._build_widgets()
        self._build_actions()
        from .diagnosis_panel import add_banner_button

        self.fix_button = add_banner_button(self)  # beside the OOM banner (issue 16)
        self._build_toolbar()
        self._build_status()
        bind_views(self)  # the views subscribe to self.vs (view_bindings.py)
        bind_exactness(self)  # the header's figures: not exact inside untrusted stretches
        from .categories_wiring import install as install_categories

        install_categories(self)  # what the memory is (issue 15): dock, colours, bands
        self.resize(1440, 900)
        if persist:
            self._restore_settings()
        self.show_document(None)

    # ------------------------------------------------------------------ building
    def _build_widgets(self) -> None:
        self.header = SummaryHeader()
        self.timeline = TimelinePanel()
        self.map = SegmentMapView()
        self.table = AllocationsTable()
        self.calltree = CallTreePanel()
        self.stack = StackPanel()
        self.map.blockClicked.connect(lambda b: self.select_block(b, origin="map"))
        self.map.block_details = lambda b: self.vs.interval_details(self.vs.interval_of_block(b))
        self.table.blockSelected.connect(lambda b: self.select_block(b, origin="table"))
        self.table.filterApplied.connect(self._on_search_applied)
        self.timeline.cursorRequested.connect(self._on_cursor_requested)
        self.timeline.intervalClicked.connect(self.select_interval)
        self.timeline.latestRequested.connect(self.go_latest)
        self.timeline.peak_button.clicked.connect(lambda: self.jump_to_peak("allocated"))
        self.timeline.oom_button.clicked.connect(self.jump_to_oom)
        self.timeline.prev_oom_button.clicked.connect(lambda: self.jump_to_oom(-1))
        self.timeline.next_oom_button.clicked.connect(lambda: self.jump_to_oom(+1))
        self.calltree.nodeSelected.connect(self._on_node_selected)
        self.calltree.momentChanged.connect(lambda _m: self.refresh_calltree(force=True))
        # Dragging the cursor: the heavy update runs once per event-loop turn.
        self._seek_timer = QTimer(self, singleShot=True, interval=0)
        self._seek_timer.timeout.connect(self._apply_pending_seek)
        self._pending_k = -1

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.table, "Blocks")
        self.tabs.addTab(self.calltree, "Call tree")
        self.tabs.setTabToolTip(0, "Every block at the cursor (allocated, pending free and free), "
                                   "sortable, filtered by the search")
        self.tabs.setTabToolTip(1, "Who holds memory: live bytes grouped by the stack that "
                                   "allocated them")
        self.tabs.currentChanged.connect(lambda _i: self.refresh_calltree())
        # The search box lives in the toolbar; it filters the table and
        # highlights matches in the map and the timeline.
        self.search = self.table.filter
        self.table.layout().itemAt(0).layout().removeWidget(self.search)
        self.search.setPlaceholderText("search frames… (Ctrl+F)")
        self.search.setToolTip("Allocations whose call stack has a frame whose file or function "
                               "contains this text: highlighted in the map and the timeline, "
                               "the only rows of the table (Ctrl+F)")
        self.search.setMinimumWidth(180)

        self.bottom_split = QSplitter(Qt.Orientation.Horizontal)
        self.bottom_split.addWidget(self.tabs)
        self.bottom_split.addWidget(self.stack)
        self.bottom_split.setStretchFactor(0, 3)
        self.bottom_split.setStretchFactor(1, 2)
        self.main_split = QSplitter(Qt.Orientation.Vertical)
        self.main_split.addWidget(self.timeline)
        self.main_split.addWidget(self.map)
        self.main_split.addWidget(self.bottom_split)
        self.main_split.setStretchFactor(0, 2)
        self.main_split.setStretchFactor(1, 3)
        self.main_split.setStretchFactor(2, 2)
        self.main_split.setSizes([230, 330, 220])
        self.bottom_split.setSizes([820, 600])
        content = QWidget()
        lay = QVBoxLayout(content)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.header)
        lay.addWidget(self.main_split, 1)

        self.placeholder = QWidget()
        pl = QVBoxLayout(self.placeholder)
        pl.addStretch(1)
        text = QLabel(PLACEHOLDER)
        text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        f = text.font()
        f.setPointSizeF(f.pointSizeF() * 1.6)
        text.setFont(f)
        text.setEnabled(False)
        sub = QLabel("A PyTorch CUDA memory snapshot: torch.cuda.memory._dump_snapshot(), "
                     "or `vramscope record script.py`.\nvramscope shows why memory ran out: "
                     "free memory scattered in gaps too small for the request.")
        sub.setAlignment(Qt.AlignmentFlag.AlignCenter)
        sub.setEnabled(False)
        button = QPushButton("Open snapshot…")
        button.setToolTip("Open a snapshot file (Ctrl+O)")
        button.clicked.connect(self.open_dialog)
        pl.addWidget(text)
        pl.addWidget(sub)
        pl.addSpacing(12)
        pl.addWidget(button, 0, Qt.AlignmentFlag.AlignCenter)
        pl.addStretch(1)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.placeholder)
        self.pages.addWidget(content)
        self.setCentralWidget(self.pages)

    def _action(self, text, slot, shortcut=None, tip=None) -> QAction:
        a = QAction(text, self)
        if shortcut is not None:
            a.setShortcut(QKeySequence(shortcut))
        if tip:
            a.setToolTip(tip)
            a.setStatusTip(tip)
        a.triggered.connect(slot)
        return a

    def _build_actions(self) -> None:
        main_menus.build_actions(self)

    def _open_attach(self) -> None:
        handler = type(self).attach_handler
        if handler is not None:
            handler(self)

    def add_aux_window(self, w) -> None:
        """Keep ``w`` (a compare, ranks or live window opened from here) alive while open."""
        self._aux_windows.append(w)
        w.destroyed.connect(lambda *_: self._aux_windows.remove(w) if w in self._aux_windows
                            else None)

    def _open_whatif(self) -> None:
        from .whatif_panel import open_panel

        open_panel(self)

    def _open_diagnosis(self) -> None:
        from .diagnosis_panel import open_panel

        open_panel(self)

    def _on_sort_changed(self, sort: str) -> None:
        {SORT_SIZE: self.sort_size_action, SORT_FREE: self.sort_free_action}.get(
            sort, self.sort_address_action).setChecked(True)

    def _build_toolbar(self) -> None:
        main_menus.build_toolbar(self)

    def _build_status(self) -> None:
        main_menus.build_status(self)

    # ------------------------------------------------------------------ settings
    def _restore_settings(self) -> None:
        s = st.settings()
        geo = s.value("window/geometry")
        if isinstance(geo, QByteArray) and not geo.isEmpty():
            self.restoreGeometry(geo)
        state = s.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        for key, split in (("window/mainSplit3", self.main_split),
                           ("window/bottomSplit", self.bottom_split)):
            v = s.value(key)
            if isinstance(v, QByteArray) and not v.isEmpty():
                split.restoreState(v)

    def _save_settings(self) -> None:
        s = st.settings()
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("window/mainSplit3", self.main_split.saveState())
        s.setValue("window/bottomSplit", self.bottom_split.saveState())
        s.sync()

    def closeEvent(self, event) -> None:
        self.cancel_load(quiet=True)
        for t in [self.loader, *self._old_loaders]:
            if t is not None:
                t.cancel()
                t.wait(30000)
        if self.persist:
            self._save_settings()
        super().closeEvent(event)

    # ------------------------------------------------------------------ document
    def show_document(self, doc: Document | None) -> None:
        """Open ``doc``: the views draw it from the view state's events (view_bindings)."""
        old = self.doc
        self.vs.set_document(doc)
        self._update_status_labels()
        k = self.vs.opening_event()  # a recording that goes on after its OOM: the OOM
        if k is not None:
            self.set_cursor(k)
        self.setWindowTitle("vramscope" if doc is None else f"{doc.name} — vramscope")
        del old
        self.documentChanged.emit(doc)

    def update_document(self, doc: Document, carried=None) -> None:
        """Show ``doc``, a newer picture of the same process (live attach), keeping what
        the user set up: the selectors, the selected allocation (by address), the
        timeline's range (or following the latest event), the segment map's view,
        the table's sort and scroll, and the call tree's expanded nodes.  The
        widgets keep their own state (``view_state`` / ``restore_view_state``);
        the view state carries the picks.  The cursor goes to the new latest event."""
        old = self.doc
        if old is None:
            self.show_document(doc)
            return
        # (``carried``: taken by a caller before a live replay grew under ``old``)
        carried = carried if carried is not None else self.vs.carried()
        views = (self.timeline.view_state(), self.map.view_state(), self.table.view_state())
        self.calltree.hold_state()
        self.vs.carry_over(doc, carried)  # (a drag in progress lands after it: _seek_timer)
        self.timeline.restore_view_state(views[0])
        self.map.restore_view_state(views[1])
        self.table.restore_view_state(views[2])
        stacks = self.calltree.current_stacks() if self.tabs.currentWidget() is self.calltree \
            else None
        if stacks is not None:  # the node still selected in the tree: its highlight too
            self.node_mask = self.vs.stacks_mask(doc, stacks)
        self.vs.set_search_mask(self.table.stack_mask if self.search.text().strip() else None)
        self._update_status_labels()
        del old
        self.documentChanged.emit(doc)

    def oom_shown(self):
        """The OOM whose request the map draws (see :meth:`ViewState.oom_shown`)."""
        return self.vs.oom_shown()

    def scope_text(self) -> str:
        return self.vs.scope_text()

    def select_block(self, block: int, origin: str = "") -> None:
        """Select ``block`` (of the document at the cursor) in the map, the table and the
        stack panel; ``origin``: the view it was picked in ("moment": by the cursor)."""
        if self.view_doc is None:
            return
        self.vs.select_block(block, keep_interval=origin == "moment", origin=origin)

    # ------------------------------------------------------------------ time travel
    def set_cursor(self, k: int) -> None:
        """Show the block layout after event ``k`` of the timeline's device, everywhere."""
        self._seek_timer.stop()
        self.vs.set_cursor(k)
        # (the views draw the moment from the view state's ``cursor`` and ``moment``)

    def _on_cursor_requested(self, k: int) -> None:
        self._pending_k = int(k)
        self._seek_timer.start()

    def _apply_pending_seek(self) -> None:
        if self._pending_k >= 0:
            self.set_cursor(self._pending_k)

    def step_cursor(self, delta: int) -> None:
        if self.cursor_device is not None:
            self.set_cursor(self.cursor_k + delta)

    def go_latest(self) -> None:
        """Back to the snapshot as recorded: the end of the trace."""
        if self.cursor_device is not None:
            self.set_cursor(self.doc.n_events(self.cursor_device) - 1)

    def jump_to_peak(self, curve: str = "allocated") -> None:
        """The cursor to the event after which ``curve`` (of the shown stream) peaks."""
        if self.cursor_device is None or not self.timeline.peaks:
            return
        self.set_cursor(self.timeline.peaks[curve][1])

    def jump_to_oom(self, direction: int = 0) -> None:
        """0: the last OOM; -1 / +1: the one before / after the cursor."""
        if self.cursor_device is None:
            return
        if not self.doc.oom_events(self.cursor_device):
            self.statusBar().showMessage("No out-of-memory event in this trace", 4000)
            return
        target = self.vs.oom_target(direction)
        if target is not None:
            self.set_cursor(target)

    def select_interval(self, i: int) -> None:
        """Select an allocation of the timeline: its stack, and its block if live at the cursor."""
        if self.doc is None or self.cursor_device is None:
            return
        if self._seek_timer.isActive():  # a click moves the cursor first, then selects
            self._apply_pending_seek()
        self.vs.select_interval(i)

    # ------------------------------------------------------------------ who holds memory
    def refresh_calltree(self, force: bool = False) -> None:
        """Rebuild the call tree (only while it is shown; else on showing it)."""
        if force:
            self._calltree_dirty = True
        if not self._calltree_dirty or self.tabs.currentWidget() is not self.calltree:
            return
        self._calltree_dirty = False
        peaks = self.timeline.peaks
        at_peak = self.calltree.moment() == AT_PEAK and bool(peaks)
        shown = self.vs.holders_at(peaks["allocated"][1] if at_peak else None)
        if shown is None:
            self.calltree.set_blocks(None, None)
        else:
            self.calltree.set_blocks(*shown)

    def _on_node_selected(self, stacks, best: int) -> None:
        doc = self.doc
        if doc is None:
            return
        root = self.calltree.root
        item = self.calltree.tree.currentItem()
        node = item.data(0, Qt.ItemDataRole.UserRole + 1) if item is not None else None
        if node is None or node is root:
            self.vs.set_node_mask(None)
        else:
            self.vs.set_node_mask(self.vs.stacks_mask(doc, stacks))
        if node is not None:
            facts = (f"<b>call tree</b>: <tt>{_html(node.label)}</tt> · {format_bytes(node.bytes)} "
                     f"in {node.count:,} blocks · {len(node.stacks):,} stacks<br>"
                     "The stack holding most of these bytes; its blocks are highlighted.")
            self.stack.show_stack(best, facts)

    def _on_search_applied(self, text: str) -> None:
        self.vs.set_search_mask(self.table.stack_mask if text else None)

    def highlight_mask(self):
        """Per stack: highlighted in the map and the timeline (None: nothing highlighted)."""
        return self.vs.highlight_mask()

    def _apply_highlight(self) -> None:
        """The views draw the view state's highlight again (after a panel drew its own)."""
        self.vs.events.highlight.emit(self.vs.highlight_mask())

    # ------------------------------------------------------------------ actions
    def _focus_filter(self) -> None:
        self.table.filter.setFocus()
        self.table.filter.selectAll()

    def _zoom(self, factor: float) -> None:
        if self.doc is not None:
            self.map.vb.scaleBy((factor, 1.0))
            self.map.view_auto = False

    def _quit(self) -> None:
        self.close()  # (close() returns a bool; a slot must not)

    def about(self) -> None:
        QMessageBox.about(self, "About vramscope", about_text())

    # ------------------------------------------------------------------ drag & drop, palette
    def changeEvent(self, event) -> None:
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            QTimer.singleShot(0, self.map.apply_palette)
            QTimer.singleShot(0, self.timeline.apply_palette)
        super().changeEvent(event)




def about_text() -> str:
    import numpy
    import pyqtgraph
    import PySide6
    from PySide6.QtCore import qVersion

    from .. import __version__

    return (
        f"<h3>vramscope {__version__}</h3>"
        "<p>See why your GPU ran out of memory: free memory scattered in gaps too small "
        "for the request.</p>"
        f"<p>Qt {qVersion()}<br>PySide6 {PySide6.__version__}<br>pyqtgraph {pyqtgraph.__version__}"
        f"<br>numpy {numpy.__version__}<br>Python {sys.version.split()[0]}</p>"
    )


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
