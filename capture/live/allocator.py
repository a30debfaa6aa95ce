"""The allocator calls the agent makes, on top of capture's backend.

Everything goes through :func:`vramscope.capture.backend.get_backend`, so the
CPU tests swap in a fake allocator there, and the GPU tests run this same
code against torch.  Nothing here starts CUDA: before the training script
has initialised it, every request answers "not yet" (initialising it from
the agent's thread would freeze ``CUDA_VISIBLE_DEVICES`` and the allocator
settings behind the script's back).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from ..backend import get_backend


class NotReady(Exception):
    """CUDA is not usable (yet) in this process; the message says why."""


class LiveAllocator:
    """memory_stats, segments-only and full snapshots, for the agent's requests."""

    def __init__(self) -> None:
        self._fast: bool | None = None  # None: not probed yet

    def backend(self) -> Any:
        backend = get_backend()
        if backend is None:
            raise NotReady("torch is not importable in the target process")
        if not backend.cuda_initialized():
            raise NotReady("the process has not initialised CUDA yet")
        return backend

    def info(self) -> dict[str, Any]:
        """What hello reports: torch version, device, whether history is on."""
        backend = get_backend()
        if backend is None:
            return {"torch": None, "cuda": False}
        out: dict[str, Any] = {
            "torch": backend.torch_version,
            "cuda": bool(backend.cuda_initialized()),
        }
        if out["cuda"]:
            out["device"] = _safe(backend.current_device)
            out["history"] = _safe(backend.history_enabled)
            if out["device"] is not None:
                out["gpu"] = _safe(lambda: backend.device_name(out["device"]))
                out["total_memory"] = _safe(lambda: backend.total_memory(out["device"]))
        return out

    def stats(self) -> tuple[dict[int, dict[str, Any]], list[Any], bool, bool]:
        """({device: memory_stats}, segments, fast path used, consistent) of one instant.

        Other threads (autograd's device threads run without the GIL) may
        allocate while the segments are read, so the counters are read
        before and after: when the cumulative alloc/free counts did not
        move, the segments and the counters describe the same instant
        (``consistent``); otherwise it is retried a few times.  The cyclic
        GC is held off meanwhile: a collection could free tensors.
        """
        backend = self.backend()
        was = gc.isenabled()
        gc.disable()
        try:
            for _attempt in range(3):
                device = backend.current_device()
                before = {device: backend.memory_stats(device)}
                segments, fast = self._segments(backend)
                devices = {device}
                for seg in segments:
                    d = seg.get("device") if isinstance(seg, dict) else None
                    if isinstance(d, int):
                        devices.add(d)
                stats = {d: backend.memory_stats(d) for d in sorted(devices)}
                consistent = all(_moves(before[d]) == _moves(stats[d]) for d in before)
                if consistent:
                    break
        finally:
            if was:
                gc.enable()
        return stats, segments, fast, consistent

    def snapshot(self) -> tuple[dict[str, Any], dict[int, dict[str, Any]], float]:
        """(full snapshot with traces, memory_stats of its devices, seconds)."""
        backend = self.backend()
        t0 = time.perf_counter()
        was = gc.isenabled()
        gc.disable()
        try:
            snap = backend.snapshot()
            devices = {backend.current_device()}
            for seg in snap.get("segments") or []:
                d = seg.get("device") if isinstance(seg, dict) else None
                if isinstance(d, int):
                    devices.add(d)
            stats = {d: backend.memory_stats(d) for d in sorted(devices)}
        finally:
            if was:
                gc.enable()
        return snap, stats, time.perf_counter() - t0

    def _segments(self, backend: Any) -> tuple[list[Any], bool]:
        # A fake allocator (tests) offers the segments-only snapshot directly.
        direct = getattr(backend, "segments_snapshot", None)
        if direct is not None:
            return list(direct()), True
        torch = getattr(backend, "torch", None)
        if torch is not None and self._fast is not False:
            # torch >= 2.11: _cuda_memorySnapshot((pool_a, pool_b, include_traces));
            # pool (0, 0) means every pool, and without traces the ring buffer is
            # not turned into Python objects at all (the expensive part).
            try:
                snap = torch._C._cuda_memorySnapshot((0, 0, False))
                self._fast = True
                return list(snap["segments"]), True
            except Exception:
                self._fast = False
        snap = backend.snapshot()  # older torch: the whole history, then dropped
        return list(snap.get("segments") or []), False


_MOVES = (
    "allocation.all.allocated",
    "allocation.all.freed",
    "segment.all.allocated",
    "segment.all.freed",
    "allocated_bytes.all.allocated",
    "allocated_bytes.all.freed",
)


def _moves(stats: dict[str, Any]) -> tuple[Any, ...]:
    """Cumulative counters that change with every allocation, free and segment."""
    return tuple(stats.get(k) for k in _MOVES) + (
        stats.get("reserved_bytes.all.current"),
        stats.get("active_bytes.all.current"),
    )


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None
