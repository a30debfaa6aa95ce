"""Membership of a column's values in a handful of codes, at memory speed.

``np.isin(column, codes)`` gathers through a lookup table after casting the column to
int64: on an int8 event column of 10M entries that is an 80 MB temporary and ~120 ms,
where one comparison pass per code takes ~1 ms.  :func:`one_of` gives the same mask
for the small sets of codes the model asks about (actions, phases, states, rules,
category and label codes).  :func:`unique_sorted` is ``np.unique`` of a column already in
order, without the sort (and without ``np.unique``'s first call importing ``numpy.ma``,
~15 ms of a window's start).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

# Beyond this many codes one comparison pass per code stops paying: numpy's own isin.
MAX_CODES = 8


def one_of(codes: np.ndarray, wanted: Iterable[int]) -> np.ndarray:
    """``np.isin(codes, wanted)`` (a boolean mask of ``codes``' shape) for an integer
    column and a few integer codes (none wanted: all False)."""
    values = sorted({int(c) for c in wanted})
    codes = np.asarray(codes)
    if len(values) > MAX_CODES or codes.dtype.kind not in "iub":
        return np.isin(codes, values)
    out = np.zeros(codes.shape, bool)
    for value in values:
        out |= codes == value
    return out


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D column already in ascending order."""
    values = np.asarray(values)
    if len(values) < 2:
        return values.copy()
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
