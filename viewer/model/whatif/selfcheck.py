"""Self-check: at the recorded settings the model must reproduce the recording.

Every segment_alloc / segment_free / map / unmap must come at the same
request with the same size, the final segments must equal the snapshot's,
and the peaks must equal the allocator's own ``*.all.peak`` counters.  Any
difference is reported as the first event that differs, so a wrong rule
shows where it first mattered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.snapshot import Action, Snapshot
from .requests import Requests
from .run import SimResult

NAMES = {int(a): a.name.lower() for a in Action}


@dataclass
class CheckResult:
    ok: bool
    n_segment_events: int
    first_difference: str  # "" when ok

    def __bool__(self) -> bool:
        return self.ok

    def sentence(self) -> str:
        """What every view says of the self-check: the What-if panel shows it, and the
        commands give it as their warning when the check failed (:meth:`warnings`)."""
        if self.ok:
            return (
                "Self-check passed: at the recorded settings the allocator model reproduces "
                "every segment event of the recording."
            )
        return (
            "The allocator model does not reproduce this recording at its recorded settings "
            f"({self.first_difference}): predictions are approximate."
        )

    def warnings(self) -> list[str]:
        """The commands' warnings: the sentence when the check failed, else none."""
        return [] if self.ok else [self.sentence()]


def compare_events(reqs: Requests, sim: SimResult) -> str:
    """'' when the model's segment events equal the recorded ones, else the first difference."""
    rec = list(zip(reqs.seg_tag.tolist(), reqs.seg_action.tolist(), reqs.seg_size.tolist()))
    ours = [(t, a, s) for t, a, _, s in sim.events]
    for j, (r, o) in enumerate(zip(rec, ours)):
        if r != o:
            return (
                f"segment event {j}: recorded {_describe(reqs, r)}, simulated {_describe(reqs, o)}"
            )
    if len(rec) != len(ours):
        j = min(len(rec), len(ours))
        extra = rec[j] if len(rec) > j else ours[j]
        who = "recorded" if len(rec) > j else "simulated"
        return f"segment event {j}: only {who}: {_describe(reqs, extra)}"
    return ""


def _describe(reqs: Requests, ev: tuple[int, int, int]) -> str:
    tag, act, size = ev
    where = (
        f"at trace event {int(reqs.event[tag])}"
        if 0 <= tag < len(reqs)
        else "after the last request"
    )
    return f"{NAMES.get(act, act)} of {size} bytes {where} (request {tag})"


def compare_segments(snap: Snapshot, device: int, sim: SimResult) -> str:
    """'' when the model's final segments equal the snapshot's (address and size)."""
    segs = snap.segments
    on = np.flatnonzero(segs.device == device)
    theirs = sorted(zip(segs.address[on].tolist(), segs.total_size[on].tolist()))
    ours = [(a, s) for a, s, _, _ in sim.final_segments]
    if theirs == ours:
        return ""
    missing = sorted(set(theirs) - set(ours))[:3]
    extra = sorted(set(ours) - set(theirs))[:3]
    return f"final segments differ: snapshot only {missing}, simulated only {extra}"


def self_check(snap: Snapshot, device: int, reqs: Requests, sim: SimResult) -> CheckResult:
    """Compare a simulation at the recorded settings with the recording."""
    diff = compare_events(reqs, sim) or compare_segments(snap, device, sim)
    return CheckResult(ok=not diff, n_segment_events=len(reqs.seg_tag), first_difference=diff)
