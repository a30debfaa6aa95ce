"""A live session: what the viewer knows about one attached process.

Blocking (run it on a worker thread).  :meth:`LiveSession.poll_stats` gets
``memory_stats`` and the segments of one instant; :meth:`poll_trace` appends
the trace entries recorded since the last call to the session's columns and
returns the snapshot (latest segments + the accumulated window).  A lost
connection is a state, not an error: :attr:`state` becomes ``disconnected``
(the agent may come back: :meth:`reconnect`) or ``ended`` (the process is
gone), with a one-line :attr:`status`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramscope.viewer import live_protocol as proto

from ..analysis.figures import MemoryStats, Selection, memory_stats
from ..core.errors import SnapshotError
from ..core.snapshot import Snapshot
from ..io.atomic import write_atomic
from ..io.load import load_bytes
from . import nvml, remote
from .client import AttachError, LiveClient, resolve_target
from .columns import LiveColumns, segments_snapshot

CONNECTING, LIVE, DISCONNECTED, ENDED = "connecting", "live", "disconnected", "ended"


@dataclass
class StatsUpdate:
    """One ``stats`` reply: the allocator's counters and segments of one instant."""

    time: float
    stats: dict[int, dict[str, Any]]  # device -> torch.cuda.memory_stats(device)
    snap: Snapshot  # segments only
    figures: MemoryStats  # computed from the segments: equal to the counters
    throttled: bool = False
    fast_path: bool = True
    consistent: bool = True  # counters unchanged while the segments were read

    def counter(self, key: str, device: int | None = None) -> int:
        """A memory_stats counter summed over devices (or of one device)."""
        devs = [device] if device is not None else list(self.stats)
        return sum(int(self.stats.get(d, {}).get(key, 0) or 0) for d in devs)


@dataclass
class TraceUpdate:
    time: float
    snap: Snapshot | None  # None when nothing new arrived
    added: int = 0
    gap: bool = False
    dropped: int = 0  # rows the session's ring has dropped so far (front of the trace)
    throttled: bool = False
    retry_after_s: float = 0.0
    stats: dict[int, dict[str, Any]] = field(default_factory=dict)


