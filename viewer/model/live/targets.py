"""What can be attached: agents in the registry, plus every GPU process NVML sees.

A GPU process without an agent is listed too, marked un-instrumented, with
the one-line opt-in (or, on Python >= 3.14, the note that ``vramscope
attach PID`` can inject the agent).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from vramscope.viewer import live_protocol as proto

from . import nvml


@dataclass
class Target:
    pid: int
    command: str
    endpoint: str | None  # None: no agent (un-instrumented)
    rank: int | None = None
    device: int | None = None
    gpu_bytes: int | None = None  # NVML's per-process figure
    start_time: float | None = None
    entry: dict[str, Any] | None = None

    @property
    def attachable(self) -> bool:
        return self.endpoint is not None

    def label(self) -> str:
        rank = f"rank {self.rank}" if self.rank is not None else ""
        return " ".join(p for p in (str(self.pid), rank, self.command) if p)


def command_line(pid: int) -> str:
    """A process's command line (Linux /proc), or '' where it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return ""
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)


def list_targets(info: nvml.NvmlInfo | None = None) -> tuple[list[Target], nvml.NvmlInfo]:
    """Registry agents first, then NVML processes without one; and the NVML info."""
    info = nvml.query() if info is None else info
    found: dict[int, Target] = {}
    for e in proto.read_registry():
        pid = int(e["pid"])
        argv = e.get("argv") or []
        found[pid] = Target(
            pid,
            " ".join(str(a) for a in argv)[:300],
            str(e.get("endpoint")),
            e.get("rank"),
            e.get("device"),
            None,
            e.get("start_time"),
            e,
        )
    for dev in info.devices:
        for p in dev.processes:
            t = found.get(p.pid)
            if t is None:
                t = found[p.pid] = Target(p.pid, command_line(p.pid)[:300], None, None, dev.index)
            if p.used_bytes is not None:
                t.gpu_bytes = (t.gpu_bytes or 0) + p.used_bytes
    ordered = sorted(found.values(), key=lambda t: (not t.attachable, t.pid))
    return ordered, info


def can_inject() -> bool:
    """Whether this Python could inject an agent with sys.remote_exec (PEP 768)."""
    return sys.version_info >= (3, 14) and hasattr(sys, "remote_exec") and os.name == "posix"


def opt_in_hint() -> str:
    if can_inject():
        return (
            "no agent: `vramscope attach PID` can inject one (Python 3.14+, same "
            "interpreter version), or opt in: " + proto.OPT_IN
        )
    return "no agent; opt in: " + proto.OPT_IN
