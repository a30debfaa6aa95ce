"""Exact memory figures of a snapshot, computed from its blocks.

The allocator's own counters are the truth: each figure here equals the
``torch.cuda.memory_stats()`` counter of the same name taken at the same
instant (``reserved_bytes``, ``allocated_bytes``, ``active_bytes``,
``requested_bytes``, ``segment``, ``inactive_split_bytes``; ``.all.current``).
The allocator leaves expandable segments out of ``segment`` and
``inactive_split_bytes``; vramscope does the same there and reports its own
figures for them beside (``expandable_*``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..core import allocator_rules as rules
from ..core.snapshot import BlockState, Snapshot

# Each figure the allocator counts too -> its torch.cuda.memory_stats() key.
ALLOCATOR_COUNTERS = {
    "reserved_bytes": "reserved_bytes.all.current",
    "allocated_bytes": "allocated_bytes.all.current",
    "active_bytes": "active_bytes.all.current",
    "requested_bytes": "requested_bytes.all.current",
    "segment_count": "segment.all.current",
    "inactive_split_bytes": "inactive_split_bytes.all.current",
    "allocation_count": "allocation.all.current",
}


@dataclass(frozen=True)
class MemoryStats:
    """Figures for a set of segments (a device, pool, stream or everything)."""

    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    requested_bytes: int
    segment_count: int
    inactive_split_bytes: int
    free_bytes: int
    pending_free_bytes: int
    rounding_waste_bytes: int
    gap_count: int
    largest_free_block_bytes: int
    fragmentation: float
    allocation_count: int
    expandable_segment_count: int
    expandable_free_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Selection:
    """Which segments to look at; ``None`` means any."""

    device: int | None = None
    pool: int | None = None  # index into Snapshot.pools
    stream: int | None = None
    is_small: bool | None = None

    def segment_mask(self, snap: Snapshot) -> np.ndarray:
        segs = snap.segments
        mask = np.ones(len(segs), dtype=bool)
        if self.device is not None:
            mask &= segs.device == self.device
        if self.pool is not None:
            mask &= segs.pool == self.pool
        if self.stream is not None:
            mask &= segs.stream == self.stream
        if self.is_small is not None:
            mask &= segs.is_small == self.is_small
        return mask


def _sum(values: np.ndarray, mask: np.ndarray) -> int:
    return int(values[mask].sum(dtype=np.int64)) if mask.any() else 0


def memory_stats(snap: Snapshot, selection: Selection | None = None) -> MemoryStats:
    """Exact figures for the selected segments (all segments by default)."""
    segs, blocks = snap.segments, snap.blocks
    seg_mask = (selection or Selection()).segment_mask(snap)
    in_sel = seg_mask[blocks.segment] if len(blocks) else np.zeros(0, dtype=bool)
    state = blocks.state
    allocated = in_sel & (state == BlockState.ALLOCATED)
    pending = in_sel & (state == BlockState.PENDING_FREE)
    active = allocated | pending
    free = in_sel & (state == BlockState.FREE)
    expandable_block = segs.is_expandable[blocks.segment] if len(blocks) else free
    split_segment = segs.block_count[blocks.segment] > 1 if len(blocks) else free
    free_sizes = blocks.size[free]
    largest = int(free_sizes.max()) if len(free_sizes) else 0
    free_bytes = int(free_sizes.sum(dtype=np.int64))
    return MemoryStats(
        reserved_bytes=_sum(segs.total_size, seg_mask),
        allocated_bytes=_sum(blocks.size, allocated),
        active_bytes=_sum(blocks.size, active),
        requested_bytes=_sum(blocks.requested_size, active),
        segment_count=int((seg_mask & ~segs.is_expandable).sum()),
        inactive_split_bytes=_sum(blocks.size, free & split_segment & ~expandable_block),
        free_bytes=free_bytes,
        pending_free_bytes=_sum(blocks.size, pending),
        rounding_waste_bytes=_sum(blocks.size - blocks.requested_size, active),
        gap_count=int(free.sum()),
        largest_free_block_bytes=largest,
        fragmentation=(1.0 - largest / free_bytes) if free_bytes else 0.0,
        allocation_count=int(allocated.sum()),
        expandable_segment_count=int((seg_mask & segs.is_expandable).sum()),
        expandable_free_bytes=_sum(blocks.size, free & expandable_block),
    )


@dataclass(frozen=True)
class PoolKey:
    """A place where the allocator keeps separate free lists."""

    device: int
    pool: int
    stream: int
    is_small: bool

    def selection(self) -> Selection:
        return Selection(self.device, self.pool, self.stream, self.is_small)


def pool_keys(snap: Snapshot) -> list[PoolKey]:
    """Every (device, pool, stream, small/large) that has segments, sorted."""
    segs = snap.segments
    if not len(segs):
        return []
    table = np.stack(
        [
            segs.device.astype(np.int64),
            segs.pool.astype(np.int64),
            segs.stream,
            segs.is_small.astype(np.int64),
        ],
        axis=1,
    )
    rows = np.unique(table, axis=0)
    return [PoolKey(int(d), int(p), int(s), bool(small)) for d, p, s, small in rows]


@dataclass(frozen=True)
class FitResult:
    """Answer to "would a request of N bytes fit in the cache right now?"."""

    requested_bytes: int
    rounded_bytes: int
    pool_kind: str  # "small" or "large"
    fits: bool
    block_index: int | None  # the best-fit free block, as the allocator picks it
    block_bytes: int
    largest_free_block_bytes: int
    free_bytes: int
    new_segment_bytes: int  # the cudaMalloc needed when nothing fits


def fit_request(
    snap: Snapshot,
    nbytes: int,
    device: int = 0,
    stream: int = 0,
    pool: int | None = None,
    rounded: bool = False,
) -> FitResult:
    """Best-fit search of the cached free blocks, as the allocator does it.

    ``pool`` is an index into ``snap.pools`` (default: the ordinary pool
    ``(0, 0)`` if present).  ``rounded=True`` means ``nbytes`` is already a
    block size (trace events and OOM records hold rounded sizes).
    """
    settings = snap.allocator_settings
    size = nbytes if rounded else rules.round_size(nbytes, settings)
    small = rules.is_small_request(size)
    if pool is None:
        pool = snap.ordinary_pool
    sel = Selection(device=device, pool=pool, stream=stream, is_small=small)
    seg_mask = sel.segment_mask(snap) if pool is not None else np.zeros(len(snap.segments), bool)
    blocks = snap.blocks
    free = (
        (blocks.state == BlockState.FREE) & seg_mask[blocks.segment]
        if len(blocks)
        else np.zeros(0, dtype=bool)
    )
    idx = np.flatnonzero(free)
    sizes = blocks.size[idx]
    usable = (
        np.array([rules.block_usable(int(s), size, settings) for s in sizes], dtype=bool)
        if rules.max_split_size(settings)
        else sizes >= size
    )
    best = None
    best_bytes = 0
    if usable.any():
        cand = idx[usable]
        order = np.lexsort((blocks.address[cand], blocks.size[cand]))
        best = int(cand[order[0]])
        best_bytes = int(blocks.size[best])
    return FitResult(
        requested_bytes=int(nbytes),
        rounded_bytes=size,
        pool_kind="small" if small else "large",
        fits=best is not None,
        block_index=best,
        block_bytes=best_bytes,
        largest_free_block_bytes=int(sizes.max()) if len(sizes) else 0,
        free_bytes=int(sizes.sum(dtype=np.int64)),
        new_segment_bytes=rules.segment_size_for(size),
    )


def largest_gaps(snap: Snapshot, k: int = 10, selection: Selection | None = None) -> np.ndarray:
    """Row indices of the ``k`` largest free blocks, biggest first."""
    blocks = snap.blocks
    mask = blocks.state == BlockState.FREE
    if selection is not None and len(blocks):
        mask &= selection.segment_mask(snap)[blocks.segment]
    idx = np.flatnonzero(mask)
    if not len(idx):
        return idx
    order = np.argsort(-blocks.size[idx], kind="stable")
    return idx[order[:k]]
