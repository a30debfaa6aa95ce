"""Live attach: the main window's views fed by a running process.

:class:`LiveController` composes a plain :class:`MainWindow` (header, timeline,
segment map, table, stacks) with a "Live" dock: counters over time (2 Hz) and the device panel (NVML
beside the allocator).  Updates arrive from the :class:`LivePoller` thread:

* stats (2 Hz): the curves, the device panel, and the header figures while
  the cursor is at the latest moment;
* trace (0.5 Hz): a new document (latest segments + the accumulated trace),
  shown unless the user has moved the timeline cursor back in time (then
  updates wait; Ctrl+End follows again).

Pause (F8) stops fetching; Save snapshot (Ctrl+S) writes the process's full
snapshot as a standard pickle.  Disconnects, reconnects and the target
exiting are one calm line in the status bar.
"""

from __future__ import annotations

import os
import time

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDockWidget, QFileDialog, QLabel, QSplitter

from ...model.analysis.figures import Selection
from ...model.live.doc_source import LiveDocumentSource
from ...model.live.session import DISCONNECTED, ENDED, LIVE
from ..main_window import MainWindow
from ..widgets.actions import make_action
from .curves import LiveCurves
from .device_panel import DevicePanel
from .worker import LivePoller, PollerThread

STATE_COLORS = {LIVE: "#2e7d32", DISCONNECTED: "#b26a00", ENDED: "#666666", "paused": "#1565c0"}


