"""The main window: header, timeline, segment map, allocations table / call tree and stack panel.

Time travel: the timeline's cursor picks an event of one device's trace; the
window then shows ``doc.at(device, k)`` (the snapshot replayed to just after
that event) everywhere: header figures, segment map, table, stack panel and
call tree.  The cursor starts at the end, which is the snapshot as recorded.

Why ~950 lines: this is the one place that orders the views over the
:class:`ViewState` (what is shown lives there, Qt-free; menus are in
``main_menus.py``, loading in ``loader.py``/``jobs.py``); splitting the ordering
across files would hide the sequence a reader needs to see whole.
"""

from __future__ import annotations

import gc
import importlib.resources
import os
import sys
from pathlib import Path

import numpy as np
from PySide6.QtCore import QByteArray, QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QTabWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from ..model.analysis import Selection, memory_stats
from ..model.snapshot import HOST_DEVICE
from ..model.view_state import ViewState
from ..model.units import format_count
from . import settings as st
from ..model.document import Document, pool_label, stream_label
from . import main_menus
from .header import SummaryHeader
from .loader import STAGE_TEXT, LoadThread
from .segment_map import SORT_ADDRESS, SORT_FREE, SORT_SIZE, SegmentMapView
from .calltree_panel import AT_CURSOR, AT_PEAK, CallTreePanel
from .stack_panel import StackPanel
from .table import AllocationsTable
from .timeline import TimelinePanel
from ..model.units import format_bytes

FILE_FILTER = "Memory snapshots (*.pickle *.pkl *.pickle.gz *.pickle.xz *.pickle.bz2 *.gz *.xz " \
              "*.bz2 *.json);;All files (*)"
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
    ``window.vs.cursor_k``): the state lives in the model, the window orders drawing."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj.vs, self.name)

    def __set__(self, obj, value) -> None:
        setattr(obj.vs, self.name, value)


