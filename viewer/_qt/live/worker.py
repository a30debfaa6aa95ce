"""The live poller: talks to the agent on its own QThread, never on the GUI thread.

Stats at ``stats_interval`` (2 Hz), the trace at ``trace_interval`` (0.5 Hz)
and NVML at ``nvml_interval``.  Building the document (decoding, columns,
the replay behind the timeline) also happens here; the GUI thread only
receives finished objects through queued signals.  A lost connection is
retried every ``retry_interval``; a target that exited is reported once and
polling stops.
"""

from __future__ import annotations

import os
import socket
import time

from PySide6.QtCore import QMetaObject, QObject, Qt, QThread, QTimer, Signal, Slot

from ...model.live.client import AttachError
from ...model.live.session import DISCONNECTED, ENDED, LIVE, LiveSession
from ...model.view.document import Document


class LivePoller(QObject):
    connected = Signal(object)  # hello dict
    statsReady = Signal(object, object)  # StatsUpdate, Document | None (segments only)
    traceReady = Signal(object, object)  # Document (live=True) or None: extend; TraceUpdate
    nvmlReady = Signal(object)  # NvmlInfo
    statusChanged = Signal(str, str)  # state, one line
    saved = Signal(str, str)  # path, error ("" when written)

    def __init__(
        self,
        target: str,
        *,
        stats_interval: float = 0.5,
        trace_interval: float = 2.0,
        nvml_interval: float = 2.0,
        retry_interval: float = 2.0,
        max_events: int = 1_000_000,
    ) -> None:
        super().__init__()
        self.target = target
        self.stats_interval = stats_interval
        self.trace_interval = trace_interval
        self.nvml_interval = nvml_interval
        self.retry_interval = retry_interval
        self.max_events = max_events
        self.session: LiveSession | None = None
        self.paused = False
        self.timer: QTimer | None = None
        self.want_segment_docs = True  # until a trace document arrives
        self._live_built = False  # a live document was sent: updates extend it
        self._next = {"trace": 0.0, "nvml": 0.0, "retry": 0.0}
        self._state = ""
        self.polls = 0

    # ------------------------------------------------------------------ control (queued)
    @Slot()
    def start(self) -> None:
        self.session = LiveSession(self.target, max_events=self.max_events)
        self.timer = QTimer(self)
        self.timer.setInterval(int(self.stats_interval * 1000))
        self.timer.timeout.connect(self.tick)
        try:
            hello = self.session.connect()
        except AttachError as exc:
            self._emit_status(self.session.state, str(exc))
        else:
            self.connected.emit(hello)
            self._emit_status(LIVE, self.session.status)
        self.timer.start()
        self.tick()

    @Slot(bool)
    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if self.session is not None:
            self._emit_status(
                self.session.state if not paused else "paused",
                "paused: the process runs on, nothing is fetched"
                if paused
                else self.session.status,
            )

    @Slot(str)
    def save(self, path: str) -> None:
        if self.session is None:
            self.saved.emit(path, "not attached")
            return
        try:
            written, _snap, _h = self.session.save_snapshot(path)
        except (AttachError, OSError) as exc:
            self.saved.emit(path, str(exc))
            return
        self.saved.emit(os.fspath(written), "")

    @Slot()
    def stop(self) -> None:
        """Stop polling and end the poller's thread (runs on that thread)."""
        if self.timer is not None:
            self.timer.stop()  # on its own thread: Qt forbids it from another
        if self.session is not None:
            self.session.close()
        QThread.currentThread().quit()

    # ------------------------------------------------------------------ polling
    @Slot()
    def tick(self) -> None:
        s = self.session
        if s is None or self.paused:
            return
        now = time.monotonic()
        if now >= self._next["nvml"]:
            self._next["nvml"] = now + self.nvml_interval
            self.nvmlReady.emit(s.query_nvml())  # (a remote process: nvidia-smi over ssh)
        if s.state == ENDED:
            return
        if s.state != LIVE:
            if now < self._next["retry"]:
                return
            self._next["retry"] = now + self.retry_interval
            if not s.reconnect():
                self._emit_status(s.state, s.status)
                return
            self._live_built = False  # (the agent may have restarted its ring: build anew)
            self.connected.emit(s.hello)
            self._emit_status(LIVE, f"reconnected: {s.status}")
        try:
            self._poll(now)
        except AttachError as exc:
            if s.state == LIVE:  # a refused request, the connection is fine
                self._emit_status(LIVE, str(exc))
            else:
                self._emit_status(s.state, s.status)
        except Exception as exc:  # a bug must not kill the poller
            self._emit_status(DISCONNECTED, f"{type(exc).__name__}: {exc}")

    def _poll(self, now: float) -> None:
        s = self.session
        assert s is not None
        upd = s.poll_stats()
        self.polls += 1
        if upd is not None:
            doc = None
            if self.want_segment_docs and now >= self._next["trace"]:
                upd.snap.path = self._name(s)
                doc = Document.build(upd.snap, with_timeline=False)
            self.statsReady.emit(upd, doc)
        self._emit_status(
            LIVE,
            s.status
            + (
                " (updates slowed to stay within the overhead budget)"
                if upd is not None and upd.throttled
                else ""
            ),
        )
        if now >= self._next["trace"]:
            tu = s.poll_trace()
            if tu.throttled:
                self._next["trace"] = now + max(self.trace_interval, tu.retry_after_s)
                return
            self._next["trace"] = now + self.trace_interval
            if tu.snap is not None and len(tu.snap.trace.action):
                self.want_segment_docs = False
                tu.snap.path = self._name(s)
                # The first picture, and the first after a gap, is replayed here (off the
                # GUI thread, live=True); later ones only extend it by their new rows, on
                # the GUI thread that owns the replay (LiveDocumentSource): None here.
                full = not self._live_built or tu.gap
                self._live_built = True
                self.traceReady.emit(Document.build(tu.snap, live=True) if full else None, tu)

    @staticmethod
    def _name(s: LiveSession) -> str:
        return f"live pid {s.hello.get('pid', s.pid)}"

    def _emit_status(self, state: str, line: str) -> None:
        self._state = state
        self.statusChanged.emit(state, line)


class PollerThread:
    """A :class:`LivePoller` on its own QThread; ``close()`` stops and joins it."""

    def __init__(self, poller: LivePoller) -> None:
        self.poller = poller
        self.thread = QThread()
        self.thread.setObjectName("vramscope-live-poller")
        poller.moveToThread(self.thread)
        self.thread.started.connect(poller.start)
        self.thread.start()

    def close(self, timeout_ms: int = 5000) -> None:
        if not self.thread.isRunning():
            return
        # Unblock a request in flight (a big snapshot, a hung agent): shutting the
        # socket down makes its recv return at once, from any thread.
        session = self.poller.session
        client = session.client if session is not None else None
        sock = client.sock if client is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        QMetaObject.invokeMethod(self.poller, "stop", Qt.ConnectionType.QueuedConnection)
        if not self.thread.wait(timeout_ms):
            self.thread.quit()
            self.thread.wait(1000)