class LiveController(QObject):
    """Feeds a :class:`MainWindow` from a running process (``target``: a PID or an
    endpoint) and adds the "Live" dock to it.  The window stays a plain main window:
    the controller composes it (``window.live`` is the controller) and reacts to its
    public signals and events; it overrides nothing."""

    savedSnapshot = Signal(str, str)  # path, error
    _saveRequested = Signal(str)
    _pauseRequested = Signal(bool)

    def __init__(
        self,
        target: str,
        *,
        stats_interval: float = 0.5,
        trace_interval: float = 2.0,
        window: MainWindow | None = None,
    ) -> None:
        window = window if window is not None else MainWindow(persist=False)
        super().__init__(window)  # lives as long as its window
        self.window = window
        window.live = self
        self.target = target
        self.state = "connecting"
        self.hello: dict = {}
        self.held = False  # updates waiting while the user looks back in time
        # Held updates, applied in order when the user follows again: the shown document
        # must not change under someone looking back (the live replay grows in place).
        self._pending_full = None  # (Document built live, TraceUpdate) after a gap
        self._pending_update = None  # TraceUpdate to extend by (the latest: it has all rows)
        self.trace_updates = 0
        self.stats_updates = 0
        self._stats_time: float | None = None  # wall time of the latest stats reply
        self._doc_time: float | None = None  # when the shown document arrived
        self._header_from_stats = False  # header: the 2 Hz figures, else the document's
        self._dock_sized = False
        self.source = LiveDocumentSource()  # the replay, extended by each trace update
        window.setWindowTitle(f"live: {target} — vramscope")
        self._build_live_ui()
        window.momentShown.connect(self._on_moment_shown)
        window.vs.events.cursor.connect(self._on_cursor)
        window.installEventFilter(self)
        self.poller = LivePoller(
            target, stats_interval=stats_interval, trace_interval=trace_interval
        )
        self.poller.connected.connect(self._on_connected)
        self.poller.statsReady.connect(self._on_stats)
        self.poller.traceReady.connect(self._on_trace)
        self.poller.nvmlReady.connect(self.device_panel.set_nvml)
        self.poller.statusChanged.connect(self._on_status)
        self.poller.saved.connect(self._on_saved)
        self._saveRequested.connect(self.poller.save)
        self._pauseRequested.connect(self.poller.set_paused)
        self.worker = PollerThread(self.poller)
        # "0.4 s ago" must age between updates (and while paused or disconnected).
        self._age_timer = QTimer(self, interval=1000)
        self._age_timer.timeout.connect(self._update_sources)
        self._age_timer.start()

    # ------------------------------------------------------------------ building
    def _build_live_ui(self) -> None:
        w = self.window
        self.live_status = QLabel("attaching…")
        self.live_status.setToolTip(
            "The live connection: attached, paused, disconnected "
            "(retrying) or the process has ended"
        )
        w.statusBar().insertPermanentWidget(0, self.live_status, 1)
        self.curves = LiveCurves()
        self.device_panel = DevicePanel()
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.curves)
        split.addWidget(self.device_panel)
        split.setSizes([300, 200])
        split.setMinimumWidth(240)  # the curves stay readable beside a busy central area
        # In a live window the last event is the latest fetched, not "as recorded".
        w.timeline.latest_text = "latest"
        w.timeline.latest_button.setText("Latest")
        w.timeline.latest_button.setToolTip(
            "Back to the latest event and follow the updates again (End, Ctrl+End)"
        )
        w.latest_action.setText("&Latest (follow updates)")
        dock = QDockWidget("Live", w)
        dock.setObjectName("liveDock")
        dock.setWidget(split)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
        )
        w.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
        w.resizeDocks([dock], [380], Qt.Orientation.Horizontal)
        self.live_dock = dock

        menu = w.menuBar().addMenu("&Live")
        self.pause_action = make_action(
            w,
            "&Pause updates",
            self.toggle_pause,
            "F8",
            "Stop fetching from the process (it keeps running); F8 again resumes",
        )
        self.pause_action.setCheckable(True)
        self.save_action = make_action(
            w,
            "&Save snapshot…",
            self.save_dialog,
            QKeySequence.StandardKey.Save,
            "Save the process's full snapshot now, as a standard "
            "pickle that torch's memory_viz opens too",
        )
        self.follow_action = make_action(
            w,
            "&Follow the latest",
            self.follow,
            None,
            "Show every update again (after looking back in time)",
        )
        for a in (self.pause_action, self.save_action, self.follow_action):
            menu.addAction(a)
        tb = w.addToolBar("Live")
        tb.setObjectName("liveToolbar")
        tb.setMovable(False)
        tb.addAction(self.pause_action)
        tb.addAction(self.save_action)
        # The placeholder says "open a file"; a live window says what it waits for.
        w.pages.setCurrentIndex(1)

    # ------------------------------------------------------------------ updates
    def _on_connected(self, hello: dict) -> None:
        self.hello = hello
        self.device_panel.set_target(hello.get("pid"), hello.get("device"))
        argv = " ".join(str(a) for a in (hello.get("argv") or [])[:3])
        self.window.setWindowTitle(f"live: pid {hello.get('pid')} {argv} — vramscope")

    def _on_status(self, state: str, line: str) -> None:
        self.state = state
        color = STATE_COLORS.get(state, "")
        dot = f"<span style='color:{color}'>●</span> " if color else ""
        self.live_status.setText(dot + line.replace("<", "&lt;"))
        self.live_status.setToolTip(line)
        self.save_action.setEnabled(state in (LIVE, "paused"))

    def _on_stats(self, upd, doc) -> None:
        self.stats_updates += 1
        dev = self.hello.get("device")
        stats = upd.stats.get(dev) if dev in upd.stats else next(iter(upd.stats.values()), {})
        pid = self.hello.get("pid")
        info = self.device_panel.info
        used = info.process_bytes(pid) if info is not None and info.available and pid else None
        self.curves.add(upd.time, stats or {}, used)
        self.device_panel.set_reserved(
            upd.counter("reserved_bytes.all.current", dev) if dev in upd.stats else None
        )
        if doc is not None and not self.trace_updates:
            self._show(doc)  # the segments, before the first trace arrives
        elif self._at_latest() and self.window.vs.selection == Selection():
            self.window.header.set_stats(upd.figures)
            self._header_from_stats = True
        self._stats_time = upd.time
        self._update_sources()

    @property
    def pending(self):
        """The snapshot of the latest held update (None: nothing held)."""
        u = self._pending_update or (self._pending_full[1] if self._pending_full else None)
        return u.snap if u is not None else None

    def _on_trace(self, doc, upd) -> None:
        """A trace update: a full document (the first, or after a gap) or None (extend
        the live replay by the update's new rows: :class:`LiveDocumentSource`)."""
        self.trace_updates += 1
        if doc is not None:
            self._pending_full, self._pending_update = (doc, upd), None
        else:
            self._pending_update = upd
        if not self._at_latest():
            self.held = True
            self.live_status.setText(
                self.live_status.text().split(" — ")[0]
                + " — updates held while you look back (Ctrl+End follows)"
            )
            self._update_sources()
            return
        self._show_pending()

    def _show_pending(self) -> None:
        """Apply the held updates to the live model, in order, and show the result."""
        if self._pending_full is None and self._pending_update is None:
            return
        carried = self.window.vs.carried() if self.window.vs.doc is not None else None
        doc = None
        if self._pending_full is not None:
            full, upd = self._pending_full
            doc = self.source.adopt(full, upd.dropped)
        if self._pending_update is not None:
            upd = self._pending_update
            doc = self.source.apply(upd.snap, upd.dropped, upd.gap)
        self._pending_full = self._pending_update = None
        self.held = False
        self._show(doc, carried)

    def _show(self, doc, carried=None) -> None:
        # The user's zoom, scroll, sort, selection and expanded nodes stay
        # (update_document, from what was picked before the replay grew); only the first
        # picture sets the views up.
        self.window.update_document(doc, carried)
        self._doc_time = time.time()
        self._header_from_stats = False
        self._update_sources()

    def _update_sources(self) -> None:
        """Say which instant the header and the timeline show: the header's figures
        come twice a second from memory_stats, the trace every two seconds, so the
        header's reserved can differ from the timeline's last point."""
        now = time.time()
        w = self.window
        if self._header_from_stats and self._stats_time is not None:
            w.header.set_source(
                f"figures: live, {_ago(now - self._stats_time)}",
                "The figures are the process's memory_stats() of the latest reply "
                f"(every {self.poller.stats_interval:g} s); the timeline and the map are "
                f"of the trace, fetched every {self.poller.trace_interval:g} s, so they can "
                "lag by that much.",
            )
        elif w.vs.doc is not None and w.vs.cursor_device is not None:
            if self._at_latest() and self._doc_time is not None:
                text = (
                    f"figures: the trace's latest event ({w.vs.cursor_k:,}), "
                    f"{_ago(now - self._doc_time)}"
                )
            else:
                text = f"figures: at the cursor, event {w.vs.cursor_k:,}"
            w.header.set_source(
                text,
                "The figures are of the moment at the timeline's cursor; at the latest "
                "event, the live figures (memory_stats) replace them at the next reply"
                + (" (updates held: Ctrl+End follows)" if self.held else ""),
            )
        else:
            w.header.set_source("")
        doc = w.vs.doc
        dev = w.vs.cursor_device
        if doc is not None and dev is not None and self._doc_time is not None:
            n = doc.n_events(dev)
            held = " · held (Ctrl+End follows)" if self.held else ""
            w.timeline.set_source(
                f"up to event {n - 1:,}, {_ago(now - self._doc_time)}{held}",
                f"The trace as fetched {_ago(now - self._doc_time)} (every "
                f"{self.poller.trace_interval:g} s); the segment map and the table show "
                "the moment at the cursor.",
            )
        else:
            w.timeline.set_source("")

    def _on_moment_shown(self) -> None:
        """(``window.momentShown``) the header now shows the document at the cursor, until
        the next stats reply."""
        self._header_from_stats = False
        self._update_sources()

    def _on_cursor(self, _device, _k) -> None:
        """(``vs.events.cursor``) back at the latest event (Ctrl+End, the Latest button):
        show the updates held meanwhile, once the window is done moving."""
        if self.held and self._at_latest():
            QTimer.singleShot(0, self._follow_if_latest)

    def _follow_if_latest(self) -> None:
        if self.held and self._at_latest():
            self._show_pending()

    def eventFilter(self, obj, event) -> bool:
        if obj is self.window:
            t = event.type()
            if t == QEvent.Type.Show and not self._dock_sized:
                # What the central views leave (their figures and legends need ~1020 px),
                # between 240 and 380 px.
                self._dock_sized = True
                width = int(max(240, min(380, obj.width() * 0.25, obj.width() - 1020)))
                obj.resizeDocks([self.live_dock], [width], Qt.Orientation.Horizontal)
            elif t in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
                QTimer.singleShot(0, self.curves.apply_palette)
            elif t == QEvent.Type.Close:
                self.close()
        return False

    def _at_latest(self) -> bool:
        return self.window.vs.at_latest()

    def follow(self) -> None:
        self.window.go_latest()
        self._show_pending()

    def close(self) -> None:
        """Stop fetching (the window closes, or the caller is done)."""
        self._age_timer.stop()
        self.worker.close()

    # ------------------------------------------------------------------ actions
    def toggle_pause(self) -> None:
        paused = self.pause_action.isChecked()
        self.pause_action.setText("&Resume updates" if paused else "&Pause updates")
        self._pauseRequested.emit(paused)

    def save_dialog(self) -> None:
        pid = self.hello.get("pid", "x")
        name = f"live_pid{pid}_{time.strftime('%Y%m%d-%H%M%S')}.pickle"
        path, _ = QFileDialog.getSaveFileName(
            self.window,
            "Save snapshot of the running process",
            os.path.join(os.getcwd(), name),
            "Memory snapshots (*.pickle)",
        )
        if path:
            self.save_snapshot(path)

    def save_snapshot(self, path: str) -> None:
        """Ask the poller for the full snapshot; :attr:`savedSnapshot` tells the outcome."""
        self.window.statusBar().showMessage(f"saving a snapshot to {path}…")
        self._saveRequested.emit(path)

    def _on_saved(self, path: str, error: str) -> None:
        if error:
            self.window.statusBar().showMessage(f"snapshot not saved: {error}", 10000)
        else:
            self.window.statusBar().showMessage(f"snapshot saved: {path}", 10000)
        self.savedSnapshot.emit(path, error)


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s ago"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    return f"{seconds / 60:.0f} min ago"


# ---------------------------------------------------------------------- entry points
def open_attach_dialog(window: MainWindow):
    """File > Attach: the dialog listing the processes to attach to, over ``window``
    (which keeps it); attaching opens a live window beside it."""
    from .attach_dialog import AttachDialog

    dlg = AttachDialog(window)
    dlg.attachRequested.connect(lambda target: open_live_window(window, target))
    dlg.open()
    return dlg


def open_live_window(window: MainWindow, target: str) -> LiveController:
    """A new window attached to ``target``, kept alive by ``window``."""
    live = LiveController(target)
    w = live.window
    w.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    window.add_aux_window(w)
    w.show()
    return live
