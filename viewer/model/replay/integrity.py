"""What in a replayed timeline cannot be shown as exact, and why.

A replay is exact when every event applies to the state the previous ones
left (no inconsistency) and the layout after the last event is the recorded
one.  Recordings break that in known ways: lost events (an overflowed or
interrupted ring), a trace from another program's allocator, a file edited
by hand.  And a ring buffer that wrapped, or a recording that started late,
leaves the sizes of blocks allocated before the window to be inferred.

:func:`check` finds those stretches per device as :class:`Untrusted`:

* ``"inconsistent"``: from the first event the replay could not apply (named,
  with why) to the last one, or to the end when the final layout still differs
  from the recording; views must not show layouts there as exact;
* ``"estimated"``: from the start to the last free of a block allocated before
  the window; sizes there are inferred by the allocator's rounding.

:func:`final_difference` compares a (live) timeline's layout after its last
event with a snapshot's segments: the check a live session runs per update.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..core.snapshot import Action, Snapshot
from ..core.units import format_bytes, plural
from . import DeviceReplay, Layout
from .native_loop import _core, _layout_from_columns, _run_native
from .state import _apply, _State
from .timeline import Timeline

CHUNK = 4096  # events per step of the search for the first / last inconsistent event
NAMES = {int(a): a.name.lower() for a in Action}


@dataclass
class Untrusted:
    """A stretch of one device's timeline that is not exact."""

    device: int
    first_event: int  # index in the device's trace
    last_event: int  # inclusive
    kind: str  # "inconsistent" | "estimated"
    reason: str

    def line(self) -> str:
        """One line for a status bar, a log or the CLI."""
        span = (
            f"event {self.first_event}"
            if self.first_event == self.last_event
            else f"events {self.first_event}-{self.last_event}"
        )
        what = "not exact" if self.kind == "inconsistent" else "estimated"
        return f"device {self.device}: {span} {what}: {self.reason}"

    def to_dict(self) -> dict:
        return asdict(self)


def check(timeline: Timeline, devices=None) -> list[Untrusted]:
    """Every untrusted stretch of every device of ``timeline`` (device order);
    ``devices``: only those (the OOM reports check their devices only)."""
    out: list[Untrusted] = []
    snap = timeline.snap
    for d in sorted(timeline.devices):
        if devices is not None and d not in devices:
            continue
        rep = timeline.devices[d]
        if not len(rep):
            continue
        est = _estimated(rep, snap)
        if est is not None:
            out.append(est)
        bad = _inconsistent(rep, snap)
        if bad is not None:
            out.append(bad)
    return out


def untrusted_at(untrusted: list[Untrusted], device: int, k: int) -> Untrusted | None:
    """The stretch of ``untrusted`` that holds event ``k`` of ``device``, or None when
    the state after that event is exact.  Where an estimate and an inconsistency
    overlap, the inconsistency (the graver reason) is the one named."""
    hits = [u for u in untrusted if u.device == device and u.first_event <= k <= u.last_event]
    return next((u for u in hits if u.kind == "inconsistent"), hits[0] if hits else None)


def final_difference(timeline: Timeline, snap: Snapshot | None = None) -> list[Untrusted]:
    """Devices whose replayed layout after the last event differs from ``snap``'s
    segments (default: the timeline's snapshot), one :class:`Untrusted` each."""
    snap = snap or timeline.snap
    out = []
    for d in sorted(timeline.devices):
        rep = timeline.devices[d]
        if not len(rep):
            continue
        diff = _segments_differ(rep.layout_after(len(rep) - 1), snap, d)
        if diff:
            n = len(rep)
            out.append(
                Untrusted(
                    d,
                    n - 1,
                    n - 1,
                    "inconsistent",
                    f"after the last event the replay differs from the recorded "
                    f"segments ({diff}): events are missing from the trace",
                )
            )
    return out


# ---------------------------------------------------------------------------- estimates
def _estimated(rep: DeviceReplay, snap: Snapshot) -> Untrusted | None:
    orphans = np.flatnonzero((rep.action == Action.FREE_COMPLETED) & (rep.alloc_of < 0))
    init = rep.initial
    live0 = int(np.count_nonzero(init.blk_state != 2)) if init.n_blocks else 0
    if not len(orphans) or not live0:
        return None
    overflowed = bool(snap.trace_overflowed)
    why = (
        "the ring buffer overflowed (trace_alloc_overflowed)"
        if overflowed
        else "the trace starts after allocations were made (a wrapped ring buffer or a late start)"
    )
    return Untrusted(
        rep.device,
        0,
        int(orphans[-1]),
        "estimated",
        f"{why}: {plural(len(orphans), 'block')} allocated before the first event "
        f"{'has its size' if len(orphans) == 1 else 'have sizes'} inferred by the "
        "allocator's rounding until the last is freed",
    )


