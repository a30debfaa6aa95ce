"""The main window: header, timeline, segment map, Blocks table / call tree and stack panel.

Time travel: the timeline's cursor picks an event of one device's trace; the
window then shows ``doc.at(device, k)`` (the snapshot replayed to just after
that event) everywhere: header figures, segment map, table, stack panel and
call tree.  The cursor starts at the end, which is the snapshot as recorded.

What is shown is :attr:`MainWindow.vs`, a Qt-free :class:`ViewState`.  Each view takes
it in its constructor and subscribes itself to the events it draws (napari's ``qt_*``
widgets): the header, the timeline, the segment map, the Blocks table, the stack panel,
the call tree and the toolbar's selectors.  The window subscribes first to ``document``
(to show the page with the views before they draw it) and after them for what spans
several views: the picked block or allocation (drawn in four views, depending on
the view it was picked in), the call tree's contents (built only while its tab shows),
the actions' enabled state and :attr:`MainWindow.momentShown`.  The events call their
subscribers in connection order, so the views have drawn a moment before the window
re-applies the picks to it.

The class is long because it is one thing: the window with its menus, its files in and
out (open, recent, load progress, compare, ranks, export, warnings) and time travel.
"""

from __future__ import annotations

import gc
import importlib.resources
import os
import sys
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QActionGroup, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...model.core.units import format_bytes, format_count, plural
from ...model.view.document import Document
from ...model.view.map_layout import SORT_ADDRESS, SORT_FREE, SORT_SIZE
from ...model.view.view_state import ViewState
from ..segment_map import SegmentMapView
from ..timeline import TimelinePanel
from ..widgets import settings as st
from ..widgets.actions import make_action
from ..widgets.loader import STAGE_TEXT, LoadThread
from ..widgets.stack_panel import StackPanel
from .calltree_panel import AT_PEAK, CallTreePanel
from .header import SummaryHeader
from .selectors import Selectors
from .table import AllocationsTable

# The status bar's permanent labels: at most this wide, elided (the whole text in the
# tooltip), so that a long file name never runs into the allocator settings beside it.
FILE_LABEL_WIDTH = 320
SETTINGS_LABEL_WIDTH = 360
PLACEHOLDER = "Open a snapshot (Ctrl+O) or drop a file here"
FILE_FILTER = (
    "Memory snapshots (*.pickle *.pkl *.pickle.gz *.pickle.xz *.pickle.bz2 *.gz *.xz "
    "*.bz2 *.json);;All files (*)"
)