class LiveSession:
    """Polls one agent; safe to call from one worker thread at a time."""

    def __init__(self, target: str, *, max_events: int = 1_000_000) -> None:
        self.target = target
        self.client: LiveClient | None = None
        self.hello: dict[str, Any] = {}
        self.columns = LiveColumns(max_events)
        self.cursors: dict[str, Any] = {}
        self.state = CONNECTING
        self.status = f"connecting to {target}…"
        self.pid: int | None = int(target) if target.isdigit() else None
        self.last_stats: StatsUpdate | None = None
        # ssh://host/PID: the process runs there; its pid, NVML and forwarding too.
        self.remote_host = remote.host_of(target) if remote.is_remote_target(target) else None
        if self.remote_host is not None:
            self.pid = remote.parse_target(target)[1]

    # ------------------------------------------------------------------ connection
    def connect(self) -> dict[str, Any]:
        """Connect (or reconnect); raises AttachError with one line."""
        try:
            endpoint, token, entry = resolve_target(self.target)
        except AttachError:  # e.g. "no process N": the process ended while we retried
            self._lost()
            raise
        if entry is not None:
            self.pid = entry.get("pid")
        client = LiveClient(endpoint, token)
        try:
            self.hello = client.connect()
        except AttachError:
            self._lost()
            raise
        if self.client is not None:
            self.client.close()
        self.client = client
        self.pid = self.hello.get("pid", self.pid)
        self.state = LIVE
        self.status = f"attached to {self.describe()}"
        return self.hello

    def reconnect(self) -> bool:
        """Try once to get the connection back; False (state explains) if not."""
        try:
            self.connect()
        except AttachError as exc:
            if self.state != ENDED:
                self.status = f"disconnected: {exc}; retrying"
            return False
        self.cursors.clear()  # a new agent (or a restarted one) has its own buffer
        self.columns.reset()
        return True

    def describe(self) -> str:
        h = self.hello
        argv = " ".join(str(a) for a in (h.get("argv") or [])[:4])
        rank = f" rank {h['rank']}" if h.get("rank") is not None else ""
        gpu = f" on {h['gpu']}" if h.get("gpu") else ""
        where = f" on {self.remote_host.destination}" if self.remote_host is not None else ""
        return f"pid {h.get('pid', self.pid)}{where}{rank} ({argv}){gpu}"

    def _lost(self, reason: str = "") -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.pid is not None and not self._pid_alive(self.pid):
            self.state = ENDED
            self.status = f"process {self.pid} has ended; the last figures stay on screen"
        else:
            self.state = DISCONNECTED
            self.status = f"disconnected{': ' + reason if reason else ''}; retrying"

    def _request(self, op: str, **fields: Any):
        if self.client is None:
            raise AttachError(self.status)
        try:
            return self.client.request(op, **fields)
        except AttachError as exc:
            if self.client is None or not self.client.connected:
                self._lost(str(exc))
            raise

    def _pid_alive(self, pid: int) -> bool:
        if self.remote_host is None:
            return proto.pid_alive(pid)
        return remote.pid_alive(self.remote_host, pid) is not False  # unreachable: maybe

    def query_nvml(self) -> nvml.NvmlInfo:
        """The GPUs the process runs on: NVML here, nvidia-smi there for a remote one."""
        if self.remote_host is not None:
            return remote.query_nvml(self.remote_host)
        return nvml.query()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.remote_host is not None:
            remote.release(self.target)

    # ------------------------------------------------------------------ polling
    def poll_stats(self) -> StatsUpdate | None:
        """The counters and segments now; None while the target has no CUDA yet."""
        reply = self._request("stats")
        h = reply.header
        if not h.get("ready", False):
            self.status = f"attached to {self.describe()}: {h.get('reason', 'not ready')}"
            return None
        decoded = reply.decoded()
        segments = decoded.get("segments") if isinstance(decoded, dict) else None
        snap = segments_snapshot(segments if isinstance(segments, list) else [])
        upd = StatsUpdate(
            time=float(h.get("time") or time.time()),
            stats=_stats_by_device(h.get("stats")),
            snap=snap,
            figures=memory_stats(snap, Selection()),
            throttled=bool(h.get("throttled")),
            fast_path=bool(h.get("fast_path", True)),
            consistent=bool(h.get("consistent", True)),
        )
        self.last_stats = upd
        self.status = f"attached to {self.describe()}"
        return upd

    def poll_trace(self, max_entries: int | None = None) -> TraceUpdate:
        """Append what the agent recorded since the last call; the snapshot so far."""
        fields: dict[str, Any] = {"cursors": self.cursors}
        if max_entries:
            fields["max_entries"] = max_entries
        reply = self._request("trace", **fields)
        h = reply.header
        now = float(h.get("time") or time.time())
        if not h.get("ready", False):
            return TraceUpdate(now, None)
        if h.get("throttled"):
            return TraceUpdate(
                now, None, throttled=True, retry_after_s=float(h.get("retry_after_s") or 0.0)
            )
        decoded = reply.decoded()
        if not isinstance(decoded, dict):
            raise AttachError("the agent sent a trace reply without data")
        devices = h.get("devices") if isinstance(h.get("devices"), dict) else {}
        gap = any(
            isinstance(d, dict) and (d.get("gap") or d.get("reset")) for d in devices.values()
        )
        if gap:
            self.columns.reset()
        for dev, info in devices.items():
            if isinstance(info, dict) and info.get("cursor") is not None:
                self.cursors[str(dev)] = info["cursor"]
        added = self.columns.append(
            decoded.get("device_traces") or [],
            decoded.get("segments"),
            decoded.get("allocator_settings"),
        )
        return TraceUpdate(
            now,
            self.columns.snapshot(),
            added=added,
            gap=gap and bool(self.columns.dropped),
            dropped=self.columns.dropped,
            stats=_stats_by_device(h.get("stats")),
        )

    def options(self, **change: Any) -> dict[str, Any]:
        fields = {"set": change} if change else {}
        return self._request("options", **fields).header

    # ------------------------------------------------------------------ snapshots
    def snapshot_bytes(self) -> tuple[bytes, dict[str, Any], Snapshot]:
        """The full snapshot as the agent pickled it, checked by the safe loader."""
        reply = self._request("snapshot")
        if not reply.header.get("ready", False):
            raise AttachError(f"no snapshot: {reply.header.get('reason', 'not ready')}")
        try:
            snap = load_bytes(reply.payload)
        except SnapshotError as exc:
            raise AttachError(f"the agent sent a snapshot that does not load: {exc}") from None
        return reply.payload, reply.header, snap

    def save_snapshot(self, path: str | os.PathLike[str]) -> tuple[Path, Snapshot, dict]:
        """Write the full snapshot (a standard pickle, as torch writes it) atomically."""
        data, header, snap = self.snapshot_bytes()
        target = Path(path)
        write_atomic(target, data, durable=True)
        return target, snap, header


def _stats_by_device(raw: Any) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            if isinstance(k, str) and k.isdigit() and isinstance(v, dict):
                out[int(k)] = v
    return out
