"""The recorded window as a whole: per-device replays, allocation intervals,
and the snapshot at any event (time travel)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .progress import Progress
from .replay import (
    ALLOCATED,
    BEFORE_RECORDING,
    PENDING,
    DeviceReplay,
    initial_segment_of_blocks,
    layout_snapshot,
    replay_device,
)
from .snapshot import Action, Snapshot


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

    def take(self, ids: np.ndarray) -> "Intervals":
        """The intervals ``ids`` (in that order), e.g. one stream's."""
        return Intervals(**{f: getattr(self, f)[ids] for f in self.__dataclass_fields__})


@dataclass
class Timeline:
    """Replays of every device that has trace events."""

    snap: Snapshot
    devices: dict[int, DeviceReplay]

    def replay(self, device: int) -> DeviceReplay | None:
        return self.devices.get(device)

    def snapshot_at(self, device: int, k: int) -> Snapshot:
        """The snapshot as it was after event ``k`` of ``device`` (all views work on it)."""
        rep = self.devices[device]
        return layout_snapshot(self.snap, rep.layout_after(k), device)


def build_timeline(snap: Snapshot, progress: Progress | None = None, keyframes: bool = True,
                   emit: dict[int, list[int]] | None = None) -> Timeline:
    """Replay every device's trace.

    ``keyframes=False`` (headless reports) keeps no keyframes; the layouts after
    the events in ``emit`` (device -> event indices, e.g. :func:`oom_events`)
    are kept instead, so seeking there stays free.
    """
    progress = progress or Progress()
    trace = snap.trace
    if len(trace.device) and trace.device.min() == trace.device.max():
        devices = [int(trace.device[0])]
    else:
        devices = sorted(set(np.unique(trace.device).tolist()))
    emit = emit or {}
    return Timeline(snap, {d: replay_device(snap, d, progress, keyframes=keyframes,
                                            emit_at=emit.get(d, ())) for d in devices})


def oom_events(snap: Snapshot) -> dict[int, list[int]]:
    """device -> indices (in that device's trace) of its OOM events."""
    trace = snap.trace
    rows = np.flatnonzero(trace.action == Action.OOM)
    out: dict[int, list[int]] = {}
    if not len(rows):
        return out
    for d in np.unique(trace.device[rows]).tolist():
        mine = rows[trace.device[rows] == d]
        if trace.device.min() == trace.device.max():  # one device: rows are its indices
            out[d] = mine.tolist()
        else:
            out[d] = np.searchsorted(np.flatnonzero(trace.device == d), mine).tolist()
    return out


def intervals(rep: DeviceReplay) -> Intervals:
    """Allocation lifetimes: in-window allocations plus those from before recording."""
    n = len(rep)
    alloc = np.flatnonzero(rep.action == Action.ALLOC)
    # Blocks live at the start: their end is their first free_completed (by address).
    init = rep.initial
    live0 = np.flatnonzero((init.blk_state == ALLOCATED) | (init.blk_state == PENDING))
    pre_addr = init.blk_addr[live0]
    pre_end = np.full(len(live0), n, dtype=np.int64)
    pre_seg = initial_segment_of_blocks(init)[live0]
    orphan = np.flatnonzero((rep.action == Action.FREE_COMPLETED) & (rep.alloc_of == BEFORE_RECORDING))
    if len(orphan) and len(live0):
        where = {a: i for i, a in enumerate(pre_addr.tolist())}
        for k, a in zip(orphan.tolist(), rep.addr[orphan].tolist()):
            i = where.pop(a, None)
            if i is not None:
                pre_end[i] = k
    # Each column written once into its final array (millions of allocations at 10M
    # events: no concatenate-then-cast copies).
    p = len(live0)

    def column(pre: np.ndarray, src: np.ndarray, dtype) -> np.ndarray:
        out = np.empty(p + len(alloc), dtype)
        out[:p] = pre
        if src.dtype == dtype:
            np.take(src, alloc, out=out[p:])
        else:
            out[p:] = src[alloc]
        return out

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
