"""The four memory curves of a replay, without holding four arrays of n values.

A timeline view needs, per pan or zoom, either the envelope of millions of
events (the max per pixel) or the exact values of a few thousand.  So a
:class:`CurveIndex` keeps the max of every block of :data:`BLOCK` events and
the values before each block; a stretch of exact values is recomputed from
the nearest block start by the C loop (a few thousand events: microseconds).
At 10M events that is 10 MB instead of 320 MB, built in one pass.

:class:`CurveColumn` makes one curve look like its int64 array (``len``,
slices, ``[k]``, ``max()``), so views index it the same way as the per-pool
and per-stream curves, which stay plain arrays.
"""

from __future__ import annotations

import numpy as np

from . import replay as rp

BLOCK = 64  # events per block: the finest envelope level and the recompute stretch
COARSE = 64  # blocks per coarse block (4096 events), the second envelope level


class CurveIndex:
    """Block maxima, block-start values and peaks of the four curves of ``rep``."""

    def __init__(self, rep: rp.DeviceReplay) -> None:
        self.rep = rep
        self.n = n = len(rep)
        nb = -(-n // BLOCK)
        starts = rp._curve_starts(rep, None, None)
        self.maxima = {c: np.empty(nb, np.int64) for c in rp.CURVES}
        self.checkpoints = {c: np.empty(nb + 1, np.int64) for c in rp.CURVES}
        self.native = rep.native and rp._core is not None
        if self.native:
            peaks = rp._core.curve_blocks(
                np.ascontiguousarray(rep.action, np.int8),
                np.ascontiguousarray(rep.block_size, np.int64),
                np.ascontiguousarray(rep.size, np.int64), tuple(starts[c] for c in rp.CURVES),
                BLOCK, *(self.maxima[c] for c in rp.CURVES),
                *(self.checkpoints[c] for c in rp.CURVES))
            self.peaks = {c: (int(v), int(k)) for c, (v, k) in zip(rp.CURVES, peaks)}
            self._full = None
        else:  # the Python path: the full curves, summarised the same way
            self._full = rep._curves() if n else {c: np.zeros(0, np.int64) for c in rp.CURVES}
            for c, y in self._full.items():
                if n:
                    pad = np.full(nb * BLOCK, np.iinfo(np.int64).min, np.int64)
                    pad[:n] = y
                    self.maxima[c][:] = pad.reshape(nb, BLOCK).max(axis=1)
                    self.checkpoints[c][0] = starts[c]
                    self.checkpoints[c][1:] = y[np.minimum(np.arange(1, nb + 1) * BLOCK, n) - 1]
                else:
                    self.checkpoints[c][:] = starts[c]
            self.peaks = {c: (int(y.max()), int(np.argmax(y))) if n else (0, -1)
                          for c, y in self._full.items()}
        self.coarse = {}
        for c, m in self.maxima.items():
            nc = len(m) // COARSE
            self.coarse[c] = m[:nc * COARSE].reshape(nc, COARSE).max(axis=1) if nc else m[:0]

    def levels(self, curve: str) -> list[tuple[int, np.ndarray]]:
        """(events per block, the max of each whole block): finest first."""
        out = [(BLOCK, self.maxima[curve][:self.n // BLOCK])]
        if len(self.coarse[curve]) >= 2:
            out.append((BLOCK * COARSE, self.coarse[curve]))
        return out

    def values(self, k0: int, k1: int) -> dict[str, np.ndarray]:
        """Exact values of the four curves after events ``k0..k1`` (inclusive)."""
        k0, k1 = max(int(k0), 0), min(int(k1), self.n - 1)
        if k1 < k0:
            return {c: np.zeros(0, np.int64) for c in rp.CURVES}
        if self._full is not None:
            return {c: y[k0:k1 + 1] for c, y in self._full.items()}
        j = k0 // BLOCK
        a, b = j * BLOCK, k1 + 1
        rep = self.rep
        out = {c: np.empty(b - a, np.int64) for c in rp.CURVES}
        rp._core.curves(
            np.ascontiguousarray(rep.action[a:b], np.int8),
            np.ascontiguousarray(rep.block_size[a:b], np.int64),
            np.ascontiguousarray(rep.size[a:b], np.int64),
            tuple(int(self.checkpoints[c][j]) for c in rp.CURVES), *(out[c] for c in rp.CURVES))
        return {c: v[k0 - a:] for c, v in out.items()}

    def columns(self) -> dict[str, "CurveColumn"]:
        return {c: CurveColumn(self, c) for c in rp.CURVES}


class CurveColumn:
    """One curve of a :class:`CurveIndex`, indexable like its int64 array."""

    def __init__(self, index: CurveIndex, name: str) -> None:
        self.index, self.name = index, name

    def __len__(self) -> int:
        return self.index.n

    def __getitem__(self, key):
        n = self.index.n
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if stop <= start:
                return np.zeros(0, np.int64)
            return self.index.values(start, stop - 1)[self.name][::step]
        a = np.asarray(key)
        if a.ndim == 0:
            k = int(a) + (n if int(a) < 0 else 0)
            if not 0 <= k < n:
                raise IndexError(int(a))
            return self.index.values(k, k)[self.name][0]
        a = np.where(a < 0, a + n, a).astype(np.int64)
        if not len(a):
            return np.zeros(0, np.int64)
        # Fancy indices: one exact stretch per block touched.
        out = np.empty(len(a), np.int64)
        blocks = a // BLOCK
        for b in np.unique(blocks).tolist():
            m = blocks == b
            lo = b * BLOCK
            vals = self.index.values(lo, min(lo + BLOCK, n) - 1)[self.name]
            out[m] = vals[a[m] - lo]
        return out

    def max(self) -> int:
        return self.index.peaks[self.name][0]

    def peak(self) -> tuple[int, int]:
        """(value, first event reaching it)."""
        return self.index.peaks[self.name]

    def __array__(self, dtype=None, copy=None):
        full = self.index.values(0, self.index.n - 1)[self.name]
        return full.astype(dtype) if dtype is not None else full
