"""Curves drawn at the plot's resolution: the upper envelope of millions of events in a
few thousand points, Qt-free.

One decimator, :func:`decimate`: a view of ``k0..k1`` that is wider than the plot in
pixels draws, per pixel bucket, the maximum of its events (peaks survive; what lies
under the curve stays visible), or with ``minmax`` its minimum and its maximum (dips
survive too: the category timeline, the Diff window's Over-time chart).  The
maxima come from precomputed levels: a ``CurveColumn``'s own index, or
:func:`envelope_levels` over a plain array at the same block sizes as
:class:`~vramscope.viewer.model.replay.curves.CurveIndex`.
"""

from __future__ import annotations

import numpy as np

from ..replay.curves import BLOCK, COARSE

ENVELOPE_LEVELS = (BLOCK, BLOCK * COARSE)  # events per envelope block


def envelope_levels(y, name: str = "") -> list[tuple[int, np.ndarray]]:
    """``[(L, max of every block of L events)]`` for the levels that have at least two
    blocks; a curve column's index already keeps them."""
    if hasattr(y, "index"):
        return y.index.levels(name)
    levels = []
    for level in ENVELOPE_LEVELS:
        m = (len(y) // level) * level
        if m < 2 * level:
            break
        levels.append((level, np.asarray(y[:m]).reshape(-1, level).max(axis=1)))
    return levels


def decimate(
    x,
    y,
    k0: int,
    k1: int,
    columns: int,
    *,
    levels: list[tuple[int, np.ndarray]] | None = None,
    minmax: bool = False,
    x_range: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The points ``(x, y)`` of the curve ``y`` over events ``k0..k1`` to draw in
    ``columns`` pixels: every event when they fit (twice over), else a few per pixel.
    ``x[k]`` is event ``k``'s x (None: ``k`` itself).

    * By default, the upper envelope: one maximum per bucket of events, at the bucket's
      first x, taken from the coarsest of ``levels`` (:func:`envelope_levels`) with at
      least two blocks a bucket; what lies under the curve stays visible.
    * ``minmax``: per pixel column, the events of its maximum and of its minimum (plus
      both ends), in order: a peak or a dip one event wide survives millions of events
      (643 iterations' peaks show as 643 peaks, not as the few humps an even sampling
      happens to hit).  With ``x=None`` the points' x are the events kept.
    * ``minmax`` with ``x_range=(lo, hi)`` (``x`` ascending): the columns split that x
      range instead of the events (uneven events per column); each column draws its
      minimum then its maximum at its first x, and one event beyond each edge is kept
      so the line runs to the plot's borders.
    """
    if minmax and x_range is not None:
        return _minmax_by_x(np.asarray(x), np.asarray(y), k0, k1, x_range, columns)
    if minmax:
        events = _extreme_events(y, k0, k1, columns)
        return (events if x is None else np.asarray(x)[events]), np.asarray(y)[events]
    xs_all = np.arange(len(y)) if x is None else x
    return _envelope(xs_all, y, levels or [], k0, k1, columns)


def _column_extremes(seg: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(minimum, maximum) of each column of ``seg`` (columns start at ``starts``)."""
    return np.minimum.reduceat(seg, starts), np.maximum.reduceat(seg, starts)


def _envelope(xs_all, y_all, levels, k0: int, k1: int, columns: int):
    n = k1 - k0 + 1
    step = n // columns if n > 2 * columns else 1
    level, maxima = 1, None
    for lv, mx in levels:
        if step >= 2 * lv:
            level, maxima = lv, mx
    if step <= 1:
        return np.asarray(xs_all[k0 : k1 + 1]), np.asarray(y_all[k0 : k1 + 1]).astype(np.float64)
    if maxima is None:
        m = (n // step) * step
        y = np.asarray(y_all[k0 : k1 + 1])
        x_out = np.concatenate([xs_all[k0 : k0 + m : step], xs_all[k0 + m : k1 + 1]])
        y_out = np.concatenate([y[:m].reshape(-1, step).max(axis=1), y[m:]]).astype(np.float64)
        return x_out, y_out
    j0, j1 = k0 // level, min(k1 // level, len(maxima) - 1)
    per = max(1, step // level)
    blocks = maxima[j0 : j1 + 1]
    m = (len(blocks) // per) * per
    parts = [blocks[:m].reshape(-1, per).max(axis=1)] if m else []
    if len(blocks) > m:
        parts.append([blocks[m:].max()])
    tail = np.asarray(y_all[(j1 + 1) * level : k1 + 1])  # past the last whole block
    if len(tail):
        parts.append([tail.max()])
    y_out = np.concatenate(parts).astype(np.float64)
    starts = (j0 + np.arange(len(y_out)) * per) * level
    return xs_all[np.clip(np.maximum(starts, k0), 0, len(y_all) - 1)], y_out


def _extreme_events(y, lo: int, hi: int, columns: int) -> np.ndarray:
    """Events ``lo..hi`` to keep: per column of an even split, the first event reaching its
    maximum and its minimum, and both ends; every event when they fit."""
    lo, hi = max(int(lo), 0), min(int(hi), len(y) - 1)
    n = hi - lo + 1
    if n <= 0:
        return np.zeros(0, np.int64)
    columns = max(int(columns), 1)
    if n <= 2 * columns:
        return np.arange(lo, hi + 1, dtype=np.int64)
    seg = np.asarray(y[lo : hi + 1])
    starts = (np.arange(columns, dtype=np.int64) * n) // columns
    bins = np.repeat(np.arange(columns), np.diff(np.append(starts, n)))
    pos = np.arange(n, dtype=np.int64)
    picks = [np.array([0, n - 1], np.int64)]
    for extreme in reversed(_column_extremes(seg, starts)):
        # the first event of each column that reaches its extreme (O(n), no sort)
        picks.append(np.minimum.reduceat(np.where(seg == extreme[bins], pos, n), starts))
    return lo + np.unique(np.concatenate(picks))


def _minmax_by_x(x: np.ndarray, y: np.ndarray, k0: int, k1: int, x_range, columns: int):
    lo, hi = x_range
    if k1 < k0 or hi <= lo:
        return np.zeros(0), np.zeros(0)
    i0 = max(int(np.searchsorted(x, lo, side="left")) - 1, k0)
    i1 = min(int(np.searchsorted(x, hi, side="right")) + 1, k1 + 1)
    xs, ys = x[i0:i1], y[i0:i1]
    columns = max(int(columns), 1)
    if len(xs) <= 2 * columns:
        return np.asarray(xs, np.float64), np.asarray(ys, np.float64)
    col = np.clip(np.floor((xs - lo) / (hi - lo) * columns), -1, columns).astype(np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(col)) + 1))
    lows, highs = _column_extremes(ys, starts)
    out_x = np.repeat(np.asarray(xs[starts], np.float64), 2)
    out_y = np.empty(2 * len(starts), np.float64)
    out_y[0::2] = lows
    out_y[1::2] = highs
    return out_x, out_y