def app_icon() -> QIcon:
    """vramscope's icon (an empty icon where the package data is missing)."""
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
    # itself imports nothing live (no import cycle window <-> live controller).  Called
    # with the window; returns the dialog it opened, which the window keeps.
    attach_handler = None
    # File > Open remote: set like attach_handler (the ssh side lives in ``live``).
    remote_handler = None

    def __init__(self, persist: bool = True, parent=None) -> None:
        super().__init__(parent)
        self.persist = persist
        self.vs = ViewState()
        # First of the document's subscribers: the page with the views shows before they
        # draw the document.
        self.vs.events.document.connect(self._on_document)
        self.live = None  # the LiveController feeding this window, if any
        self.aux_windows: list = []  # windows opened from here, kept alive while open
        self.attach_dialog = None  # File > Attach's dialog, once opened
        self._calltree_dirty = True
        self.last_error: str | None = None
        self.error_box: QMessageBox | None = None
        self.loader: LoadThread | None = None
        self._old_loaders: list[LoadThread] = []
        self.setWindowTitle("vramscope")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)
        self.setMinimumSize(QSize(640, 400))
        self._build_widgets()
        self._build_menus()
        self._build_fix_button()
        self._build_toolbar()
        self._build_status()
        self._subscribe()
        from ..categories.wiring import CategoriesWiring

        # What the memory is: the "What it is" tab, colours, phase bands, the header's split.
        self.categories_wiring = CategoriesWiring(self)
        self.categories = self.categories_wiring.cv
        self.resize(1440, 900)
        if persist:
            self._restore_settings()
        self.show_document(None)

    # ------------------------------------------------------------------ building
    def _build_widgets(self) -> None:
        # Each view subscribes to the view state as it is built: this order is the order
        # in which they draw a moment (the header, then the map, the table, the stack).
        vs = self.vs
        self.header = SummaryHeader(vs)
        self.timeline = TimelinePanel(vs)
        self.map = SegmentMapView(vs)
        self.table = AllocationsTable(vs)
        self.calltree = CallTreePanel(vs)
        self.stack = StackPanel(vs)
        self.map.blockClicked.connect(lambda b: self.select_block(b, origin="map"))
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
        self.tabs.setTabToolTip(
            0,
            "Every block at the cursor (allocated, pending free and free), "
            "sortable, filtered by the search",
        )
        self.tabs.setTabToolTip(
            1, "Who holds memory: live bytes grouped by the stack that allocated them"
        )
        self.tabs.currentChanged.connect(lambda _i: self.refresh_calltree())
        # The search box lives in the toolbar; it filters the table and
        # highlights matches in the map and the timeline.
        self.search = self.table.filter
        self.table.layout().itemAt(0).layout().removeWidget(self.search)
        self.search.setPlaceholderText("search frames… (Ctrl+F)")
        self.search.setToolTip(
            "Allocations whose call stack has a frame whose file or function "
            "contains this text: highlighted in the map and the timeline, "
            "the only rows of the table (Ctrl+F)"
        )
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
        sub = QLabel(
            "A PyTorch CUDA memory snapshot: torch.cuda.memory._dump_snapshot(), "
            "or `vramscope record script.py`.\nvramscope shows why memory ran out: "
            "free memory scattered in gaps too small for the request."
        )
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

    def _build_menus(self) -> None:
        """The menus and their actions: which exist, their shortcuts and tooltips."""
        mb = self.menuBar()
        m = mb.addMenu("&File")
        self.open_action = make_action(
            self,
            "&Open…",
            self.open_dialog,
            QKeySequence.StandardKey.Open,
            "Open a memory snapshot",
        )
        m.addAction(self.open_action)
        self.recent_menu = m.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        self._fill_recent_menu()
        self.open_remote_action = make_action(
            self,
            "Open re&mote…",
            self._open_remote,
            "Ctrl+Shift+O",
            "Open a snapshot on another machine through ssh: ssh://user@host/path",
        )
        m.addAction(self.open_remote_action)
        # Compare snapshots and ranks: separate windows over the model.
        self.compare_action = make_action(
            self,
            "&Compare with…",
            self.compare_dialog,
            tip=("Compare this snapshot (A) with another (B): what grew, by allocation stack"),
        )
        self.ranks_action = make_action(
            self,
            "Open &directory of ranks…",
            self.open_ranks_dialog,
            tip=("One row per rank of a torchrun capture directory, outlier ranks flagged"),
        )
        m.addAction(self.compare_action)
        m.addAction(self.ranks_action)
        # File > Attach... and Tools > What-if... / Diagnosis...: the actions are here from
        # the start, their modules (~10 ms of imports: the live client, the simulator)
        # load when first used, not with every window.
        self.attach_action = make_action(
            self,
            "&Attach to running process…",
            self._open_attach,
            "Ctrl+Shift+A",
            "Watch a running PyTorch process's GPU memory live, or save a snapshot from it",
        )
        m.addAction(self.attach_action)
        m.addSeparator()
        self.export_png_action = make_action(
            self,
            "Export segment map as &PNG…",
            self.export_png_dialog,
            tip="Save the segment map as a PNG image",
        )
        self.export_svg_action = make_action(
            self,
            "Export segment map as &SVG…",
            self.export_svg_dialog,
            tip="Save the segment map as an SVG drawing",
        )
        m.addAction(self.export_png_action)
        m.addAction(self.export_svg_action)
        self.export_report_action = make_action(
            self,
            "Export &report…",
            self.export_report_dialog,
            "Ctrl+E",
            "Save one self-contained HTML page to attach to a bug report: the figures, the "
            "OOM verdict, what the memory is, the remedies and images of the views",
        )
        m.addAction(self.export_report_action)
        m.addSeparator()
        m.addAction(
            make_action(self, "&Quit", self._quit, QKeySequence.StandardKey.Quit, "Quit vramscope")
        )

        e = mb.addMenu("&Edit")
        self.copy_stack_action = make_action(
            self,
            "&Copy stack",
            self.stack.copy,
            QKeySequence.StandardKey.Copy,
            "Copy the selected block's stack as text",
        )
        e.addAction(self.copy_stack_action)
        self.copy_map_action = make_action(
            self,
            "Copy segment &map image",
            self.map.copy_image,
            "Ctrl+Shift+C",
            "Copy the segment map to the clipboard",
        )
        e.addAction(self.copy_map_action)
        e.addAction(
            make_action(
                self,
                "&Search frames",
                self._focus_filter,
                QKeySequence.StandardKey.Find,
                "Highlight and filter the allocations by stack text",
            )
        )

        v = mb.addMenu("&View")
        self.fit_action = make_action(
            self, "&Fit segment map", self.map.fit, "Ctrl+0", "Show every segment"
        )
        v.addAction(self.fit_action)
        self.home_action = make_action(
            self,
            "&Readable rows",
            self.map.home,
            "Ctrl+9",
            "Rows tall enough to read, from the top",
        )
        v.addAction(self.home_action)
        v.addAction(
            make_action(
                self,
                "Zoom &in",
                lambda: self._zoom(0.5),
                QKeySequence.StandardKey.ZoomIn,
                "Zoom the segment map in",
            )
        )
        v.addAction(
            make_action(
                self,
                "Zoom &out",
                lambda: self._zoom(2.0),
                QKeySequence.StandardKey.ZoomOut,
                "Zoom the segment map out",
            )
        )
        v.addSeparator()
        group = QActionGroup(self)
        self.sort_address_action = make_action(
            self,
            "Rows by &address",
            lambda: self.map.set_sort(SORT_ADDRESS),
            "Ctrl+1",
            "Segments in address order",
        )
        self.sort_size_action = make_action(
            self,
            "Rows by &size",
            lambda: self.map.set_sort(SORT_SIZE),
            "Ctrl+2",
            "Largest segments first",
        )
        self.sort_free_action = make_action(
            self,
            "Rows by largest &free gap",
            lambda: self.map.set_sort(SORT_FREE),
            "Ctrl+3",
            "Segments with the largest free gaps first",
        )
        for a in (self.sort_address_action, self.sort_size_action, self.sort_free_action):
            a.setCheckable(True)
            group.addAction(a)
            v.addAction(a)
        self.sort_address_action.setChecked(True)
        self.map.sortChanged.connect(self._on_sort_changed)

        t = mb.addMenu("&Timeline")
        self.peak_action = make_action(
            self,
            "Jump to peak &allocated",
            lambda: self.jump_to_peak("allocated"),
            "Ctrl+Shift+P",
            "Move the cursor to the peak of allocated memory",
        )
        self.peak_reserved_action = make_action(
            self,
            "Jump to peak &reserved",
            lambda: self.jump_to_peak("reserved"),
            "Ctrl+Shift+R",
            "Move the cursor to the event after which the shown device's reserved memory peaks",
        )
        self.oom_action = make_action(
            self,
            "Jump to &OOM",
            self.jump_to_oom,
            "Ctrl+J",
            "Move the cursor to the last out-of-memory event",
        )
        self.prev_oom_action = make_action(
            self,
            "&Previous OOM",
            lambda: self.jump_to_oom(-1),
            "Ctrl+[",
            "The OOM before the cursor",
        )
        self.next_oom_action = make_action(
            self, "&Next OOM", lambda: self.jump_to_oom(+1), "Ctrl+]", "The OOM after the cursor"
        )
        self.latest_action = make_action(
            self,
            "&Latest (as recorded)",
            self.go_latest,
            "Ctrl+End",
            "Back to the snapshot as recorded (the end of the trace)",
        )
        self.step_back_action = make_action(
            self,
            "Step &back",
            lambda: self.step_cursor(-1),
            "Alt+Left",
            "One event back (in the timeline: Left; Shift: 100)",
        )
        self.step_fwd_action = make_action(
            self,
            "Step &forward",
            lambda: self.step_cursor(+1),
            "Alt+Right",
            "One event forward (in the timeline: Right; Shift: 100)",
        )
        self.xaxis_action = make_action(
            self,
            "Toggle x axis: &time / events",
            self.timeline.toggle_mode,
            "Ctrl+T",
            "Show the timeline against time or event index",
        )
        self.timeline_actions = (
            self.peak_action,
            self.peak_reserved_action,
            self.oom_action,
            self.prev_oom_action,
            self.next_oom_action,
            self.latest_action,
            self.step_back_action,
            self.step_fwd_action,
            self.xaxis_action,
        )
        for i, a in enumerate(self.timeline_actions):
            if i in (3, 6, 8):
                t.addSeparator()
            t.addAction(a)

        self.whatif_action = make_action(
            self,
            "&What-if: other allocator settings…",
            self._open_whatif,
            "Ctrl+Shift+W",
            "Replay this trace through a model of the caching allocator under other "
            "PYTORCH_CUDA_ALLOC_CONF settings: peak memory, fragmentation, OOMs",
        )
        self.whatif_action.setEnabled(False)
        self.diagnosis_action = make_action(
            self,
            "&Diagnosis: what would make it fit…",
            self._open_diagnosis,
            "Ctrl+Shift+D",
            "Rank the changes that would make this run fit (smaller batch, allocator "
            "settings, freeing what is kept, checkpointing, ...) by predicted peak memory",
        )
        self.diagnosis_action.setEnabled(False)
        self.documentChanged.connect(self._enable_document_actions)
        tools = mb.addMenu("T&ools")
        tools.addAction(self.whatif_action)
        tools.addAction(self.diagnosis_action)
        h = mb.addMenu("&Help")
        self.shortcuts_action = make_action(
            self,
            "&Keyboard shortcuts",
            self.show_shortcuts,
            "Ctrl+/",
            "Every shortcut of this window",
        )
        self.record_help_action = make_action(
            self,
            "How to &record a snapshot",
            self.show_record_help,
            tip="The command line and the torch calls that write a snapshot",
        )
        h.addAction(self.shortcuts_action)
        h.addAction(self.record_help_action)
        h.addSeparator()
        h.addAction(make_action(self, "&About vramscope", self.about, tip="Versions and license"))

        self.cancel_action = make_action(
            self, "Cancel loading", self._cancel_clicked, "Esc", "Cancel the load"
        )
        self.cancel_action.setEnabled(False)
        self.addAction(self.cancel_action)

    def _build_fix_button(self) -> None:
        """ "What would fix it?" beside the OOM banner: Tools > Diagnosis in one click."""
        from ..diagnosis.panel import banner_button

        self.fix_button = banner_button(self.diagnosis_action)
        self.header.add_beside_banner(self.fix_button)

    def _build_toolbar(self) -> None:
        tb = self.addToolBar("Selection")
        tb.setObjectName("selectionToolbar")
        tb.setMovable(False)
        tb.addAction(self.open_action)
        tb.addSeparator()
        self.selectors = Selectors(self.vs, self)
        self.device_combo = self.selectors.device_combo
        self.pool_combo = self.selectors.pool_combo
        self.stream_combo = self.selectors.stream_combo
        self.kind_combo = self.selectors.kind_combo
        for combo in self.selectors.combos:
            tb.addWidget(combo)
        tb.addSeparator()
        tb.addWidget(self.search)

    def _build_status(self) -> None:
        sb = self.statusBar()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setMaximumWidth(260)
        self.progress.setTextVisible(True)
        self.progress.setToolTip("Loading: reading bytes, parsing, building columns")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop loading (Esc)")
        self.cancel_button.clicked.connect(self._cancel_clicked)
        self.file_label = QLabel()
        self.file_label.setToolTip("The open snapshot")
        self.format_label = QLabel()
        self.format_label.setToolTip("File format as detected from its content")
        self.settings_label = QLabel()
        self.warnings_button = QToolButton()
        self.warnings_button.setAutoRaise(True)
        self.warnings_button.clicked.connect(self.show_warnings)
        for widget in (
            self.progress,
            self.cancel_button,
            self.file_label,
            self.format_label,
            self.settings_label,
            self.warnings_button,
        ):
            sb.addPermanentWidget(widget)
        self.progress.hide()
        self.cancel_button.hide()

    def _subscribe(self) -> None:
        """The window's own subscriptions, after its views' (see the module docstring)."""
        ev = self.vs.events
        ev.trace.connect(self._on_trace)
        ev.cursor.connect(self._on_cursor)
        ev.moment.connect(self._on_moment)
        ev.selected.connect(self._on_selected)

    # ------------------------------------------------------------------ the view state
    def _on_document(self, doc: Document | None) -> None:
        if self.vs.origin == "host":
            return  # (the file's pinned host memory: the same file, the same page)
        self.pages.setCurrentIndex(0 if doc is None else 1)
        for a in (
            self.export_png_action,
            self.export_svg_action,
            self.copy_map_action,
            self.fit_action,
            self.export_report_action,
        ):
            a.setEnabled(doc is not None)

    def _enable_document_actions(self, doc: Document | None) -> None:
        """(``documentChanged``) what needs a document: compare, what-if, diagnosis."""
        for a in (self.compare_action, self.whatif_action, self.diagnosis_action):
            a.setEnabled(doc is not None)

    def _on_trace(self, device: int | None) -> None:
        for a in self.timeline_actions:
            a.setEnabled(device is not None)
        self._show_oom_controls()

    def _on_cursor(self, _device: int | None, _k: int) -> None:
        self._show_oom_controls()

    def _show_oom_controls(self) -> None:
        """The timeline's OOM / Latest buttons and the OOM actions, for the cursor."""
        m = self.vs.oom_marks()
        self.timeline.show_oom_marks(m)
        self.oom_action.setEnabled(m.count > 0)
        self.prev_oom_action.setEnabled(m.before)
        self.next_oom_action.setEnabled(m.after)

    def _on_moment(self, _keep_view: bool) -> None:
        """After the views drew the moment: the picks at it, the call tree, then
        :attr:`momentShown` (all of one moment)."""
        if self.vs.view_doc is None:
            self.calltree.set_blocks(None, None)
            return
        self.vs.repick()  # the picked allocation at this moment (drawn by _on_selected)
        self._calltree_dirty = True
        self.refresh_calltree()
        self.momentShown.emit()

    def _on_selected(self, b: int, i: int) -> None:
        """The picked block / allocation in the map, the table, the timeline and the stack
        panel (the view it was picked in shows it already)."""
        vs = self.vs
        origin = vs.pick_origin
        if origin == "interval":
            self.timeline.set_selected_interval(i)
            iv = vs.doc.intervals(vs.cursor_device)
            facts = self.timeline.interval_tooltip(i) + (
                "<br><i>live at the cursor: outlined in the map</i>"
                if vs.interval_live(i)
                else "<br><i>not live at the cursor</i>"
            )
            self.stack.show_stack(int(iv.stack[i]), facts, vs.interval_details(i))
        if origin in ("interval", "moment-interval"):
            self.map.select_block(b, ensure_visible=b >= 0)
            if b >= 0:
                self.table.select_block(b)
            return
        if origin == "moment-none":
            self.map.select_block(-1, ensure_visible=False)
            self.table.select_block(-1)
            if self.stack.custom is None:
                self.stack.show_block(-1)
            return
        if origin != "moment":
            self.timeline.set_selected_interval(vs.interval_of_block(b))
        if origin != "map":
            self.map.select_block(b, ensure_visible=True)
        if origin != "table":
            self.table.select_block(b)
        self.stack.show_block(b, vs.interval_details(vs.interval_of_block(b)))

    # ------------------------------------------------------------------ other windows
    def _open_attach(self) -> None:
        handler = type(self).attach_handler
        if handler is not None:
            self.attach_dialog = handler(self)

    def _open_remote(self) -> None:
        handler = type(self).remote_handler
        if handler is not None:
            handler(self)

    def add_aux_window(self, w) -> None:
        """Keep ``w`` (a compare, ranks, live window or a panel opened from here) alive
        while open."""
        self.aux_windows.append(w)
        w.destroyed.connect(
            lambda *_: self.aux_windows.remove(w) if w in self.aux_windows else None
        )

    def _open_whatif(self) -> None:
        from ..whatif.panel import open_panel

        open_panel(self)

    def _open_diagnosis(self) -> None:
        from ..diagnosis.panel import open_panel

        open_panel(self)

    def compare_dialog(self) -> None:
        start = os.path.dirname(self.doc.snap.path) if self.doc and self.doc.snap.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Compare with snapshot (B)", start, FILE_FILTER)
        if path:
            self.compare_with(path)

    def compare_with(self, path: str):
        """A Diff window: the open snapshot as recorded (A) against ``path`` (B)."""
        from ..compare.diff_window import DiffWindow

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
        from ..ranks.window import RanksWindow

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

    # ------------------------------------------------------------------ settings
    def _restore_settings(self) -> None:
        s = st.settings()
        geo = s.value("window/geometry")
        if isinstance(geo, QByteArray) and not geo.isEmpty():
            self.restoreGeometry(geo)
        state = s.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        for key, split in (
            ("window/mainSplit3", self.main_split),
            ("window/bottomSplit", self.bottom_split),
        ):
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

    # ------------------------------------------------------------------ recent files
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

    # ------------------------------------------------------------------ loading
    def open_dialog(self) -> None:
        start = os.path.dirname(st.recent_files()[0]) if self.persist and st.recent_files() else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open memory snapshot", start, FILE_FILTER)
        if path:
            self.open_file(path)

    def is_loading(self) -> bool:
        return self.loader is not None

    def open_file(
        self,
        path: str,
        make_loader: Callable[[str, MainWindow], LoadThread] | None = None,
        *,
        name: str | None = None,
        status: str | None = None,
    ) -> LoadThread:
        """Start loading ``path`` on a worker thread; the current view stays until it is done.

        ``make_loader(path, window)`` makes the thread in place of a :class:`LoadThread`
        (File ▸ Open remote's ssh reader); ``name`` is shown in the progress bar (default:
        the file's name), ``status`` in the status bar (default: ``Loading PATH…``)."""
        if self.loader is not None:
            self.cancel_load(quiet=True)
        path = os.fspath(path)
        if make_loader is None:
            t = LoadThread(path, self)
            t.defer_store = True  # closeEvent waits for it: the cache is written after the window
        else:
            t = make_loader(path, self)
        t.progressed.connect(self._on_progress)
        t.done.connect(self._on_loaded)
        t.failed.connect(self._on_failed)
        t.cancelled.connect(self._on_cancelled)
        t.finished.connect(self._on_thread_finished)
        self.loader = t
        self.progress.setValue(0)
        self.progress.setFormat(f"Opening {Path(path).name if name is None else name}… %p%")
        self.progress.show()
        self.cancel_button.show()
        self.cancel_action.setEnabled(True)
        self.statusBar().showMessage(f"Loading {path}…" if status is None else status)
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
        self.statusBar().showMessage(f"Loaded {doc.name}", 8000)
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
        box = QMessageBox(
            QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self
        )
        if detail:
            box.setInformativeText(detail)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        self.error_box = box
        box.open()  # non-blocking

    # ------------------------------------------------------------------ status bar
    def _update_status_labels(self) -> None:
        doc = self.doc
        if doc is None:
            for w in (self.file_label, self.format_label, self.settings_label):
                w.setText("")
            self.warnings_button.hide()
            return
        snap = doc.snap
        set_elided(self.file_label, doc.name, FILE_LABEL_WIDTH, snap.path or doc.name)
        self.format_label.setText(snap.source_format)
        conf = str(snap.allocator_settings.get("PYTORCH_CUDA_ALLOC_CONF") or "").strip()
        text = f"PYTORCH_CUDA_ALLOC_CONF={conf}" if conf else "default allocator settings"
        detail = "\n".join(
            f"{k}: {v}"
            for k, v in snap.allocator_settings.items()
            if k != "roundup_power2_divisions"
        )
        set_elided(
            self.settings_label,
            text,
            SETTINGS_LABEL_WIDTH,
            f"{text}\n\nAllocator settings recorded in the snapshot\n{detail}",
        )
        n = len(snap.warnings)
        self.warnings_button.setVisible(n > 0)
        self.warnings_button.setText(f"⚠ {format_count(n)} warning{'s' if n != 1 else ''}")
        self.warnings_button.setToolTip(
            "Skipped while reading (click for the list):\n" + "\n".join(snap.warnings[:30])
        )

    def show_warnings(self) -> None:
        if self.doc is None:
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Snapshot warnings",
            f"{len(self.doc.snap.warnings)} kinds of entries were skipped while "
            f"reading {self.doc.name}.",
            QMessageBox.StandardButton.Ok,
            self,
        )
        box.setDetailedText("\n".join(self.doc.snap.warnings))
        box.open()

    # ------------------------------------------------------------------ export
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

    def export_report_dialog(self) -> None:
        """File > Export report…: ask where (starting in the folder last written to)."""
        from .report_export import last_folder

        if self.doc is None:
            return
        name = self.doc.name.split(".")[0] + "-report.html"
        start = os.path.join(last_folder(), name) if self.persist and last_folder() else name
        path, _ = QFileDialog.getSaveFileName(self, "Export report", start, "HTML page (*.html)")
        if not path:
            return
        if not path.lower().endswith((".html", ".htm")):
            path += ".html"
        self.export_report(path)

    def export_report(self, path: str, remedies: bool = True, devices: list[int] | None = None):
        """Write the HTML report of the open document to ``path`` off the GUI thread
        (``remedies``: compute them when no Diagnosis panel has; ``devices``: only
        theirs, else every device's section); the :class:`~.report_export.ReportExport`
        (its ``finished(outcome, detail)``)."""
        from .report_export import ReportExport, remember_folder

        if self.doc is None:
            return None
        export = ReportExport(self, os.fspath(path), remedies, devices)

        def ended(outcome: str, detail: str) -> None:
            if outcome == "done":
                if self.persist:
                    remember_folder(detail)
                self.statusBar().showMessage(f"Exported {detail}", 8000)
            elif outcome == "failed":
                self._show_error(
                    "Export failed", f"Could not write the report: {detail}", os.fspath(path)
                )
            else:
                self.statusBar().showMessage("Report export cancelled", 4000)
            export.deleteLater()

        export.finished.connect(ended)
        self.report_export = export
        export.start()
        return export

    # ------------------------------------------------------------------ help
    def show_shortcuts(self):
        """Help > Keyboard shortcuts: every action's shortcut, read from the actions."""
        from .help_dialogs import ShortcutsDialog

        dialog = ShortcutsDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def show_record_help(self):
        """Help > How to record a snapshot."""
        from .help_dialogs import RecordDialog

        dialog = RecordDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    # ------------------------------------------------------------------ document
    def show_document(self, doc: Document | None) -> None:
        """Open ``doc``: the views draw it from the view state's events."""
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
        stacks = (
            self.calltree.current_stacks() if self.tabs.currentWidget() is self.calltree else None
        )
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

    # ------------------------------------------------------------------ selectors
    def set_selection(self, selection) -> None:
        """Set the selectors (and so the selection) programmatically."""
        self.selectors.set_selection(selection)

    def show_host(self, on: bool, device: int | None = None) -> None:
        """Show the file's pinned host memory as its own document (``on``), or the file's
        GPUs again (``device``: the one to select).  The host document's figures never
        mix with a GPU's: it is another document, not a filter of this one."""
        self.vs.show_host(on, device)

    def combo_index(self, combo, value) -> int:
        """Index of ``value`` in a selector, -1 if absent."""
        return self.selectors.combo_index(combo, value)

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
            facts = (
                f"<b>call tree</b>: <tt>{_html(node.label)}</tt> · {format_bytes(node.bytes)} "
                f"in {plural(node.count, 'block')} · {plural(len(node.stacks), 'stack')}<br>"
                "The stack holding most of these bytes; its blocks are highlighted."
            )
            self.stack.show_stack(best, facts)

    def _on_search_applied(self, text: str) -> None:
        self.vs.set_search_mask(self.table.stack_mask if text else None)

    def highlight_mask(self):
        """Per stack: highlighted in the map and the timeline (None: nothing highlighted)."""
        return self.vs.highlight_mask()

    # ------------------------------------------------------------------ small actions
    def _focus_filter(self) -> None:
        self.table.filter.setFocus()
        self.table.filter.selectAll()

    def _zoom(self, factor: float) -> None:
        if self.doc is not None:
            self.map.vb.scaleBy((factor, 1.0))
            self.map.view_auto = False

    def _on_sort_changed(self, sort: str) -> None:
        {SORT_SIZE: self.sort_size_action, SORT_FREE: self.sort_free_action}.get(
            sort, self.sort_address_action
        ).setChecked(True)

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


