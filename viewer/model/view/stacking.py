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

from ..core.members import unique_sorted
from ..replay.timeline import Intervals


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
    pair_order: np.ndarray  # int64: pairs by (column, band) - bottom-up in each column

    def hit(self, column: int, y: float) -> int:
        """Interval id under (column, y bytes), or -1."""
        m = np.flatnonzero(
            (self.pair_column == column) & (self.pair_bottom <= y) & (self.pair_top > y)
        )
        return int(self.band_interval[self.pair_band[m[0]]]) if len(m) else -1


SHORT_EVENTS = 1024  # intervals living at most this many events are "short" (see _visible)


@dataclass
class _Index:
    """Intervals split by lifetime, built once per :class:`Intervals` (see :func:`_visible`)."""

    short_ids: np.ndarray  # int64 ids of short intervals, by start
    short_start: np.ndarray  # int64 their starts
    long_ids: np.ndarray  # int64 ids of the others (before recording, or long-lived)
    long_start: np.ndarray
    long_end: np.ndarray


def _index(iv: Intervals) -> _Index:
    return iv.derived("stacking_index", _make_index)


def _make_index(iv: Intervals) -> _Index:
    short = (iv.start >= 0) & (iv.end - iv.start <= SHORT_EVENTS)
    s_ids = np.flatnonzero(short)
    l_ids = np.flatnonzero(~short)
    return _Index(s_ids, iv.start[s_ids], l_ids, iv.start[l_ids], iv.end[l_ids])


def _visible(iv: Intervals, samples: np.ndarray):
    """(ids, lo, hi) of the intervals live at one sample at least: columns lo..hi-1.

    Not a pass over every interval per view: a short interval (at most
    ``SHORT_EVENTS`` long) is live at sample s only if it starts in
    (s - SHORT_EVENTS, s], a contiguous run of the intervals (they are ordered by
    start); when the samples are further apart than that, it holds at most one
    sample, so its columns are known without a search.  The few long ones are
    searched as before.  Ids come unordered.
    """
    idx = _index(iv)
    # Long-lived: searched directly.
    lo = np.searchsorted(samples, idx.long_start, side="left")
    hi = np.searchsorted(samples, idx.long_end, side="left")
    keep = hi > lo
    parts = [(idx.long_ids[keep], lo[keep], hi[keep])]
    gap = int(np.diff(samples).min()) if len(samples) > 1 else SHORT_EVENTS + 1
    if gap > SHORT_EVENTS:
        a = np.searchsorted(idx.short_start, samples - SHORT_EVENTS, side="right")
        b = np.searchsorted(idx.short_start, samples, side="right")
        counts = b - a
        total = int(counts.sum())
        col = np.repeat(np.arange(len(samples), dtype=np.int64), counts)
        pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts - a, counts)
        ids = idx.short_ids[pos]
        live = iv.end[ids] > samples[col]
        parts.append((ids[live], col[live], col[live] + 1))
    else:
        a = np.searchsorted(idx.short_start, samples[0] - SHORT_EVENTS, side="right")
        b = np.searchsorted(idx.short_start, samples[-1], side="right")
        ids = idx.short_ids[a:b]
        lo = np.searchsorted(samples, iv.start[ids], side="left")
        hi = np.searchsorted(samples, iv.end[ids], side="left")
        keep = hi > lo
        parts.append((ids[keep], lo[keep], hi[keep]))
    return tuple(np.concatenate(c) for c in zip(*parts))


def stacked_layout(
    iv: Intervals, k0: int, k1: int, columns: int, max_bands: int = 3000, min_size: int = 0
) -> StackedLayout:
    """Layout of the stacked timeline for events ``[k0, k1]`` sampled at ``columns``."""
    columns = max(2, int(columns))
    samples = unique_sorted(np.linspace(k0, k1, columns).round().astype(np.int64))
    visible, vlo, vhi = _visible(iv, samples)
    # Bytes of every visible allocation at each column, for the summary band.
    vsize = iv.size[visible]
    total = _column_sums(vlo, vhi, vsize, len(samples))
    pick = np.flatnonzero(vsize >= min_size)
    if len(pick) > max_bands:
        # The largest allocations (by bytes x visible time) get their own band.
        weight = vsize[pick].astype(np.float64) * (vhi - vlo)[pick]
        pick = pick[np.argpartition(-weight, max_bands)[:max_bands]]
    pick = pick[np.argsort(visible[pick], kind="stable")]  # by start: the stacking order
    chosen = visible[pick]
    lo_c, hi_c = vlo[pick], vhi[pick]
    drawn = _column_sums(lo_c, hi_c, iv.size[chosen], len(samples))
    summary = total - drawn
    # Pairs (band, column): band b covers columns lo..hi-1.
    counts = hi_c - lo_c
    pair_band = np.repeat(np.arange(len(chosen), dtype=np.int64), counts)
    first = np.repeat(lo_c, counts)
    offsets = np.arange(len(pair_band), dtype=np.int64) - np.repeat(
        np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64), counts
    )
    pair_column = first + offsets
    size = iv.size[chosen][pair_band]
    # Stack order inside a column: by allocation start (chosen is sorted by start).
    # (pairs are band-major, bands by start: a stable sort by column keeps that order;
    # a 16-bit key sorts by radix, linear time)
    key = pair_column.astype(np.int16 if len(samples) < 2**15 else np.int32)
    order = np.argsort(key, kind="stable")
    col_sorted = pair_column[order]
    csum = np.cumsum(size[order])
    col_start = np.searchsorted(col_sorted, np.arange(len(samples)), side="left")
    base = np.concatenate([[0], csum])[col_start]  # cumulative bytes before each column
    top_sorted = csum - base[col_sorted] + summary[col_sorted]
    top = np.empty_like(top_sorted)
    top[order] = top_sorted
    return StackedLayout(
        samples=samples,
        band_interval=chosen.astype(np.int64),
        pair_band=pair_band,
        pair_column=pair_column,
        pair_bottom=top - size,
        pair_top=top,
        summary_height=summary,
        pair_order=order,
    )


def _column_sums(lo: np.ndarray, hi: np.ndarray, size: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``size`` over intervals covering each column (difference array)."""
    w = size.astype(np.float64)  # bincount sums in float64: exact below 2**53 bytes
    diff = np.bincount(lo, w, minlength=n + 1) - np.bincount(hi, w, minlength=n + 1)
    return np.cumsum(diff[:-1]).round().astype(np.int64)
