"""The memory limit a recording ran under, when its sidecar does not say.

A new segment succeeds only while ``reserved + allocation size <= limit``;
the allocator releasing cache before a new segment, or an OOM, means the
first attempt failed.  Walking the recorded answers with the reserved total
gives bounds: every success raises the lower bound, every failure lowers the
upper one.  Any limit between them makes the same decisions at the recorded
settings; predictions use the middle.

An OOM also says how much the device had free (``cudaMemGetInfo``, taken after
the allocator released every cached segment it could and retried): the
allocator could have had at most the reserved total after that release plus
that free memory.  When that free memory was too small for the new segment, the
device itself was full and the limit the allocator ran against is exactly that
sum (``at_oom``), whatever a constant per-process limit would say.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import allocator_rules as rules
from ..core.snapshot import Action, Snapshot
from . import requests as rq

#: Where the limit comes from when an OOM with the device full decides it (``at_oom``).
AT_OOM_SOURCE = "reserved + the GPU's free memory at the OOM"

RELEASES = (int(Action.SEGMENT_FREE), int(Action.SEGMENT_UNMAP))
GROWTH = (int(Action.SEGMENT_ALLOC), int(Action.SEGMENT_MAP))


@dataclass(frozen=True)
class LimitBounds:
    lower: int  # the limit is at least this
    upper: int | None  # at most this; None: nothing in the recording hit a limit
    # The limit at an OOM where the device itself was full: reserved after the release
    # plus the device's free memory (the last such OOM); None when no OOM says so.
    at_oom: int | None = None

    @property
    def estimate(self) -> int | None:
        if self.upper is None:
            return None
        if self.at_oom is not None:
            return min(self.at_oom, self.upper)
        return (self.lower + self.upper) // 2 if self.upper >= self.lower else self.upper


def infer_limit(
    reqs: rq.Requests, cfg: rules.AllocatorConfig, device_free: np.ndarray | None = None
) -> LimitBounds:
    """Bounds on the memory limit, from the recorded segment events.

    ``device_free``: per event of the device's trace, the free memory an OOM event
    recorded (-1 unknown; the trace's ``device_free`` column at the device's rows)."""
    total = int(reqs.initial.seg_size.sum())
    lower, upper, at_oom = total, None, None
    gc = cfg.garbage_collection_threshold > 0
    answers: dict[int, list[tuple[int, int]]] = {}
    for tag, act, size in zip(
        reqs.seg_tag.tolist(), reqs.seg_action.tolist(), reqs.seg_size.tolist()
    ):
        answers.setdefault(tag, []).append((act, size))
    # Only the requests with answers and the OOMs are read: one at a time, no list of all.
    n = len(reqs.kind)
    ooms = np.flatnonzero(reqs.kind == rq.OOM).tolist()
    for i in sorted(set(answers).union(ooms)):
        events = answers.get(i, [])
        kind = int(reqs.kind[i]) if -n <= i < n else None
        if i >= n or kind not in (rq.ALLOC, rq.OOM):
            total += sum(s if a in GROWTH else -s for a, s in events)
            continue
        need = rules.segment_size_for(cfg.round_size(int(reqs.size[i])))
        first_failed = kind == rq.OOM or (events and events[0][0] in RELEASES and not gc)
        if first_failed:
            upper = min(upper, total + need - 1) if upper is not None else total + need - 1
        grown = False
        for act, size in events:
            if act in RELEASES:
                total -= size
            else:
                if not grown:
                    lower = max(lower, total + need)
                    grown = True
                total += size
        if kind == rq.OOM:  # the retry after releasing failed too
            upper = total + need - 1 if upper is None else min(upper, total + need - 1)
            free = _free_at(device_free, int(reqs.event[i]))
            if free is not None:
                # After the release the device had ``free``: no limit let the allocator
                # hold more than reserved + free then.
                upper = min(upper, total + free)
                if free < need:
                    at_oom = total + free
    return LimitBounds(lower, upper, at_oom)


def _free_at(device_free: np.ndarray | None, event: int) -> int | None:
    if device_free is None or not 0 <= event < len(device_free):
        return None
    free = int(device_free[event])
    return free if free >= 0 else None


def outside_oom_limit(snap: Snapshot, device: int) -> int | None:
    """What the allocator could have had when the dump was taken at an OOM outside it
    (cuBLAS, NCCL, ...) on ``device``: its reserved then plus the device's free memory the
    capture recorded at that moment; None for any other dump."""
    # Here, not at the top: a what-if whose case is cached never asks, and the OOM
    # reports (with the figures and the GPU accounting they import) cost ~20 ms to import.
    from ..analysis.oom import outside_oom

    o = outside_oom(snap)
    if o is None or o.device != device or o.device_free_bytes is None or o.reserved_bytes is None:
        return None
    return o.reserved_bytes + o.device_free_bytes
