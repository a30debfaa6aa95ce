"""The recorded window as a whole: per-device replays, allocation intervals,
and the snapshot at any event (time travel).

Live sessions feed the same model incrementally (see :meth:`Timeline.extend`)::

    tl = build_timeline(snap, live=True)       # once, on the first increment
    ...                                        # the live columns grow (and drop old rows)
    rebuilt = tl.extend(new_snap, first_row, dropped)
    # rebuilt False: every DeviceReplay, CurveIndex and Intervals object the views
    # hold was extended in place; True: the timeline was compacted, re-fetch them.

From a live session (``model.live.session``): ``first_row = len(update.snap.trace) -
update.added``, ``dropped`` = the growth of ``session.columns.dropped`` since the last
update; after ``update.gap`` build a new timeline.  ``Document.extend`` wraps this for
the views (labels for new stacks, OOM verdicts).  ``integrity.final_difference(tl)``
after an update says whether the replay still lands on the live segments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.progress import Progress
from ..core.snapshot import Action, Snapshot
from . import (
    ALLOCATED,
    BEFORE_RECORDING,
    PENDING,
    DeviceReplay,
    initial_segment_of_blocks,
    layout_snapshot,
    replay_device,
)
from .incremental import adopt, extend_device, is_live
from .seed import known_facts


@dataclass
class Intervals:
    """Every allocation's lifetime on one device, ordered by start.

    ``start``/``end`` are event indices of the device's trace: the allocation
    is live after event ``start`` and up to (not after) event ``end``;
    ``start == -1`` means allocated before recording, ``end == n`` alive at
    the end.  ``event`` is the alloc event (-1 before recording).
    """

    start: np.ndarray  # int64
    end: np.ndarray  # int64
    size: np.ndarray  # int64: block size (what the allocator holds)
    requested: np.ndarray  # int64
    stack: np.ndarray  # int32
    addr: np.ndarray  # int64
    event: np.ndarray  # int64
    stream: np.ndarray  # int64
    pool: np.ndarray  # int32 index into Snapshot.pools (-1 unknown)

    def __len__(self) -> int:
        return len(self.start)

    def derived(self, key: str, make):
        """``make(self)``, computed once and kept with these intervals: an index a view
        keeps over them, until the intervals change (a live replay extends them in place,
        and forgets what was derived: :meth:`forget_derived`)."""
        memo = self.__dict__.setdefault("_memo", {})
        if key not in memo:
            memo[key] = make(self)
        return memo[key]

    def forget_derived(self) -> None:
        """Drop what :meth:`derived` kept: the intervals changed."""
        self.__dict__.pop("_memo", None)

    def take(self, ids: np.ndarray) -> "Intervals":
        """The intervals ``ids`` (in that order), e.g. one stream's."""
        return Intervals(**{f: getattr(self, f)[ids] for f in self.__dataclass_fields__})


# A live timeline keeps events the ring has dropped until they are this share of it
# (or MIN_SLACK events): then it is rebuilt from the snapshot (compaction, O(n)),
# so each update costs the new events only, and compaction is amortised.
SLACK_SHARE = 4
MIN_SLACK = 1 << 16


