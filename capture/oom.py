"""Writing the snapshot at the moment of an out-of-memory error.

torch calls OOM observers from inside the caching allocator, after it has
given up (cache flushed, retries failed) and released its lock, but before it
raises ``torch.cuda.OutOfMemoryError``.  That is the one moment where the
snapshot shows exactly the memory that could not satisfy the request; by
the time the exception reaches user code, unwinding may already have freed
the evidence.  This is the hook torch's own documentation recommends.

The observer must never raise: an exception there would replace the user's
``OutOfMemoryError`` with ours.  So it catches everything and reports it as
a warning; the original error then propagates unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import messages


@dataclass(frozen=True)
class OomEvent:
    """The arguments torch passes to an OOM observer.

    ``device_alloc`` is what torch passes third: the per-process limit set by
    ``set_per_process_memory_fraction`` where one is set, else the device's
    total memory.  ``request`` is the size the allocator tried to get, i.e.
    the requested block rounded up to the segment it would have needed.
    """

    device: int
    request: int
    device_alloc: int
    device_free: int

    def sidecar_fields(self) -> dict[str, int]:
        return {
            "oom_request": self.request,
            "oom_device_alloc": self.device_alloc,
            "oom_device_free": self.device_free,
            "oom_device": self.device,
        }


def make_observer(dispatch: Callable[[OomEvent], None]) -> Callable[[int, int, int, int], None]:
    """Wrap ``dispatch`` as a torch OOM observer that can never raise an Exception."""

    def observer(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        try:
            dispatch(OomEvent(int(device), int(alloc), int(device_alloc), int(device_free)))
        except Exception as exc:  # never into the allocator; the OOM must stay the user's error
            messages.warn(f"the out-of-memory snapshot failed: {type(exc).__name__}: {exc}")

    return observer


def ensure_attached(backend: Any, dispatch: Callable[[OomEvent], None]) -> bool:
    """Attach one observer per backend for the life of the process.

    torch cannot detach observers, so a single dispatcher is attached the
    first time a recorder becomes active; it does nothing while none is.
    Returns whether an observer is attached.
    """
    if getattr(backend, "_vramscope_oom_attached", False):
        return True
    try:
        backend.attach_oom_observer(make_observer(dispatch))
    except Exception as exc:
        messages.warn(f"cannot watch for out-of-memory errors: {type(exc).__name__}: {exc}")
        return False
    backend._vramscope_oom_attached = True
    return True


def last_oom_trace_size(snapshot: Mapping[str, Any], device: int) -> int | None:
    """Size of the newest ``oom`` entry in ``device``'s trace: the block actually asked for."""
    traces = snapshot.get("device_traces") or []
    if not 0 <= device < len(traces):
        return None
    for entry in reversed(traces[device]):
        if entry.get("action") == "oom":
            size = entry.get("size")
            return int(size) if size is not None else None
    return None