# ---------------------------------------------------------------------------- inconsistencies
def _inconsistent(rep: DeviceReplay, snap: Snapshot) -> Untrusted | None:
    n = len(rep)
    diff = _segments_differ(rep.layout_after(n - 1), snap, rep.device)
    if not rep.inconsistencies and not diff:
        return None
    events_bad = rep.inconsistencies - rep.seed_inconsistencies
    first, last, before = _find_inconsistent(rep) if events_bad else (-1, -1, None)
    if first < 0 and rep.seed_inconsistencies:
        seeds = rep.seed_inconsistencies
        return Untrusted(
            rep.device,
            0,
            n - 1,
            "inconsistent",
            f"the recorded snapshot contradicts its own trace: walking back from "
            f"it, {plural(seeds, 'segment or block', 'segments or blocks')} "
            f"{'overlaps' if seeds == 1 else 'overlap'} before "
            "the first event" + (f"; the replay ends on other segments ({diff})" if diff else ""),
        )
    if first < 0:  # no event failed, yet the end differs: events were lost unseen
        return Untrusted(
            rep.device,
            n - 1,
            n - 1,
            "inconsistent",
            f"the replay ends on other segments than recorded ({diff}): "
            "events are missing from the trace",
        )
    reason = _why(before, rep, first)
    if rep.inconsistencies > 1:
        reason += f" ({plural(rep.inconsistencies, 'event')} in all could not be applied)"
    if diff:
        reason += f"; the replay ends on other segments than recorded ({diff})"
    return Untrusted(rep.device, first, n - 1 if diff else last, "inconsistent", reason)


def _find_inconsistent(rep: DeviceReplay) -> tuple[int, int, Layout | None]:
    """(first, last) event the replay could not apply, and the layout before the first."""
    n = len(rep)
    first, last, before = -1, -1, None
    if rep.native and _core is not None:
        cap = rep._native_state(rep.initial)
        count = 0
        for a in range(0, n, CHUNK):
            b = min(n, a + CHUNK)
            start = _layout_from_columns(_core.layout(cap))
            _run_native(cap, rep, a, b)
            now = _core.inconsistencies(cap)
            if now == count:
                continue
            count = now
            # Which events of this chunk: step through it from its start.
            sub = rep._native_state(start)
            seen = 0
            for k in range(a, b):
                lay = _layout_from_columns(_core.layout(sub)) if first < 0 else None
                _run_native(sub, rep, k, k + 1)
                c = _core.inconsistencies(sub)
                if c > seen:
                    seen = c
                    if first < 0:
                        first, before = k, lay
                    last = k
        return first, last, before
    st = _State.from_layout(rep.initial, rep.settings, rep.known)
    for k in range(n):
        c = st.inconsistencies
        lay = st.layout() if first < 0 else None
        _apply(st, rep, k, k + 1)
        if st.inconsistencies > c:
            if first < 0:
                first, before = k, lay
            last = k
    return first, last, before


def _why(layout: Layout | None, rep: DeviceReplay, k: int) -> str:
    """Event ``k`` in words, and why the state before it cannot take it."""
    act, addr, size = int(rep.action[k]), int(rep.addr[k]), int(rep.size[k])
    head = f"event {k} ({NAMES.get(act, act)} of {format_bytes(size)} at 0x{addr:x})"
    if layout is None:
        return head + " does not fit the state before it"
    blk = np.flatnonzero(layout.blk_addr == addr)
    state = int(layout.blk_state[blk[0]]) if len(blk) else None
    i = int(np.searchsorted(layout.seg_addr, addr, side="right")) - 1
    in_seg = i >= 0 and addr < int(layout.seg_addr[i] + layout.seg_size[i])
    if act == Action.ALLOC:
        why = (
            "is outside every segment"
            if not in_seg
            else "lands on a block that is still in use"
            if state in (0, 1)
            else "lands inside a block, not at its start"
            if state is None
            else "needs more than the free block there"
        )
    elif act == Action.FREE_REQUESTED:
        why = "frees a block that is not allocated" if state != 0 else "cannot be applied"
    elif act == Action.FREE_COMPLETED:
        why = (
            "completes a free of a block that is not in use"
            if state not in (0, 1)
            else "cannot be applied"
        )
    elif act == Action.SEGMENT_ALLOC:
        why = "overlaps a segment that exists"
    elif act == Action.SEGMENT_FREE:
        why = (
            "frees a segment that does not exist"
            if not (in_seg and layout.seg_addr[i] == addr)
            else "frees a segment that still holds blocks in use"
        )
    elif act == Action.SEGMENT_MAP:
        why = "maps memory that is already mapped or reaches into another segment"
    elif act == Action.SEGMENT_UNMAP:
        why = "unmaps memory that is not a free mapped range"
    else:
        why = "cannot be applied"
    return f"{head} {why}"


def _segments_differ(layout: Layout, snap: Snapshot, device: int) -> str:
    """'' when ``layout``'s segments equal ``snap``'s on ``device``, else the first few."""
    segs = snap.segments
    on = np.flatnonzero(segs.device == device)
    theirs = set(zip(segs.address[on].tolist(), segs.total_size[on].tolist()))
    ours = set(zip(layout.seg_addr.tolist(), layout.seg_size.tolist()))
    if theirs == ours:
        return ""
    rec = sorted(theirs - ours)[:2]
    rep = sorted(ours - theirs)[:2]
    parts = []
    if rec:
        parts.append("recorded only " + ", ".join(f"0x{a:x} ({format_bytes(s)})" for a, s in rec))
    if rep:
        parts.append("replayed only " + ", ".join(f"0x{a:x} ({format_bytes(s)})" for a, s in rep))
    return "; ".join(parts)
