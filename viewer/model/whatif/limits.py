"""The memory limit a recording ran under, when its sidecar does not say.

A new segment succeeds only while ``reserved + allocation size <= limit``;
the allocator releasing cache before a new segment, or an OOM, means the
first attempt failed.  Walking the recorded answers with the reserved total
gives bounds: every success raises the lower bound, every failure lowers the
upper one.  Any limit between them makes the same decisions at the recorded
settings; predictions use the middle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import allocator_rules as rules
from ..core.snapshot import Action
from . import requests as rq

RELEASES = (int(Action.SEGMENT_FREE), int(Action.SEGMENT_UNMAP))
GROWTH = (int(Action.SEGMENT_ALLOC), int(Action.SEGMENT_MAP))


@dataclass(frozen=True)
class LimitBounds:
    lower: int  # the limit is at least this
    upper: int | None  # at most this; None: nothing in the recording hit a limit

    @property
    def estimate(self) -> int | None:
        if self.upper is None:
            return None
        return (self.lower + self.upper) // 2 if self.upper >= self.lower else self.upper


def infer_limit(reqs: rq.Requests, cfg: rules.AllocatorConfig) -> LimitBounds:
    """Bounds on the memory limit, from the recorded segment events."""
    total = int(reqs.initial.seg_size.sum())
    lower, upper = total, None
    gc = cfg.garbage_collection_threshold > 0
    answers: dict[int, list[tuple[int, int]]] = {}
    for tag, act, size in zip(reqs.seg_tag.tolist(), reqs.seg_action.tolist(),
                              reqs.seg_size.tolist()):
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
    return LimitBounds(lower, upper)