class MainWindow(QMainWindow):
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
        self.vs.events.highlight.connect(self._draw_highlight)
        self._build_actions()
        from .diagnosis_panel import add_banner_button

        self.fix_button = add_banner_button(self)  # beside the OOM banner (issue 16)
        self._build_toolbar()
        self._build_status()
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
        for key, split in (("window/mainSplit3", self.main_split), ("window/bottomSplit", self.bottom_split)):
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

    def _fill_recent_menu(self) -> None:
        m = self.recent_menu
        m.clear()
        files = st.recent_files()
        for path in files:
            a = m.addAction(Path(path).name)
            a.setToolTip(path)
            a.setStatusTip(path)
            a.setData(path)
            a.triggered.connect(self._open_recent)
            if not os.path.exists(path):
                a.setText(Path(path).name + " (missing)")
        if files:
            m.addSeparator()
        clear = m.addAction("Clear")
        clear.setToolTip("Forget the recent files")
        clear.setEnabled(bool(files))
        clear.triggered.connect(self.clear_recent)
        m.setToolTipsVisible(True)

    def _open_recent(self) -> None:
        action = self.sender()
        if action is not None and action.data():
            self.open_file(str(action.data()))

    def clear_recent(self) -> None:
        st.clear_recent_files()
        self._fill_recent_menu()

    # ------------------------------------------------------------------ compare / ranks
    def compare_dialog(self) -> None:
        start = os.path.dirname(self.doc.snap.path) if self.doc and self.doc.snap.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Compare with snapshot (B)", start, FILE_FILTER)
        if path:
            self.compare_with(path)

    def compare_with(self, path: str):
        """A Diff window: the open snapshot as recorded (A) against ``path`` (B)."""
        from .diff_window import DiffWindow

        if self.doc is None:
            return None

        w = DiffWindow(self)
        w.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.add_aux_window(w)
        w.open(self.doc.root, path)
        w.show()
        return w

    def open_ranks_dialog(self) -> None:
        directory = QFileDialog.getExistingDirectory(self, "Open directory of per-rank snapshots")
        if directory:
            self.open_ranks(directory)

    def open_ranks(self, directory: str):
        """A Ranks window over ``directory``; double-clicking a rank opens it here."""
        from .ranks_window import RanksWindow

        w = RanksWindow(self)
        w.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.add_aux_window(w)
        w.openRequested.connect(self._open_from_ranks)
        w.open_directory(directory)
        w.show()
        return w

    def _open_from_ranks(self, path: str) -> None:
        self.open_file(path)
        self.raise_()
        self.activateWindow()

    # ------------------------------------------------------------------ loading
    def open_dialog(self) -> None:
        start = os.path.dirname(st.recent_files()[0]) if self.persist and st.recent_files() else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open memory snapshot", start, FILE_FILTER)
        if path:
            self.open_file(path)

    def is_loading(self) -> bool:
        return self.loader is not None

    def open_file(self, path: str) -> LoadThread:
        """Start loading ``path`` on a worker thread; the current view stays until it is done."""
        if self.loader is not None:
            self.cancel_load(quiet=True)
        path = os.fspath(path)
        t = LoadThread(path, self)
        t.defer_store = True  # closeEvent waits for it: the cache is written after the window
        t.progressed.connect(self._on_progress)
        t.done.connect(self._on_loaded)
        t.failed.connect(self._on_failed)
        t.cancelled.connect(self._on_cancelled)
        t.finished.connect(self._on_thread_finished)
        self.loader = t
        self.progress.setValue(0)
        self.progress.setFormat(f"Opening {Path(path).name}… %p%")
        self.progress.show()
        self.cancel_button.show()
        self.cancel_action.setEnabled(True)
        self.statusBar().showMessage(f"Loading {path}…")
        t.start()
        return t

    def _cancel_clicked(self) -> None:
        self.cancel_load()

    def cancel_load(self, quiet: bool = False) -> None:
        t = self.loader
        if t is None:
            return
        t.cancel()
        if quiet:
            # Results of a superseded load are ignored; it finishes on its own.
            self._detach_loader()

    def _detach_loader(self) -> None:
        t = self.loader
        if t is not None:
            self._old_loaders.append(t)
        self.loader = None
        self.progress.hide()
        self.cancel_button.hide()
        self.cancel_action.setEnabled(False)

    def _on_thread_finished(self) -> None:
        t = self.sender()
        if t in self._old_loaders:
            self._old_loaders.remove(t)
            t.deleteLater()
            # A superseded, cancelled or failed load, or the document a load replaced, may
            # leave big arrays in reference cycles: free them now.  A first document
            # replaced nothing: no ~30 ms collection on the way to the first window.
            if t.collect_when_done:
                gc.collect()

    def _on_progress(self, stage: str, fraction: float) -> None:
        if self.sender() is not self.loader:
            return
        self.progress.setValue(int(fraction * 1000))
        self.progress.setFormat(f"{STAGE_TEXT.get(stage, stage)}… %p%")

    def _on_loaded(self, doc: Document) -> None:
        t = self.sender()
        if t is not self.loader:
            return
        t.result = None
        t.collect_when_done = self.doc is not None
        self._detach_loader()
        self.show_document(doc)
        if self.persist:
            st.add_recent_file(doc.snap.path)
            self._fill_recent_menu()
        self.statusBar().showMessage(f"Loaded {doc.snap.path}", 8000)
        self.loadFinished.emit("loaded")

    def _on_failed(self, message: str) -> None:
        t = self.sender()
        if t is not self.loader:
            return
        path = t.path
        self._detach_loader()
        self.last_error = f"{path}: {message}"
        self.statusBar().showMessage(f"Could not open {Path(path).name}: {message}")
        self.loadFinished.emit("failed")
        self._show_error(f"Could not open {Path(path).name}", message, path)

    def _on_cancelled(self) -> None:
        if self.sender() is not self.loader:
            return
        self._detach_loader()
        gc.collect()
        self.statusBar().showMessage("Load cancelled")
        self.loadFinished.emit("cancelled")

    def _show_error(self, title: str, message: str, detail: str = "") -> None:
        box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self)
        if detail:
            box.setInformativeText(detail)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        self.error_box = box
        box.open()  # non-blocking

    # ------------------------------------------------------------------ document
    def show_document(self, doc: Document | None) -> None:
        old = self.doc
        self.vs.set_document(doc)
        self.pages.setCurrentIndex(0 if doc is None else 1)
        has = doc is not None
        for a in (self.export_png_action, self.export_svg_action, self.copy_map_action,
                  self.fit_action):
            a.setEnabled(has)
        self._fill_selectors()
        self._show_selectors(self.selection)  # (several devices: the OOM's, see ViewState)
        self.header.set_document(doc)
        self.stack.set_document(doc)
        # Who holds memory: at the OOM (the cursor starts there) when there is one,
        # otherwise at the peak of allocated memory.
        self.calltree.set_moment(AT_CURSOR if doc is None or doc.oom is not None
                                 or doc.timeline is None else AT_PEAK)
        self._reset_cursor()
        # After an OOM, the segments with the largest free gaps come first.
        self._apply_selection(sort=None if doc is None else (SORT_FREE if doc.oom else SORT_ADDRESS))
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
        this only orders the calls.  The cursor goes to the new latest event."""
        old = self.doc
        if old is None:
            self.show_document(doc)
            return
        # (``carried``: taken by a caller before a live replay grew under ``old``)
        carried = carried if carried is not None else self.vs.carried()
        sel = self.vs.carry_selection(old, doc, carried.selection)
        moment = self.calltree.moment()
        views = (self.timeline.view_state(), self.map.view_state(), self.table.view_state())
        self.calltree.hold_state()
        self.vs.replace_document(doc, sel)
        self._fill_selectors()
        self._show_selectors(sel)  # the same selectors, without the rebuilds of their signals
        self.header.set_document(doc)
        self.stack.set_document(doc, keep=True)
        self.calltree.set_moment(moment)
        self._reset_cursor()
        self.selected_addr = carried.addr
        self._apply_selection(keep_view=True)
        i = self.vs.find_interval(carried.interval)
        gap = self.vs.find_gap(carried.gap) if self.selected_block < 0 else -1
        if i >= 0:
            self.select_interval(i)
        elif gap >= 0:
            self.select_block(gap, origin="moment")
        self.timeline.restore_view_state(views[0])
        self.map.restore_view_state(views[1])
        self.table.restore_view_state(views[2])
        stacks = self.calltree.current_stacks() if self.tabs.currentWidget() is self.calltree \
            else None
        if stacks is not None:  # the node still selected in the tree: its highlight too
            mask = np.zeros(len(doc.snap.stacks), bool)
            ids = np.asarray([s for s in stacks if 0 <= s < len(mask)], dtype=np.int64)
            mask[ids] = True
            self.node_mask = mask
        self.vs.set_search_mask(self.table.stack_mask if self.search.text().strip() else None)
        self._update_status_labels()
        del old
        self.documentChanged.emit(doc)

    def _reset_cursor(self) -> None:
        """The timeline of the selected device (or the trace's), cursor at the end."""
        doc = self.doc
        self.vs.reset_cursor()
        dev = self.cursor_device
        self.timeline.set_document(doc, dev, self.selection.stream, self.selection.pool)
        if dev is not None:  # the timeline kept its old cursor: the window's is at the end
            self.timeline.set_cursor(self.cursor_k)
        has = dev is not None
        for a in self.timeline_actions:
            a.setEnabled(has)
        self._update_oom_buttons()

    def _fill_selectors(self) -> None:
        """Fill the selectors; the value of each entry lives in ``self._choices``
        (Python objects, never QVariant: PySide6 mishandles bool item data)."""
        doc = self.doc
        choices: dict[QComboBox, list[tuple[str, object]]] = {
            self.device_combo: self.vs.device_choices(),  # GPUs, then pinned host memory
            self.pool_combo: [("All pools", None)],
            self.stream_combo: [("All streams", None)],
            self.kind_combo: [("Small + large", None), ("Large segments", False),
                              ("Small segments", True)],
        }
        if doc is not None:
            snap = doc.snap
            used = set(snap.segments.pool.tolist())
            for i, pool in enumerate(snap.pools):
                if i in used:
                    choices[self.pool_combo].append((pool_label(pool), i))
            for s in sorted(set(snap.segments.stream.tolist())):
                choices[self.stream_combo].append((stream_label(int(s)), int(s)))
        self._choices = choices
        self._syncing = True
        try:
            for combo, items in choices.items():
                combo.clear()
                combo.addItems([text for text, _ in items])
                combo.setEnabled(doc is not None and len(items) > 1)
        finally:
            self._syncing = False

    def _show_selectors(self, sel: Selection) -> None:
        """The selectors showing ``sel``, without the rebuilds their signals would start;
        the selection is what they can show (a value gone becomes "all")."""
        self._syncing = True
        try:
            for combo, value in ((self.device_combo, sel.device), (self.pool_combo, sel.pool),
                                 (self.stream_combo, sel.stream), (self.kind_combo, sel.is_small)):
                combo.setCurrentIndex(max(self.combo_index(combo, value), 0))
        finally:
            self._syncing = False
        self.selection = Selection(device=self._value(self.device_combo),
                                   pool=self._value(self.pool_combo),
                                   stream=self._value(self.stream_combo),
                                   is_small=self._value(self.kind_combo))

    def _value(self, combo: QComboBox):
        items = self._choices.get(combo, [])
        i = combo.currentIndex()
        return items[i][1] if 0 <= i < len(items) else None

    def _on_selector_changed(self, _index: int) -> None:
        if self._syncing:
            return
        old = self.selection
        new = Selection(
            device=self._value(self.device_combo),
            pool=self._value(self.pool_combo),
            stream=self._value(self.stream_combo),
            is_small=self._value(self.kind_combo),
        )
        if (new.device == HOST_DEVICE) != self.vs.host_shown:  # to or from pinned host memory
            self.show_host(new.device == HOST_DEVICE, new.device)
            return
        if self.vs.set_selection(new):  # another device's trace: back to its end
            self._reset_cursor()
        elif (old.stream, old.pool) != (self.selection.stream, self.selection.pool):
            self.timeline.set_filter(self.selection.stream, self.selection.pool)
        self._apply_selection()

    def show_host(self, on: bool, device: int | None = None) -> None:
        """Show the file's pinned host memory as its own document (``on``), or the file's
        GPUs again (``device``: the one to select).  The host document's figures never
        mix with a GPU's: it is another document, not a filter of this one."""
        target = self.vs.host_document() if on else self.vs.file_doc
        if target is None:
            return
        self.vs.set_document(target, host=on)
        if not on:
            self.vs.set_selection(Selection(device=device))
        self._fill_selectors()
        self._show_selectors(self.selection)
        self.header.set_document(target if not on else None)
        self.stack.set_document(target)
        self._reset_cursor()
        self._apply_selection(sort=SORT_ADDRESS)
        self._update_oom_buttons()

    def set_selection(self, selection: Selection) -> None:
        """Set the selectors (and so the selection) programmatically."""
        self._syncing = True
        try:
            for combo, value in ((self.device_combo, selection.device), (self.pool_combo, selection.pool),
                                 (self.stream_combo, selection.stream), (self.kind_combo, selection.is_small)):
                values = [v for _, v in self._choices.get(combo, [])]
                combo.setCurrentIndex(values.index(value) if value in values else 0)
        finally:
            self._syncing = False
        self._on_selector_changed(0)

    def combo_index(self, combo: QComboBox, value) -> int:
        """Index of ``value`` in a selector, -1 if absent."""
        values = [v for _, v in self._choices.get(combo, [])]
        return values.index(value) if value in values else -1

    def _apply_selection(self, sort: str | None = None, keep_view: bool = False) -> None:
        """Show the document at the cursor through the selection."""
        doc, sel = self.view_doc, self.selection
        if doc is None:
            self.header.set_stats(None)
            self.map.set_document(None)
            self.table.set_rows(None, [])
            self.calltree.set_blocks(None, None)
            return
        self.header.set_stats(memory_stats(doc.snap, sel))
        self.header.set_scope(self.vs.scope_text())
        # The OOM ruler belongs to the OOM's moment: drawn only while the map shows it.
        self.map.set_document(doc, sel, sort=sort, fit=not keep_view, oom=self.vs.oom_shown())
        rows = doc.blocks_in(sel)
        self.table.set_rows(doc, rows)
        self.stack.set_document(doc, keep=keep_view)
        self._reselect()
        self._update_banner()
        self._calltree_dirty = True
        self.refresh_calltree()
        self.momentShown.emit()

    def oom_shown(self):
        """The OOM whose request the map draws (see :meth:`ViewState.oom_shown`)."""
        return self.vs.oom_shown()

    def scope_text(self) -> str:
        return self.vs.scope_text()

    def _reselect(self) -> None:
        """Keep the selection across moments: the same allocation (by address) if live."""
        b, by_interval = self.vs.reselect()
        if by_interval:
            self.map.select_block(b, ensure_visible=b >= 0)
            if b >= 0:
                self.table.select_block(b)
        elif b >= 0:
            self.select_block(b, origin="moment")
        else:
            self.map.select_block(-1, ensure_visible=False)
            self.table.select_block(-1)
            if self.stack.custom is None:
                self.stack.show_block(-1)

    def _live_block(self, addr: int) -> int:
        return self.vs.live_block(addr)

    def select_block(self, block: int, origin: str = "") -> None:
        """Select ``block`` (of the document at the cursor) in the map, the table and the stack panel."""
        if self.view_doc is None:
            return
        self.vs.select_block(block, keep_interval=origin == "moment")
        if origin != "moment":
            self.timeline.set_selected_interval(self.vs.interval_of_block(block))
        if origin != "map":
            self.map.select_block(block, ensure_visible=True)
        if origin != "table":
            self.table.select_block(block)
        self.stack.show_block(block, self.vs.interval_details(self.vs.interval_of_block(block)))

    # ------------------------------------------------------------------ time travel
    def set_cursor(self, k: int) -> None:
        """Show the block layout after event ``k`` of the timeline's device, everywhere."""
        self._seek_timer.stop()
        if not self.vs.set_cursor(k):
            return
        self.timeline.set_cursor(self.cursor_k)
        self._apply_selection(keep_view=True)
        self._update_oom_buttons()

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

    def _update_oom_buttons(self) -> None:
        doc, dev = self.doc, self.cursor_device
        ooms = doc.oom_events(dev) if doc is not None and dev is not None else []
        k = self.cursor_k
        tl = self.timeline
        tl.oom_button.setEnabled(bool(ooms))
        tl.oom_button.setText(f"OOM ({len(ooms)})" if len(ooms) > 1 else "OOM")
        tl.prev_oom_button.setVisible(len(ooms) > 1)
        tl.next_oom_button.setVisible(len(ooms) > 1)
        tl.prev_oom_button.setEnabled(any(o < k for o in ooms))
        tl.next_oom_button.setEnabled(any(o > k for o in ooms))
        self.oom_action.setEnabled(bool(ooms))
        self.prev_oom_action.setEnabled(any(o < k for o in ooms))
        self.next_oom_action.setEnabled(any(o > k for o in ooms))
        n = doc.n_events(dev) if doc is not None and dev is not None else 0
        tl.latest_button.setEnabled(n > 0 and k != n - 1)

    def _update_banner(self) -> None:
        doc = self.doc
        if doc is None or doc.oom is None or self.cursor_device is None:
            return
        here = doc.oom_at(self.cursor_device, self.cursor_k)
        ooms = doc.oom_events(self.cursor_device)
        number = ooms.index(self.cursor_k) + 1 if here is not None and self.cursor_k in ooms else 0
        last_k = ooms[-1] if ooms else -1
        self.header.set_moment(doc, here, number, len(ooms), last_k)

    def select_interval(self, i: int) -> None:
        """Select an allocation of the timeline: its stack, and its block if live at the cursor."""
        doc = self.doc
        if doc is None or self.cursor_device is None:
            return
        if self._seek_timer.isActive():  # a click moves the cursor first, then selects
            self._apply_pending_seek()
        iv = doc.intervals(self.cursor_device)
        b = self.vs.select_interval(i)
        self.timeline.set_selected_interval(i)
        live = self.vs.interval_live(i)
        facts = self.timeline.interval_tooltip(i) + (
            "<br><i>live at the cursor: outlined in the map</i>" if live
            else "<br><i>not live at the cursor</i>")
        self.stack.show_stack(int(iv.stack[i]), facts, self.vs.interval_details(i))
        self.map.select_block(b, ensure_visible=b >= 0)
        if b >= 0:
            self.table.select_block(b)

    # ------------------------------------------------------------------ who holds memory
    def refresh_calltree(self, force: bool = False) -> None:
        """Rebuild the call tree (only while it is shown; else on showing it)."""
        if force:
            self._calltree_dirty = True
        if not self._calltree_dirty or self.tabs.currentWidget() is not self.calltree:
            return
        self._calltree_dirty = False
        doc = self.view_doc
        if doc is None:
            self.calltree.set_blocks(None, None)
            return
        dev = self.cursor_device
        if self.calltree.moment() == AT_PEAK and dev is not None and self.timeline.peaks:
            k = self.timeline.peaks["allocated"][1]
            doc = self.doc.at(dev, k)
            caption = f"at the peak of allocated (event {k:,})"
        elif dev is not None:
            caption = f"at the cursor (event {self.cursor_k:,})"
        else:
            caption = "as recorded"
        snap = doc.snap
        mask = self.selection.segment_mask(snap)[snap.blocks.segment] if len(snap.blocks) else None
        self.calltree.set_blocks(doc, mask, caption)

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
            mask = np.zeros(len(doc.snap.stacks), bool)
            ids = np.asarray([s for s in stacks if s >= 0], dtype=np.int64)
            mask[ids] = True
            self.vs.set_node_mask(mask)
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
        self._draw_highlight(self.vs.highlight_mask())

    def _draw_highlight(self, mask) -> None:
        """(``vs.events.highlight``) the views draw the highlighted allocations."""
        self.map.set_highlight(mask)
        self.timeline.set_highlight(mask)

    def _update_status_labels(self) -> None:
        doc = self.doc
        if doc is None:
            for w in (self.file_label, self.format_label, self.settings_label):
                w.setText("")
            self.warnings_button.hide()
            return
        snap = doc.snap
        self.file_label.setText(doc.name)
        self.file_label.setToolTip(snap.path or "")
        self.format_label.setText(snap.source_format)
        conf = str(snap.allocator_settings.get("PYTORCH_CUDA_ALLOC_CONF") or "").strip()
        self.settings_label.setText(f"PYTORCH_CUDA_ALLOC_CONF={conf}" if conf
                                    else "default allocator settings")
        detail = "\n".join(f"{k}: {v}" for k, v in snap.allocator_settings.items()
                           if k != "roundup_power2_divisions")
        self.settings_label.setToolTip("Allocator settings recorded in the snapshot\n" + detail)
        n = len(snap.warnings)
        self.warnings_button.setVisible(n > 0)
        self.warnings_button.setText(f"⚠ {format_count(n)} warning{'s' if n != 1 else ''}")
        self.warnings_button.setToolTip("Skipped while reading (click for the list):\n"
                                        + "\n".join(snap.warnings[:30]))

    def show_warnings(self) -> None:
        if self.doc is None:
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "Snapshot warnings",
                          f"{len(self.doc.snap.warnings)} kinds of entries were skipped while reading "
                          f"{self.doc.name}.", QMessageBox.StandardButton.Ok, self)
        box.setDetailedText("\n".join(self.doc.snap.warnings))
        box.open()

    # ------------------------------------------------------------------ actions
    def _focus_filter(self) -> None:
        self.table.filter.setFocus()
        self.table.filter.selectAll()

    def _zoom(self, factor: float) -> None:
        if self.doc is not None:
            self.map.vb.scaleBy((factor, 1.0))
            self.map.view_auto = False

    def export_map(self, path: str) -> bool:
        """Write the segment map to ``path`` (.svg: vector, else PNG)."""
        if str(path).lower().endswith(".svg"):
            return self.map.export_svg(path)
        return self.map.export_png(path)

    def _export_dialog(self, suffix: str, filt: str) -> None:
        if self.doc is None:
            return
        stem = self.doc.name.split(".")[0] + "-segments." + suffix
        path, _ = QFileDialog.getSaveFileName(self, "Export segment map", stem, filt)
        if not path:
            return
        if not path.lower().endswith("." + suffix):
            path += "." + suffix
        if self.export_map(path):
            self.statusBar().showMessage(f"Exported {path}", 6000)
        else:
            self._show_error("Export failed", f"Could not write {path}")

    def export_png_dialog(self) -> None:
        self._export_dialog("png", "PNG image (*.png)")

    def export_svg_dialog(self) -> None:
        self._export_dialog("svg", "SVG drawing (*.svg)")

    def _quit(self) -> None:
        self.close()  # (close() returns a bool; a slot must not)

    def about(self) -> None:
        QMessageBox.about(self, "About vramscope", about_text())

    # ------------------------------------------------------------------ drag & drop, palette
    def dragEnterEvent(self, event) -> None:
        if _local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        files = _local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.open_file(files[0])

    def changeEvent(self, event) -> None:
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            QTimer.singleShot(0, self.map.apply_palette)
            QTimer.singleShot(0, self.timeline.apply_palette)
        super().changeEvent(event)


def _local_files(mime) -> list[str]:
    if not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and os.path.isfile(u.toLocalFile())]


def about_text() -> str:
    import numpy
    import PySide6
    import pyqtgraph
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
