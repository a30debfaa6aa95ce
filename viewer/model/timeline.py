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


def build_timeline(snap: Snapshot, progress: Progress | None = None) -> Timeline:
    progress = progress or Progress()
    devices = sorted(set(np.unique(snap.trace.device).tolist()))
    return Timeline(snap, {d: replay_device(snap, d, progress) for d in devices})


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
    return Intervals(
        start=np.concatenate([np.full(len(live0), -1, np.int64), alloc.astype(np.int64)]),
        end=np.concatenate([pre_end, rep.freed_at[alloc]]),
        size=np.concatenate([init.blk_size[live0], rep.block_size[alloc]]),
        requested=np.concatenate([init.blk_requested[live0], rep.size[alloc]]),
        stack=np.concatenate([init.blk_stack[live0], rep.stack[alloc]]).astype(np.int32),
        addr=np.concatenate([pre_addr, rep.addr[alloc]]),
        event=np.concatenate([np.full(len(live0), -1, np.int64), alloc.astype(np.int64)]),
        stream=np.concatenate([init.seg_stream[pre_seg], rep.stream[alloc]]).astype(np.int64),
        pool=np.concatenate([init.seg_pool[pre_seg], rep.pool[alloc]]).astype(np.int32),
    )


def live_at(iv: Intervals, k: int) -> np.ndarray:
    """Indices of the intervals live after event ``k``."""
    return np.flatnonzero((iv.start <= k) & (iv.end > k))