def about_text() -> str:
    """Help > About: the version and those of the libraries it runs on."""
    import numpy
    import pyqtgraph
    import PySide6
    from PySide6.QtCore import qVersion

    from ... import __version__

    return (
        f"<h3>vramscope {__version__}</h3>"
        "<p>See why your GPU ran out of memory: free memory scattered in gaps too small "
        "for the request.</p>"
        f"<p>Qt {qVersion()}<br>PySide6 {PySide6.__version__}<br>pyqtgraph {pyqtgraph.__version__}"
        f"<br>numpy {numpy.__version__}<br>Python {sys.version.split()[0]}</p>"
    )


def set_elided(label: QLabel, text: str, width: int, tip: str | None = None) -> None:
    """``text`` in ``label``, cut in the middle (the end of a file name stays) to at most
    ``width`` pixels; the whole of it in the tooltip (``tip`` when given)."""
    label.setMaximumWidth(width)
    shown = label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, width - 4)
    label.setText(shown)
    label.setToolTip(tip if tip is not None else text)
    label.setAccessibleName(text)


def _local_files(mime) -> list[str]:
    if not mime.hasUrls():
        return []
    return [
        u.toLocalFile() for u in mime.urls() if u.isLocalFile() and os.path.isfile(u.toLocalFile())
    ]


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
