"""The stacked allocations as pixels: columns, band rectangles and one image per view
(a path per band would cost the rasteriser far more)."""

from __future__ import annotations

import numpy as np

from ...model.view.stacking import StackedLayout
from .constants import BAND_COLORS


class EventXs:
    """x of every event in event mode (x = k), indexable like an array of n floats
    without holding one (10M events would be 80 MB, rebuilt per document)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key):
        if isinstance(key, slice):
            return np.arange(*key.indices(self.n), dtype=np.float64)
        a = np.asarray(key)
        if a.ndim == 0:
            k = int(a) + (self.n if int(a) < 0 else 0)
            if not 0 <= k < self.n:
                raise IndexError(int(a))
            return np.float64(k)
        a = a.astype(np.int64)
        return np.where(a < 0, a + self.n, a).astype(np.float64)


def band_color_index(keys: np.ndarray) -> np.ndarray:
    """A stable colour per code site (frame id; -1: no stack)."""
    k = keys.astype(np.int64)
    h = (k * 2654435761 + 97) % 4294967296
    return np.where(k < 0, len(BAND_COLORS) - 1, (h >> 7) % len(BAND_COLORS)).astype(np.int64)


# --------------------------------------------------------------------------- geometry


def column_edges(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left/right edges of each column centred on ``xs`` (midpoints between samples)."""
    n = len(xs)
    if n == 0:
        z = np.zeros(0)
        return z, z
    if n == 1:
        return xs - 0.5, xs + 0.5
    mid = (xs[1:] + xs[:-1]) / 2
    left = np.concatenate([[xs[0] - (mid[0] - xs[0])], mid])
    right = np.concatenate([mid, [xs[-1] + (xs[-1] - mid[-1])]])
    return left, right


def band_rects(lay: StackedLayout, xl: np.ndarray, xr: np.ndarray):
    """Every band as rectangles: one per run of columns where it keeps its place.

    Returns ``(x0, x1, y0, y1, band)``.  Rectangles rather than one polygon per
    band: a band whose base jumps from column to column (things below it come
    and go) would make a zigzag polygon whose long edges cost the rasteriser
    dearly; a rect per run keeps the work proportional to the painted area.
    """
    pb, pc = lay.pair_band, lay.pair_column
    top, bot = lay.pair_top, lay.pair_bottom
    n = len(pb)
    if n == 0:
        z = np.zeros(0)
        return z, z, z, z, np.zeros(0, np.int64)
    new = np.ones(n, bool)
    new[1:] = (
        (pb[1:] != pb[:-1])
        | (top[1:] != top[:-1])
        | (bot[1:] != bot[:-1])
        | (pc[1:] != pc[:-1] + 1)
    )
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n) - 1
    return (
        xl[pc[starts]],
        xr[pc[ends]],
        bot[starts].astype(np.float64),
        top[starts].astype(np.float64),
        pb[starts],
    )


def stacked_raster(
    lay: StackedLayout,
    band_argb: np.ndarray,
    summary_argb: int,
    y0: float,
    y1: float,
    height: int,
    col_of_px: np.ndarray,
) -> np.ndarray:
    """The stacked layout as pixels: (height, len(col_of_px)) uint32 ARGB, row 0 at ``y0``.

    Every column of the layout is a partition of [0, top] into the summary band
    and the bands stacked on it, so each pixel column is a run-length sequence:
    one ``np.repeat`` paints them all, whatever the number of bands (10M events
    cost the same as 10k).  ``col_of_px``: the layout column each pixel column shows.
    """
    ncol = len(lay.samples)
    scale = height / max(y1 - y0, 1e-9)

    def px(values: np.ndarray) -> np.ndarray:
        return np.clip(np.rint((values - y0) * scale), 0, height).astype(np.int64)

    order = lay.pair_order  # pairs by (column, stacking order)
    pc = lay.pair_column[order]
    counts = np.bincount(pc, minlength=ncol)[:ncol]
    before = np.cumsum(counts) - counts  # pairs in the columns before each column
    c2 = 2 * np.arange(ncol)
    # Per column: the summary band, its bands bottom-up, the empty rest (placed, not sorted).
    sum_pos, end_pos = before + c2, before + counts + c2 + 1
    pair_pos = np.arange(len(order)) + 2 * pc + 1
    bound = np.empty(len(order) + 2 * ncol, np.int64)
    color = np.empty(len(bound), np.uint32)
    bound[sum_pos], color[sum_pos] = px(lay.summary_height.astype(np.float64)), summary_argb
    bound[pair_pos] = px(lay.pair_top[order].astype(np.float64))
    color[pair_pos] = band_argb[lay.pair_band[order]]
    bound[end_pos], color[end_pos] = height, 0
    cols = np.repeat(np.arange(ncol), counts + 2)
    # Rounding never runs a column backwards (offsets keep the columns apart).
    offset = cols * (height + 1)
    bound = np.maximum.accumulate(bound + offset) - offset
    prev = np.concatenate([[0], bound[:-1]])
    prev[np.flatnonzero(np.diff(cols, prepend=-1))] = 0  # each column starts at row 0
    per_col = np.repeat(color, bound - prev).reshape(ncol, height)
    return np.ascontiguousarray(per_col[col_of_px].T)


# --------------------------------------------------------------------------- items