@dataclass
class Timeline:
    """Replays of every device that has trace events.

    A live timeline (``build_timeline(snap, live=True)``) grows with
    :meth:`extend`; its replays may then start with events the live ring has
    already dropped (their ``rows`` are negative) until the next compaction.
    """

    snap: Snapshot
    devices: dict[int, DeviceReplay]
    live: bool = False

    def replay(self, device: int) -> DeviceReplay | None:
        return self.devices.get(device)

    def snapshot_at(self, device: int, k: int) -> Snapshot:
        """The snapshot as it was after event ``k`` of ``device`` (all views work on it)."""
        rep = self.devices[device]
        return layout_snapshot(self.snap, rep.layout_after(k), device)

    def intervals(self, device: int) -> "Intervals | None":
        """Allocation lifetimes of ``device`` (:func:`intervals`), computed once; a live
        timeline extends this same object in place."""
        rep = self.devices.get(device)
        return intervals(rep) if rep is not None else None

    def stale(self, device: int) -> int:
        """Events of ``device`` at the start of its replay that the live ring dropped."""
        rep = self.devices.get(device)
        if rep is None or not len(rep) or rep.rows[0] >= 0:
            return 0
        return int(np.searchsorted(rep.rows, rep.rows.dtype.type(0)))

    def extend(
        self, snap: Snapshot, first_row: int, dropped: int = 0, progress: Progress | None = None
    ) -> bool:
        """Take in a live update without replaying what is known already.

        ``snap``: the live snapshot now (its trace is the ring: old rows dropped at
        the front, new ones appended; its segments are the current ones).
        ``first_row``: the row of ``snap.trace`` where the new events start (the
        previous snapshot's trace length minus ``dropped``).
        ``dropped``: rows dropped from the front of the trace since the last call
        (the ring's ``dropped`` counter, as a difference).

        Each device's replay continues from its kept state over the new rows
        (:func:`.incremental.extend_device`): event columns, keyframes, lifetimes,
        curve summary (:class:`~.curves.CurveIndex`) and intervals
        (:meth:`intervals`) are extended in place, so objects the views hold stay
        valid.  Dropped events stay at the start of the replays (``rows`` < 0,
        see :meth:`stale`) until they reach a quarter of the events: then the
        timeline is rebuilt from ``snap`` (seeded from its segments) and True is
        returned (re-fetch replays, curve columns and intervals).  After a gap in
        the trace (events lost), build a new timeline instead.  Cost: the new
        events (plus amortised compaction), never the whole ring.
        """
        if not self.live:
            raise ValueError("extend() needs a timeline built with live=True")
        self.snap = snap
        if dropped:
            for rep in self.devices.values():
                rep.rows -= np.asarray(dropped, rep.rows.dtype)
        n = sum(len(r) for r in self.devices.values())
        stale = sum(self.stale(d) for d in self.devices)
        if stale and stale > max(MIN_SLACK, n // SLACK_SHARE):
            self.trim(progress)
            return True
        trace = snap.trace
        total = len(trace.device)
        if first_row >= total:
            return False
        rows = np.arange(first_row, total, dtype=np.int64)
        dev = trace.device[first_row:]
        if (dev == dev[0]).all():  # one device (the usual case): no grouping pass
            groups = [(int(dev[0]), rows)]
        else:
            groups = [(d, rows[dev == d]) for d in np.unique(dev).tolist()]
        for d, mine in groups:
            have = self.devices.get(d)
            if have is None:  # a device seen for the first time
                self.devices[d] = new = replay_device(snap, d, progress, live=True)
                adopt(new)
                continue
            n_old = len(have)
            extend_device(have, trace, mine, known_facts(snap, d))
            _extend_intervals(have, n_old)
        return False

    def trim(self, progress: Progress | None = None) -> None:
        """Compaction: rebuild every replay from the current snapshot, so the dropped
        events leave (O(n); :meth:`extend` calls it when they are many)."""
        self.devices = build_timeline(self.snap, progress, live=True).devices


def build_timeline(
    snap: Snapshot,
    progress: Progress | None = None,
    keyframes: bool = True,
    emit: dict[int, list[int]] | None = None,
    live: bool = False,
    on_seeded: Callable[[DeviceReplay], None] | None = None,
) -> Timeline:
    """Replay every device's trace.

    ``keyframes=False`` (headless reports) keeps no keyframes; the layouts after
    the events in ``emit`` (device -> event indices, e.g. :func:`oom_events`)
    are kept instead, so seeking there stays free.  ``live=True`` keeps each
    replay's state so :meth:`Timeline.extend` can add the events that come later.
    ``on_seeded(rep)``: see :func:`replay_device`.
    """
    progress = progress or Progress()
    trace = snap.trace
    if trace.single_device() is not None:
        devices = [int(trace.device[0])]
    else:
        devices = sorted(set(np.unique(trace.device).tolist()))
    emit = emit or {}
    tl = Timeline(
        snap,
        {
            d: replay_device(
                snap,
                d,
                progress,
                keyframes=keyframes,
                emit_at=emit.get(d, ()),
                live=live,
                on_seeded=on_seeded,
            )
            for d in devices
        },
        live,
    )
    if live:
        for rep in tl.devices.values():
            adopt(rep)
    return tl


def at_event(timeline: Timeline, device: int, k: int) -> dict[str, Any]:
    """Facts of event ``k`` of ``device`` (what the state is "after")."""
    rep = timeline.replay(device)
    if rep is None:
        raise ValueError(f"no trace on device {device}")
    return {
        "device": device,
        "event": k,
        "events": len(rep),
        "action": Action(int(rep.action[k])).name.lower(),
        "addr": int(rep.addr[k]),
        "size": int(rep.size[k]),
        "stream": int(rep.stream[k]),
        "time_us": int(rep.time_us[k]) if rep.time_us[k] >= 0 else None,
        "trace_row": int(rep.rows[k]),  # index in the whole trace (all devices)
    }


def oom_events(snap: Snapshot) -> dict[int, list[int]]:
    """device -> indices (in that device's trace) of its OOM events."""
    trace = snap.trace
    rows = np.flatnonzero(trace.action == Action.OOM)
    out: dict[int, list[int]] = {}
    if not len(rows):
        return out
    for d in np.unique(trace.device[rows]).tolist():
        mine = rows[trace.device[rows] == d]
        if trace.single_device() is not None:  # one device: rows are its indices
            out[d] = mine.tolist()
        else:
            out[d] = np.searchsorted(np.flatnonzero(trace.device == d), mine).tolist()
    return out


def intervals(rep: DeviceReplay) -> Intervals:
    """Allocation lifetimes: in-window allocations plus those from before recording.
    A live replay keeps them (extended in place as events arrive)."""
    have = rep._derived.get("intervals")
    if have is not None:
        return have
    iv = _intervals(rep)
    if is_live(rep):
        rep._derived["intervals"] = iv
        adopt(rep)  # room to grow, for the intervals and the lifetimes they used
    return iv


def gather_column(pre: np.ndarray, src: np.ndarray, alloc: np.ndarray, dtype) -> np.ndarray:
    """An interval column: ``pre`` (the blocks live at the start) then ``src[alloc]`` (the
    in-window allocations), written once into its final array (millions of allocations
    at 10M events: no concatenate-then-cast copies)."""
    p = len(pre)
    out = np.empty(p + len(alloc), dtype)
    out[:p] = pre
    if src.dtype == dtype:
        np.take(src, alloc, out=out[p:])
    else:
        out[p:] = src[alloc]
    return out


def _intervals(rep: DeviceReplay) -> Intervals:
    n = len(rep)
    alloc = np.flatnonzero(rep.action == Action.ALLOC)
    # Blocks live at the start: their end is their first free_completed (by address).
    init = rep.initial
    live0 = np.flatnonzero((init.blk_state == ALLOCATED) | (init.blk_state == PENDING))
    pre_addr = init.blk_addr[live0]
    pre_end = np.full(len(live0), n, dtype=np.int64)
    pre_seg = initial_segment_of_blocks(init)[live0]
    orphan = np.flatnonzero(
        (rep.action == Action.FREE_COMPLETED) & (rep.alloc_of == BEFORE_RECORDING)
    )
    if len(orphan) and len(live0):
        where = {a: i for i, a in enumerate(pre_addr.tolist())}
        for k, a in zip(orphan.tolist(), rep.addr[orphan].tolist()):
            i = where.pop(a, None)
            if i is not None:
                pre_end[i] = k
    p = len(live0)

    def column(pre: np.ndarray, src: np.ndarray, dtype) -> np.ndarray:
        return gather_column(pre, src, alloc, dtype)

    start = np.empty(p + len(alloc), np.int64)
    start[:p] = -1
    start[p:] = alloc
    return Intervals(
        start=start,
        end=column(pre_end, rep.freed_at, np.int64),
        size=column(init.blk_size[live0], rep.block_size, np.int64),
        requested=column(init.blk_requested[live0], rep.size, np.int64),
        stack=column(init.blk_stack[live0], rep.stack, np.int32),
        addr=column(pre_addr, rep.addr, np.int64),
        event=start,  # the alloc event is where the interval starts (-1: before recording)
        stream=column(init.seg_stream[pre_seg], rep.stream, np.int64),
        pool=column(init.seg_pool[pre_seg], rep.pool, np.int32),
    )


def live_at(iv: Intervals, k: int) -> np.ndarray:
    """Indices of the intervals live after event ``k``."""
    return np.flatnonzero((iv.start <= k) & (iv.end > k))


def _extend_intervals(rep: DeviceReplay, n_old: int) -> None:
    """Extend the kept intervals of a live replay (if any) over events ``n_old..n``:
    open ones close where their free came, new allocations are appended."""
    iv = rep._derived.get("intervals")
    if iv is None:
        return
    from .incremental import _grow

    n = len(rep)
    iv.forget_derived()  # ends close and rows are appended below: views' indexes are stale
    freed_at = rep.freed_at  # extended by extend_device
    open_rows = np.flatnonzero(iv.end == n_old)
    starts = iv.start[open_rows]
    inside = starts >= 0
    iv.end[open_rows[inside]] = freed_at[starts[inside]]
    pre = open_rows[~inside]
    iv.end[pre] = n
    if len(pre):
        act, alloc_of = rep.action[n_old:], rep.alloc_of[n_old:]
        orphan = np.flatnonzero((act == Action.FREE_COMPLETED) & (alloc_of == BEFORE_RECORDING))
        if len(orphan):
            where = dict(zip(iv.addr[pre].tolist(), pre.tolist()))
            for k, a in zip((orphan + n_old).tolist(), rep.addr[orphan + n_old].tolist()):
                i = where.pop(a, None)
                if i is not None:
                    iv.end[i] = k
    alloc = np.flatnonzero(rep.action[n_old:] == Action.ALLOC) + n_old
    if not len(alloc):
        return
    bufs = rep._derived.setdefault("iv_buffers", {})
    new = {
        "start": alloc,
        "end": freed_at[alloc],
        "size": rep.block_size[alloc],
        "requested": rep.size[alloc],
        "stack": rep.stack[alloc],
        "addr": rep.addr[alloc],
        "event": alloc,
        "stream": rep.stream[alloc],
        "pool": rep.pool[alloc],
    }
    for f, values in new.items():
        col = getattr(iv, f)
        setattr(iv, f, _grow(bufs, f, col, values.astype(col.dtype, copy=False)))
