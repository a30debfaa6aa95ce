"""The segment map's layout and level of detail, Qt-free.

:class:`MapLayout` holds the blocks of the shown segments as numpy columns in display
order (a row per segment, blocks by offset); :func:`lod_rects` turns it into the draw
list for one zoom: runs of sub-pixel blocks merged into one rect of the dominant state,
wide blocks kept exactly with their rounding-waste tails.  Hit-testing is a
``searchsorted`` on the sorted offsets of one row.  The Qt side (``_qt/segment_map/``)
draws each category of the list as one path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..analysis.figures import Selection
from ..core.snapshot import BlockState
from .document import Document

BAR_TOP = 0.17  # a row's bar spans [row + BAR_TOP, row + 1 - BAR_TOP]
SORT_ADDRESS = "address"
SORT_SIZE = "size"
SORT_FREE = "free"  # segments holding the largest free gaps first
CAT_WASTE = 4  # the drawing category of rounding-waste tails (after the BlockStates)


@dataclass
class MapLayout:
    """Blocks of the shown segments, in display order (row, then offset)."""

    seg_rows: np.ndarray  # int64: segment index of each row
    row_size: np.ndarray  # float64: segment size of each row
    row_ptr: np.ndarray  # int64, n_rows + 1: CSR into the block columns
    blocks: np.ndarray  # int64: block index (row in Snapshot.blocks)
    row: np.ndarray  # int64: row of each block
    x0: np.ndarray  # float64: offset of the block inside its segment
    x1: np.ndarray  # float64: x0 + size
    req_end: np.ndarray  # float64: x0 + requested size for active blocks, else x1
    state: np.ndarray  # int8 BlockState
    pos_of_block: np.ndarray  # int64 per snapshot block: position here, -1 if not shown

    @property
    def n_rows(self) -> int:
        return len(self.seg_rows)

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def max_size(self) -> float:
        return float(self.row_size.max()) if len(self.row_size) else 1.0

    @classmethod
    def build(cls, doc: Document, selection: Selection, sort: str = SORT_ADDRESS) -> "MapLayout":
        snap = doc.snap
        segs, blocks = snap.segments, snap.blocks
        idx = np.flatnonzero(selection.segment_mask(snap))
        if sort == SORT_SIZE:
            order = np.lexsort((segs.address[idx], -segs.total_size[idx]))
        elif sort == SORT_FREE:
            largest = np.zeros(len(segs), dtype=np.int64)
            free_total = np.zeros(len(segs), dtype=np.int64)
            free = blocks.state == BlockState.FREE
            np.maximum.at(largest, blocks.segment[free], blocks.size[free])
            np.add.at(free_total, blocks.segment[free], blocks.size[free])
            order = np.lexsort((segs.address[idx], -free_total[idx], -largest[idx]))
        else:
            order = np.lexsort((segs.address[idx], segs.device[idx]))
        rows = idx[order].astype(np.int64)
        counts = segs.block_count[rows].astype(np.int64)
        starts = segs.block_start[rows].astype(np.int64)
        row_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=row_ptr[1:])
        n = int(row_ptr[-1])
        row_of = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        blk = starts[row_of] + (np.arange(n, dtype=np.int64) - row_ptr[:-1][row_of])
        x0 = (blocks.address[blk] - segs.address[rows][row_of]).astype(np.float64)
        # Keep each row sorted by offset whatever the file's order.
        order = np.lexsort((x0, row_of))
        blk, row_of, x0 = blk[order], row_of[order], x0[order]
        size = blocks.size[blk].astype(np.float64)
        state = blocks.state[blk].astype(np.int8)
        active = (state == BlockState.ALLOCATED) | (state == BlockState.PENDING_FREE)
        req = np.minimum(blocks.requested_size[blk].astype(np.float64), size)
        x1 = x0 + size
        req_end = np.where(active, x0 + req, x1)
        pos = np.full(len(blocks), -1, dtype=np.int64)
        pos[blk] = np.arange(n, dtype=np.int64)
        return cls(
            rows,
            segs.total_size[rows].astype(np.float64),
            row_ptr,
            blk,
            row_of,
            x0,
            x1,
            req_end,
            state,
            pos,
        )

    def extent(self, block: int) -> tuple[float, float, float, float] | None:
        """The block's bar ``(x0, y0, x1, y1)`` in view coordinates (x: bytes, y: rows),
        or None when it is not shown."""
        p = int(self.pos_of_block[block]) if 0 <= block < len(self.pos_of_block) else -1
        if p < 0:
            return None
        r = float(self.row[p])
        return float(self.x0[p]), r + BAR_TOP, float(self.x1[p]), r + 1 - BAR_TOP

    def block_at(self, x: float, y: float) -> int:
        """Block index under view point (x, y), or -1."""
        if not self.n_rows or not (0 <= y < self.n_rows):
            return -1
        r = int(math.floor(y))
        frac = y - r
        if frac < BAR_TOP / 2 or frac > 1 - BAR_TOP / 2:
            return -1
        lo, hi = int(self.row_ptr[r]), int(self.row_ptr[r + 1])
        i = int(np.searchsorted(self.x0[lo:hi], x, side="right")) - 1
        if i < 0 or x >= self.x1[lo + i]:
            return -1
        return int(self.blocks[lo + i])


@dataclass
class LodRects:
    """A draw list: rects ``[x0, x1] x row`` of one drawing category each."""

    x0: np.ndarray
    x1: np.ndarray
    row: np.ndarray
    cat: np.ndarray  # a BlockState, or CAT_WASTE
    edges_x: np.ndarray  # block boundaries worth drawing (wide blocks only)
    edges_row: np.ndarray

    def __len__(self) -> int:
        return len(self.x0)


def lod_rects(
    layout: MapLayout,
    bytes_per_px: float,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    min_px: float = 1.0,
) -> LodRects:
    """The level-of-detail draw list for a view of ``bytes_per_px`` bytes per pixel.

    Blocks outside the visible range are culled.  Consecutive blocks of a row
    narrower than ``min_px`` pixels that fall in the same pixel are merged into
    one rect coloured by the state holding most of its bytes (and widened to
    one pixel so it never vanishes); wider blocks are kept exactly, plus their
    rounding-waste tail.  The result has at most about one rect per pixel
    column per row, plus the wide blocks.
    """
    px = max(float(bytes_per_px), 1e-9) * min_px
    n_rows = layout.n_rows
    r0, r1 = 0, n_rows
    if y_range is not None:
        r0 = max(0, int(math.floor(y_range[0])))
        r1 = min(n_rows, int(math.ceil(y_range[1])) + 1)
    if r1 <= r0:
        return empty_lod()
    lo, hi = int(layout.row_ptr[r0]), int(layout.row_ptr[r1])
    x0, x1 = layout.x0[lo:hi], layout.x1[lo:hi]
    row, state, req_end = layout.row[lo:hi], layout.state[lo:hi], layout.req_end[lo:hi]
    if x_range is not None:
        keep = np.flatnonzero((x1 >= x_range[0]) & (x0 <= x_range[1]))
        x0, x1, row, state, req_end = x0[keep], x1[keep], row[keep], state[keep], req_end[keep]
    n = len(x0)
    if n == 0:
        return empty_lod()
    width = x1 - x0
    small = width < px
    pixel = np.floor(x0 / px).astype(np.int64)
    same = np.zeros(n, dtype=bool)
    same[1:] = small[1:] & small[:-1] & (row[1:] == row[:-1]) & (pixel[1:] == pixel[:-1])
    starts = np.flatnonzero(~same)
    ends = np.append(starts[1:], n) - 1
    g_x0 = x0[starts]
    g_x1 = x1[ends]
    g_row = row[starts]
    merged = ends > starts
    g_cat = state[starts].astype(np.int8)
    if merged.any():
        bytes_by_state = np.stack(
            [np.add.reduceat(np.where(state == s, width, 0.0), starts) for s in range(4)]
        )
        g_cat = np.where(merged, np.argmax(bytes_by_state, axis=0), g_cat).astype(np.int8)
    g_small = small[starts] | merged
    g_x1 = np.where(g_small, np.maximum(g_x1, g_x0 + px), g_x1)
    # Waste tails of the blocks drawn exactly.
    exact = ~g_small
    # (sub-pixel tails are invisible: left out)
    waste = exact & (x1[starts] - req_end[starts] >= px)
    w_idx = starts[waste]
    # Block boundaries: only where blocks are a few pixels wide.
    wide = exact & (width[starts] >= 4 * px) & (g_x0 > 0)
    return LodRects(
        x0=np.concatenate([g_x0, req_end[w_idx]]),
        x1=np.concatenate([g_x1, x1[w_idx]]),
        row=np.concatenate([g_row, row[w_idx]]),
        cat=np.concatenate([g_cat, np.full(len(w_idx), CAT_WASTE, np.int8)]),
        edges_x=g_x0[wide],
        edges_row=g_row[wide],
    )


def empty_lod() -> LodRects:
    """An empty draw list (no layout, nothing to draw)."""
    z = np.zeros(0)
    return LodRects(z, z, z.astype(np.int64), z.astype(np.int8), z, z.astype(np.int64))
