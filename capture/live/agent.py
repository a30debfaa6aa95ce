"""The live agent: answers a viewer's requests from inside the training process.

Requests (JSON headers, see ``vramscope.viewer.live_protocol``):

``hello``     who we are: pid, command line, rank, torch, GPU, recording state.
``stats``     ``memory_stats()`` of every device in use plus a segments-only
              snapshot of the same instant (torch >= 2.11 builds it without
              the trace: ``_cuda_memorySnapshot((0, 0, False))``; older torch
              falls back to the full snapshot minus its trace).
``trace``     the trace entries each device recorded since the client's
              cursor (see :mod:`.traces`), with the segments of that instant,
              so the viewer can append them to its timeline.
``snapshot``  the full snapshot: exactly the pickle ``_dump_snapshot`` writes.
``options``   the recording settings; ``set`` changes them when this agent
              started the recording itself.

Keeping out of the training loop's way: requests run on the agent's own
threads and never raise into the program.  Python code holds the GIL, so
every request costs the training thread the time it takes; the governor
measures that cost and spaces the expensive requests so that they hold at
most ``budget`` (default 1 %) of wall time: a client polling too fast gets
``throttled`` with ``retry_after_s`` instead of more work.
"""

from __future__ import annotations

import atexit
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any

from vramscope.viewer import live_protocol as proto

from .. import messages
from ..recorder import Recorder, active_recorder
from . import registry, traces
from .allocator import LiveAllocator, NotReady
from .server import Server

#: Default share of wall time the agent's requests may hold the GIL.
DEFAULT_BUDGET = 0.01
PICKLE_PROTOCOL = 4  # what torch's _dump_snapshot writes too (pickle default >= 3.8)
_MAX_TRACE_ENTRIES = 200_000

_lock = threading.RLock()
_agent: "Agent | None" = None


class Governor:
    """Spaces requests of one kind so their measured cost stays within ``share``."""

    def __init__(self, share: float) -> None:
        self.share = share
        self.cost = 0.0  # smoothed seconds per request
        self.next_at = 0.0

    def wait_s(self, now: float) -> float:
        return max(0.0, self.next_at - now)

    def spent(self, seconds: float, now: float) -> None:
        self.cost = seconds if self.cost == 0.0 else 0.7 * self.cost + 0.3 * seconds
        self.next_at = now + max(seconds, self.cost) / self.share


