"""The main window: header, timeline, segment map, Blocks table / call tree and stack panel.

Time travel: the timeline's cursor picks an event of one device's trace; the
window then shows ``doc.at(device, k)`` (the snapshot replayed to just after
that event) everywhere: header figures, segment map, table, stack panel and
call tree.  The cursor starts at the end, which is the snapshot as recorded.

What is shown is :attr:`MainWindow.vs`, a Qt-free :class:`ViewState`: the document,
the selection, the cursor and the picks have one name each, ``window.vs.<field>``.
Each view takes it in its constructor and subscribes itself to the events it draws
(napari's ``qt_*`` widgets): the header, the timeline, the segment map, the Blocks
table, the stack panel, the call tree and the toolbar's selectors.  The window
subscribes first to ``document`` (to show the page with the views before they draw it)
and after them for what spans several views: the picked block or allocation (drawn in
four views, depending on the view it was picked in), the call tree's contents (built
only while its tab shows), the actions' enabled state and :attr:`MainWindow.momentShown`.
The events call their subscribers in connection order, so the views have drawn a moment
before the window re-applies the picks to it.

Around it: its menus, declared as data (``menus``), where its views go and the geometry
it remembers (``layout``), its status bar (``status_bar``), the load lifecycle
(``loading``) and the exports (``exports``).
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Callable

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QMainWindow, QMessageBox

from ...model.view.document import Document
from ...model.view.map_layout import SORT_FREE, SORT_SIZE
from ...model.view.view_state import ViewState
from ..segment_map import SegmentMapView
from ..timeline import TimelinePanel
from ..widgets.loader import LoadThread
from ..widgets.stack_panel import StackPanel
from . import layout
from .calltree_panel import AT_PEAK, CallTreePanel, node_facts
from .exports import ExportController
from .header import SummaryHeader
from .loading import LoadController
from .menus import DOCUMENT, PAGE, TRACE, build_menus, enable_actions
from .status_bar import build_status_bar, update_status_labels
from .table import AllocationsTable
from .tool_windows import ToolWindows


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


class MainWindow(QMainWindow):
    """``persist=False`` (screenshots) neither reads nor writes settings.

    What is shown is :attr:`vs` (a Qt-free :class:`ViewState`); :attr:`loading` opens
    files into it, :attr:`exports` writes it out.
    """

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
        self.last_error: str | None = None  # why the last load failed (None: it did not)
        self.error_box: QMessageBox | None = None  # the last error shown
        self.loading = LoadController(self)
        self.exports = ExportController(self)
        self.tools = ToolWindows(self)
        self.setWindowTitle("vramscope")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)
        self.setMinimumSize(QSize(640, 400))
        self._build_views()
        layout.build_pages(self)
        self.tabs.currentChanged.connect(lambda _i: self.refresh_calltree())
        build_menus(self)
        self.map.sortChanged.connect(self._on_sort_changed)
        self.documentChanged.connect(lambda doc: enable_actions(self, DOCUMENT, doc is not None))
        self._build_fix_button()
        layout.build_toolbar(self)
        build_status_bar(self)
        self._subscribe()
        from ..categories.wiring import CategoriesWiring

        # What the memory is: the "What it is" tab, colours, phase bands, the header's split.
        self.categories_wiring = CategoriesWiring(self)
        self.categories = self.categories_wiring.cv
        self.resize(1440, 900)
        if persist:
            layout.restore_geometry(self)
        self.show_document(None)

    # ------------------------------------------------------------------ building
    def _build_views(self) -> None:
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

    def _build_fix_button(self) -> None:
        """ "What would fix it?" beside the OOM banner: Tools > Diagnosis in one click."""
        from ..diagnosis.banner import banner_button  # (not the panel: see there)

        self.fix_button = banner_button(self.diagnosis_action)
        self.header.add_beside_banner(self.fix_button)

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
        enable_actions(self, PAGE, doc is not None)

    def _on_trace(self, device: int | None) -> None:
        enable_actions(self, TRACE, device is not None)
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
    def add_aux_window(self, w) -> None:
        """Keep ``w`` (a compare, ranks, live window or a panel opened from here) alive
        while open."""
        self.aux_windows.append(w)
        w.destroyed.connect(
            lambda *_: self.aux_windows.remove(w) if w in self.aux_windows else None
        )

    def compare_with(self, path: str):
        """A Diff window: the open snapshot as recorded (A) against ``path`` (B)."""
        return self.tools.compare_with(path)

    def open_ranks(self, directory: str):
        """A Ranks window over ``directory``; double-clicking a rank opens it here."""
        return self.tools.open_ranks(directory)

    # ------------------------------------------------------------------ files in and out
    # The window's entry points (the commands, the application, the live side call
    # them); ``loading`` and ``exports`` do the work.
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
        return self.loading.open_file(path, make_loader, name=name, status=status)

    def is_loading(self) -> bool:
        """A load is in flight."""
        return self.loading.loader is not None

    def cancel_load(self, quiet: bool = False) -> None:
        """Cancel the load in flight (``quiet``: superseded, its end not reported)."""
        self.loading.cancel(quiet)

    def export_map(self, path: str) -> bool:
        """Write the segment map to ``path`` (.svg: vector, else PNG)."""
        return self.exports.export_map(path)

    def export_report(self, path: str, remedies: bool = True, devices: list[int] | None = None):
        """Write the HTML report of the open document to ``path`` off the GUI thread
        (``remedies``: compute them when no Diagnosis panel has; ``devices``: only
        theirs, else every device's section); the :class:`~.report_export.ReportExport`
        (its ``finished(outcome, detail)``)."""
        return self.exports.export_report(path, remedies, devices)

    def show_error(self, title: str, message: str, detail: str = "") -> None:
        """An error box over the window, not blocking it (:attr:`error_box`)."""
        box = QMessageBox(
            QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self
        )
        if detail:
            box.setInformativeText(detail)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        self.error_box = box
        box.open()  # non-blocking

    # ------------------------------------------------------------------ document
    def show_document(self, doc: Document | None) -> None:
        """Open ``doc``: the views draw it from the view state's events."""
        old = self.vs.doc
        self.vs.set_document(doc)
        update_status_labels(self)
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
        old = self.vs.doc
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
            self.vs.node_mask = self.vs.stacks_mask(doc, stacks)
        self.vs.set_search_mask(self.table.stack_mask if self.search.text().strip() else None)
        update_status_labels(self)
        del old
        self.documentChanged.emit(doc)

    def select_block(self, block: int, origin: str = "") -> None:
        """Select ``block`` (of the document at the cursor) in the map, the table and the
        stack panel; ``origin``: the view it was picked in ("moment": by the cursor)."""
        if self.vs.view_doc is None:
            return
        self.vs.select_block(block, keep_interval=origin == "moment", origin=origin)

    # ------------------------------------------------------------------ selectors
    def set_selection(self, selection) -> None:
        """Set the selectors (and so the selection) programmatically."""
        self.selectors.set_selection(selection)

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
        if self.vs.cursor_device is not None:
            self.set_cursor(self.vs.cursor_k + delta)

    def go_latest(self) -> None:
        """Back to the snapshot as recorded: the end of the trace."""
        if self.vs.cursor_device is not None:
            self.set_cursor(self.vs.doc.n_events(self.vs.cursor_device) - 1)

    def jump_to_peak(self, curve: str = "allocated") -> None:
        """The cursor to the event after which ``curve`` (of the shown stream) peaks."""
        if self.vs.cursor_device is None or not self.timeline.peaks:
            return
        self.set_cursor(self.timeline.peaks[curve][1])

    def jump_to_oom(self, direction: int = 0) -> None:
        """0: the last OOM; -1 / +1: the one before / after the cursor."""
        if self.vs.cursor_device is None:
            return
        if not self.vs.doc.oom_events(self.vs.cursor_device):
            self.statusBar().showMessage("No out-of-memory event in this trace", 4000)
            return
        target = self.vs.oom_target(direction)
        if target is not None:
            self.set_cursor(target)

    def select_interval(self, i: int) -> None:
        """Select an allocation of the timeline: its stack, and its block if live at the cursor."""
        if self.vs.doc is None or self.vs.cursor_device is None:
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
        doc = self.vs.doc
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
            self.stack.show_stack(best, node_facts(node))

    def _on_search_applied(self, text: str) -> None:
        self.vs.set_search_mask(self.table.stack_mask if text else None)

    # ------------------------------------------------------------------ small actions
    def focus_filter(self) -> None:
        """Edit > Search frames: to the search box."""
        self.table.filter.setFocus()
        self.table.filter.selectAll()

    def zoom(self, factor: float) -> None:
        """View > Zoom in / out: the segment map's x scale times ``factor``."""
        if self.vs.doc is not None:
            self.map.vb.scaleBy((factor, 1.0))
            self.map.view_auto = False

    def _on_sort_changed(self, sort: str) -> None:
        {SORT_SIZE: self.sort_size_action, SORT_FREE: self.sort_free_action}.get(
            sort, self.sort_address_action
        ).setChecked(True)

    def quit(self) -> None:
        """File > Quit."""
        self.close()  # (close() returns a bool; a slot must not)

    # ------------------------------------------------------------------ window events
    def closeEvent(self, event) -> None:
        self.loading.close()
        if self.persist:
            layout.save_geometry(self)
        super().closeEvent(event)

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
    return [
        u.toLocalFile() for u in mime.urls() if u.isLocalFile() and os.path.isfile(u.toLocalFile())
    ]
