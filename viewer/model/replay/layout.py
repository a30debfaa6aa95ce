"""Layouts: the segments and blocks of one device at one instant, as numpy columns.

Shared by every part of the replay (the Python reference state, the C glue,
seeding, curves) and by the views (``layout_snapshot`` turns a layout into
a :class:`~..core.snapshot.Snapshot` so every view works at any moment).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.snapshot import Blocks, BlockState, Segments, Snapshot

ALLOCATED, PENDING, FREE = (
    int(BlockState.ALLOCATED),
    int(BlockState.PENDING_FREE),
    int(BlockState.FREE),
)
BEFORE_RECORDING = -1
_LAYOUT_DTYPES = (
    np.int64,
    np.int64,
    np.int64,
    np.bool_,
    np.int32,
    np.bool_,
    np.int64,
    np.int64,
    np.int64,
    np.int8,
    np.int32,
    np.int64,
)


@dataclass
class Layout:
    """Segments and blocks at one instant, sorted by address (numpy columns)."""

    seg_addr: np.ndarray
    seg_size: np.ndarray
    seg_stream: np.ndarray
    seg_small: np.ndarray
    seg_pool: np.ndarray
    seg_expandable: np.ndarray
    blk_addr: np.ndarray
    blk_size: np.ndarray
    blk_requested: np.ndarray
    blk_state: np.ndarray
    blk_stack: np.ndarray
    blk_alloc: np.ndarray  # local event index of the allocation, -1: before recording

    @property
    def n_blocks(self) -> int:
        return len(self.blk_addr)


def initial_segment_of_blocks(layout: Layout) -> np.ndarray:
    """Row in ``layout``'s segments of each of its blocks."""
    if not layout.n_blocks or not len(layout.seg_addr):
        return np.zeros(layout.n_blocks, np.int64)
    return np.clip(
        np.searchsorted(layout.seg_addr, layout.blk_addr, side="right") - 1,
        0,
        len(layout.seg_addr) - 1,
    )


def layout_snapshot(snap: Snapshot, layout: Layout, device: int) -> Snapshot:
    """A :class:`Snapshot` whose segments and blocks are ``layout`` (the rest shared),
    so every view and figure of a snapshot works at any moment of the trace."""
    nseg = len(layout.seg_addr)
    seg_of = (
        np.searchsorted(layout.seg_addr, layout.blk_addr, side="right") - 1
        if layout.n_blocks
        else np.zeros(0, np.int64)
    )
    counts = np.bincount(seg_of, minlength=nseg) if layout.n_blocks else np.zeros(nseg, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if nseg else np.zeros(0, np.int64)
    segments = Segments(
        device=np.full(nseg, device, np.int32),
        address=layout.seg_addr,
        total_size=layout.seg_size,
        stream=layout.seg_stream,
        is_small=layout.seg_small,
        pool=layout.seg_pool,
        is_expandable=layout.seg_expandable,
        stack=np.full(nseg, -1, np.int32),
        block_start=starts.astype(np.int64),
        block_count=counts.astype(np.int64),
    )
    blocks = Blocks(
        segment=seg_of.astype(np.int32),
        address=layout.blk_addr,
        size=layout.blk_size,
        requested_size=np.where(layout.blk_state == FREE, 0, layout.blk_requested),
        state=layout.blk_state,
        stack=layout.blk_stack,
    )
    return Snapshot(
        segments=segments,
        blocks=blocks,
        trace=snap.trace,
        annotations=snap.annotations,
        frames=snap.frames,
        stacks=snap.stacks,
        pools=snap.pools,
        allocator_settings=snap.allocator_settings,
        source_format=snap.source_format,
        path=snap.path,
        warnings=snap.warnings,
        sidecar=snap.sidecar,
        alloc_annotations=snap.alloc_annotations,
        host=snap.host,  # newer torch's, unchanged
    )
