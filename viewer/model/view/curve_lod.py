"""Curves drawn at the plot's resolution: the upper envelope of millions of events in a
few thousand points, Qt-free.

A view of ``k0..k1`` that is wider than the plot in pixels draws, per pixel bucket, the
maximum of its events (peaks survive; what lies under the curve stays visible).  The
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
    xs_all, y_all, levels: list[tuple[int, np.ndarray]], k0: int, k1: int, columns: int
) -> tuple[np.ndarray, np.ndarray]:
    """The points of events ``k0..k1`` to draw in ``columns`` pixels: every point when
    they fit (twice over), else one maximum per bucket from the coarsest level with at
    least two blocks a bucket.  ``xs_all[k]`` is event ``k``'s x."""
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


def column_extremes(y: np.ndarray, lo: int, hi: int, columns: int) -> np.ndarray:
    """Which of the events ``lo..hi`` to sample so that a curve drawn in ``columns``
    pixel columns keeps, in each, the event of its maximum and of its minimum of ``y``
    (plus both ends): a min/max decimation, so 643 iterations' peaks show as 643 peaks,
    not as the few humps an even sampling happens to hit.  Every event when they fit."""
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
    for reduce in (np.maximum, np.minimum):
        extreme = reduce.reduceat(seg, starts)
        # the first event of each column that reaches its extreme (O(n), no sort)
        picks.append(np.minimum.reduceat(np.where(seg == extreme[bins], pos, n), starts))
    return lo + np.unique(np.concatenate(picks))
