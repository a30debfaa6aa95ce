"""Level-of-detail layout of the stacked allocation timeline.

Like memory_viz's "Active Memory Timeline": at every moment the live
allocations are stacked bottom-up in the order they were made, so when one is
freed everything above it moves down.  Drawing every allocation at every event
does not scale to millions, so the layout is computed for what a view can show:
the allocation stack is sampled at ``columns`` event positions across the
visible range (about one per pixel), only the ``max_bands`` largest
allocations alive there are drawn individually, and everything else is one
summarised band at the bottom.  Recomputed whenever the view changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timeline import Intervals


@dataclass
class StackedLayout:
    """Pairs (band, column) with the band's bottom/top at that column."""

    samples: np.ndarray  # int64 event index of each column
    band_interval: np.ndarray  # int64 interval id of each band
    pair_band: np.ndarray  # int64 band id of each pair, pairs sorted by (band, column)
    pair_column: np.ndarray  # int64
    pair_bottom: np.ndarray  # int64 bytes
    pair_top: np.ndarray  # int64 bytes
    summary_height: np.ndarray  # int64 per column: bytes of allocations not drawn individually

    def hit(self, column: int, y: float) -> int:
        """Interval id under (column, y bytes), or -1."""
        m = np.flatnonzero((self.pair_column == column) & (self.pair_bottom <= y)
                           & (self.pair_top > y))
        return int(self.band_interval[self.pair_band[m[0]]]) if len(m) else -1


def stacked_layout(iv: Intervals, k0: int, k1: int, columns: int, max_bands: int = 3000,
                   min_size: int = 0) -> StackedLayout:
    """Layout of the stacked timeline for events ``[k0, k1]`` sampled at ``columns``."""
    columns = max(2, int(columns))
    samples = np.unique(np.linspace(k0, k1, columns).round().astype(np.int64))
    lo = np.searchsorted(samples, iv.start, side="left")  # first column with sample >= start
    hi = np.searchsorted(samples, iv.end, side="left")  # columns with sample < end
    spans = hi - lo
    visible = np.flatnonzero(spans > 0)
    # Bytes of every visible allocation at each column, for the summary band.
    total = _column_sums(lo[visible], hi[visible], iv.size[visible], len(samples))
    chosen = visible[iv.size[visible] >= min_size]
    if len(chosen) > max_bands:
        # The largest allocations (by bytes x visible time) get their own band.
        weight = iv.size[chosen].astype(np.float64) * spans[chosen]
        chosen = np.sort(chosen[np.argpartition(-weight, max_bands)[:max_bands]])
    drawn = _column_sums(lo[chosen], hi[chosen], iv.size[chosen], len(samples))
    summary = total - drawn
    # Pairs (band, column): band b covers columns lo..hi-1.
    counts = spans[chosen]
    pair_band = np.repeat(np.arange(len(chosen), dtype=np.int64), counts)
    first = np.repeat(lo[chosen], counts)
    offsets = np.arange(len(pair_band), dtype=np.int64) - np.repeat(
        np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64), counts)
    pair_column = first + offsets
    size = iv.size[chosen][pair_band]
    # Stack order inside a column: by allocation start (chosen is sorted by start).
    order = np.lexsort((pair_band, pair_column))
    col_sorted = pair_column[order]
    csum = np.cumsum(size[order])
    col_start = np.searchsorted(col_sorted, np.arange(len(samples)), side="left")
    base = np.concatenate([[0], csum])[col_start]  # cumulative bytes before each column
    top_sorted = csum - base[col_sorted] + summary[col_sorted]
    top = np.empty_like(top_sorted)
    top[order] = top_sorted
    return StackedLayout(
        samples=samples, band_interval=chosen.astype(np.int64), pair_band=pair_band,
        pair_column=pair_column, pair_bottom=top - size, pair_top=top, summary_height=summary,
    )


def _column_sums(lo: np.ndarray, hi: np.ndarray, size: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``size`` over intervals covering each column (difference array)."""
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, lo, size)
    np.add.at(diff, hi, -size)
    return np.cumsum(diff[:-1])