class Agent:
    """One per process: the server, the governor, and (maybe) its own recorder."""

    def __init__(
        self,
        *,
        budget: float = DEFAULT_BUDGET,
        directory: Path | None = None,
        use_unix: bool | None = None,
    ) -> None:
        if not 0 < budget <= 1:
            raise ValueError(f"budget must be in (0, 1], not {budget!r}")
        self.budget = budget
        self.directory = directory or proto.runtime_dir()
        self.allocator = LiveAllocator()
        self.governors = {"stats": Governor(budget / 2), "trace": Governor(budget / 2)}
        self.heavy = threading.Lock()  # one allocator request at a time, whoever asks
        self.server = Server(self.handle, self.directory, use_unix=use_unix)
        self.recorder: Recorder | None = None  # only when this agent started one
        self.registry_file: Path | None = None
        self.started = time.time()
        self.pid = os.getpid()
        self.endpoint = ""
        self._last_stats: tuple[dict[str, Any], bytes] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "Agent":
        registry.clean_stale(self.directory)
        self.endpoint = self.server.start()
        self.registry_file = registry.write_entry(
            self.directory,
            self.endpoint,
            token=self.server.token,
            extra={"device": self._device_or_none()},
        )
        return self

    def close(self) -> None:
        self.server.close()
        if self.registry_file is not None:
            proto.remove_entry_files(self.registry_file)
            self.registry_file = None
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None

    def _device_or_none(self) -> int | None:
        try:
            return self.allocator.info().get("device")
        except Exception:
            return None

    # ------------------------------------------------------------------ requests
    def handle(self, header: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        op = header.get("op")
        if op == "hello":
            return self._hello(), b""
        if op == "bye":
            return {"ok": True}, b""
        if op == "options":
            return self._options(header), b""
        try:
            with self.heavy:
                if op == "stats":
                    return self._stats()
                if op == "trace":
                    return self._trace(header)
                if op == "snapshot":
                    return self._snapshot()
        except NotReady as exc:
            return {"ok": True, "ready": False, "reason": str(exc)}, b""
        return {"ok": False, "error": f"unknown request {op!r}"}, b""

    def _hello(self) -> dict[str, Any]:
        info = self.allocator.info()
        if self.registry_file is not None and info.get("device") is not None:
            registry.update_entry(self.registry_file, device=info["device"])
        rec = active_recorder()
        return {
            "ok": True,
            "protocol": proto.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "argv": list(sys.argv)[:64],
            "python": ".".join(map(str, sys.version_info[:3])),
            "rank": _env_int("RANK"),
            "world_size": _env_int("WORLD_SIZE"),
            "start_time": round(self.started, 3),
            "budget": self.budget,
            "recording": _recording(rec),
            "owns_recording": self.recorder is not None,
            "limits": {"max_json": proto.MAX_JSON, "max_connections": self.server.max_connections},
            **info,
        }

    def _stats(self) -> tuple[dict[str, Any], bytes]:
        gov = self.governors["stats"]
        now = time.monotonic()
        wait = gov.wait_s(now)
        if wait > 0 and self._last_stats is not None:
            reply, payload = self._last_stats
            return {**reply, "throttled": True, "retry_after_s": round(wait, 3)}, payload
        t0 = time.perf_counter()
        stats, segments, fast, consistent = self.allocator.stats()
        payload = pickle.dumps({"segments": segments}, protocol=PICKLE_PROTOCOL)
        cost = time.perf_counter() - t0
        gov.spent(cost, time.monotonic())
        reply = {
            "ok": True,
            "ready": True,
            "time": time.time(),
            "stats": {str(d): s for d, s in stats.items()},
            "fast_path": fast,
            "consistent": consistent,
            "cost_s": round(cost, 6),
            "throttled": False,
        }
        self._last_stats = (reply, payload)
        return reply, payload

    def _trace(self, header: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        gov = self.governors["trace"]
        now = time.monotonic()
        wait = gov.wait_s(now)
        if wait > 0:
            return {
                "ok": True,
                "ready": True,
                "throttled": True,
                "retry_after_s": round(wait, 3),
            }, b""
        cursors = header.get("cursors")
        cursors = cursors if isinstance(cursors, dict) else {}
        limit = header.get("max_entries")
        limit = (
            limit if type(limit) is int and 0 < limit <= _MAX_TRACE_ENTRIES else _MAX_TRACE_ENTRIES
        )
        t0 = time.perf_counter()
        snap, stats, _ = self.allocator.snapshot()
        device_traces = snap.get("device_traces") or []
        rec = active_recorder()
        capacity = rec.max_entries if rec is not None and rec.active else None
        out_traces: list[list[Any]] = []
        devices: dict[str, Any] = {}
        for d, entries in enumerate(device_traces):
            entries = entries if isinstance(entries, list) else []
            start, gap, reset = traces.since(
                entries, traces.parse_cursor(cursors.get(str(d))), capacity
            )
            if len(entries) - start > limit:
                start, gap = len(entries) - limit, True
            new = entries[start:]
            out_traces.append(new)
            devices[str(d)] = {
                "cursor": traces.cursor_of(entries) or cursors.get(str(d)),
                "n": len(new),
                "gap": gap,
                "reset": reset,
                "buffered": len(entries),
            }
        payload = pickle.dumps(
            {
                "segments": snap.get("segments") or [],
                "device_traces": out_traces,
                "allocator_settings": snap.get("allocator_settings"),
            },
            protocol=PICKLE_PROTOCOL,
        )
        del snap, device_traces
        cost = time.perf_counter() - t0
        gov.spent(cost, time.monotonic())
        return {
            "ok": True,
            "ready": True,
            "time": time.time(),
            "devices": devices,
            "stats": {str(d): s for d, s in stats.items()},
            "cost_s": round(cost, 6),
            "throttled": False,
        }, payload

    def _snapshot(self) -> tuple[dict[str, Any], bytes]:
        # Explicitly asked for by a person: never throttled, but one at a time.
        t0 = time.perf_counter()
        snap, stats, _ = self.allocator.snapshot()
        payload = pickle.dumps(snap, protocol=PICKLE_PROTOCOL)
        del snap
        if len(payload) > proto.MAX_RESPONSE_PAYLOAD:
            return {"ok": False, "error": f"snapshot too large ({len(payload)} bytes)"}, b""
        return {
            "ok": True,
            "ready": True,
            "time": time.time(),
            "stats": {str(d): s for d, s in stats.items()},
            "cost_s": round(time.perf_counter() - t0, 6),
        }, payload

    def _options(self, header: dict[str, Any]) -> dict[str, Any]:
        change = header.get("set")
        if isinstance(change, dict) and change:
            with _lock:
                error = self._set_recording(change)
            if error:
                return {"ok": False, "error": error, "recording": _recording(active_recorder())}
        return {
            "ok": True,
            "recording": _recording(active_recorder()),
            "owns_recording": self.recorder is not None,
        }

    def _set_recording(self, change: dict[str, Any]) -> str | None:
        if self.recorder is None or active_recorder() is not self.recorder:
            return (
                "recording was started by the program itself; "
                "its settings can only be changed there"
            )
        old = self.recorder
        try:
            new = Recorder(
                old.out,
                change.get("max_entries", old.max_entries),
                change.get("stacks", old.stacks),
                change.get("context", old.context),
                dump_on_exit=False,
                dump_signal=None,
            )
        except (TypeError, ValueError) as exc:
            return f"bad recording option: {exc}"
        old.stop()
        self.recorder = new.start()
        return None


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return None


def _recording(rec: Recorder | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    return {
        "max_entries": rec.max_entries,
        "stacks": rec.stacks,
        "context": rec.context,
        "out": str(rec.out),
        "active": rec.active,
    }


# ---------------------------------------------------------------------- public API
def serve(
    out: str | os.PathLike[str] = "snapshots",
    *,
    max_entries: int = 100_000,
    stacks: str = "python",
    context: str | None = "all",
    budget: float = DEFAULT_BUDGET,
    **recorder_options: Any,
) -> "Agent | None":
    """Let a viewer attach to this process (``vramscope attach``, File > Attach...).

    Starts recording (with these arguments, as :func:`vramscope.capture.start`)
    unless a recorder is already active, then serves the local endpoint from a
    daemon thread until the process ends or :func:`stop_serving`.  Calling it
    again returns the running agent.  Problems are one warning on stderr and
    ``None``; the program always carries on.

    Args:
        budget: share of wall time the agent may spend answering (default 1 %).
    """
    global _agent
    with _lock:
        if _agent is not None:
            return _agent
        try:
            agent = Agent(budget=budget)
        except ValueError as exc:
            if "budget" in str(exc):
                raise
            messages.warn(f"live attach is off: {exc}")
            return None
        try:
            agent.start()
        except Exception as exc:
            messages.warn(f"live attach is off: cannot listen: {type(exc).__name__}: {exc}")
            agent.close()
            return None
        if active_recorder() is None:
            try:
                agent.recorder = Recorder(
                    out, max_entries, stacks, context, dump_on_exit=False, **recorder_options
                ).start()
            except (TypeError, ValueError):
                agent.close()
                raise
        _agent = agent
        atexit.register(_close_at_exit, agent)
        messages.info(
            f"live attach: `vramscope attach {os.getpid()}` or File > Attach... ({agent.endpoint})"
        )
        return agent


def stop_serving() -> None:
    """Close the endpoint and remove the registry entry (recording started by serve stops)."""
    global _agent
    with _lock:
        agent, _agent = _agent, None
    if agent is not None:
        agent.close()


def current_agent() -> "Agent | None":
    """The running agent of this process, or None."""
    return _agent


def _close_at_exit(agent: Agent) -> None:
    if agent.pid != os.getpid():
        return  # a forked child (a DataLoader worker): the entry is its parent's
    try:
        if agent.registry_file is not None:
            proto.remove_entry_files(agent.registry_file)
        agent.server.close()
    except Exception:
        pass


class LiveRecorder(Recorder):
    """A :class:`Recorder` that also serves live attach while it is active."""

    def __init__(self, *args: Any, budget: float = DEFAULT_BUDGET, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = budget
        self._owns_agent = False

    def start(self) -> "LiveRecorder":
        super().start()
        with _lock:
            if _agent is None:
                self._owns_agent = serve(budget=self.budget) is not None
        return self

    def stop(self) -> None:
        if self._owns_agent:
            self._owns_agent = False
            stop_serving()
        super().stop()

    def _clone(self) -> "LiveRecorder":
        return LiveRecorder(
            self.out,
            self.max_entries,
            self.stacks,
            self.context,
            oom=self.oom,
            dump_on_exit=self.dump_on_exit,
            dump_signal=self.dump_signal,
            max_oom_dumps=self.max_oom_dumps,
            budget=self.budget,
        )
