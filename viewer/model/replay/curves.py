"""The four memory curves of a replay: requested / allocated / active / reserved bytes
after each event, their peaks, and :class:`CurveIndex` (their summary for views).

A timeline view needs, per pan or zoom, either the envelope of millions of
events (the max per pixel) or the exact values of a few thousand.  So a
:class:`CurveIndex` keeps the max of every block of :data:`BLOCK` events and
the values before each block; a stretch of exact values is recomputed from
the nearest block start by the C loop (a few thousand events: microseconds).
At 10M events that is 10 MB instead of 320 MB, built in one pass.

:class:`CurveColumn` makes one curve look like its int64 array (``len``,
slices, ``[k]``, ``max()``), so views index it the same way as the per-pool
and per-stream curves, which stay plain arrays.

Functions take a :class:`~.device.DeviceReplay` (``rep``) but import nothing
from it: the replay imports this module, never the other way round.
"""

from __future__ import annotations

import numpy as np

from ..core.snapshot import Action
from . import native_loop as _nat
from .layout import ALLOCATED, PENDING, initial_segment_of_blocks

CHUNK_EVENTS = 1 << 20  # peaks are computed in chunks of this many events
CURVES = ("requested", "allocated", "active", "reserved")


def curves(rep, stream: int | None = None, pool: int | None = None) -> dict[str, np.ndarray]:
    """requested / allocated / active / reserved bytes after each event,
    optionally only of one stream and/or pool (index into ``Snapshot.pools``).

    The allocator's own accounting: requested and active fall when a free
    completes, allocated already when it is requested; reserved follows
    segment allocs / frees and expandable maps / unmaps.  Starting values come
    from the layout before the first event.
    """
    starts = curve_starts(rep, stream, pool)
    if stream is None and pool is None and rep.native and _nat._core is not None:
        out = {c: np.empty(len(rep), np.int64) for c in CURVES}
        native_curves(rep, starts, out)
        return out
    steps = _curve_steps(rep, slice(0, len(rep)), stream, pool)
    return {
        c: np.cumsum(steps[c], out=steps[c]) + starts[c] if len(steps[c]) else steps[c]
        for c in CURVES
    }


def curve_starts(rep, stream: int | None = None, pool: int | None = None) -> dict[str, int]:
    """The four curves' values before the first event."""
    init = rep.initial
    seg_on = np.ones(len(init.seg_addr), bool)
    if stream is not None:
        seg_on &= init.seg_stream == stream
    if pool is not None:
        seg_on &= init.seg_pool == pool
    on = seg_on[initial_segment_of_blocks(init)] if init.n_blocks else np.zeros(0, bool)
    state = init.blk_state
    live = on & ((state == ALLOCATED) | (state == PENDING))
    return {
        "requested": int(init.blk_requested[live].sum()),
        "allocated": int(init.blk_size[on & (state == ALLOCATED)].sum()),
        "active": int(init.blk_size[live].sum()),
        "reserved": int(init.seg_size[seg_on].sum()),
    }


def _curve_steps(rep, sl: slice, stream: int | None, pool: int | None) -> dict[str, np.ndarray]:
    """Each curve's change at every event of ``sl`` (int64)."""
    act = rep.action[sl]
    size, req = rep.block_size[sl], rep.size[sl]
    events = None
    if stream is not None:
        events = rep.stream[sl] == stream
    if pool is not None:
        events = (rep.pool[sl] == pool) if events is None else events & (rep.pool[sl] == pool)

    def step(up: tuple, down: tuple, values: np.ndarray) -> np.ndarray:
        sign = np.zeros(9, np.int64)
        sign[list(up)], sign[list(down)] = 1, -1
        out = sign[np.minimum(act, 8)] * values  # actions > 8 do not exist (schema)
        if events is not None:
            out[~events] = 0
        return out

    return {
        "requested": step((Action.ALLOC,), (Action.FREE_COMPLETED,), req),
        "allocated": step((Action.ALLOC,), (Action.FREE_REQUESTED,), size),
        "active": step((Action.ALLOC,), (Action.FREE_COMPLETED,), size),
        "reserved": step(
            (Action.SEGMENT_ALLOC, Action.SEGMENT_MAP),
            (Action.SEGMENT_FREE, Action.SEGMENT_UNMAP),
            req,
        ),
    }


def native_curves(rep, starts: dict[str, int], out: dict | None):
    """The four curves in one C pass (into ``out`` when given); their peaks."""
    peaks = _nat._core.curves(
        np.ascontiguousarray(rep.action, np.int8),
        np.ascontiguousarray(rep.block_size, np.int64),
        np.ascontiguousarray(rep.size, np.int64),
        tuple(starts[c] for c in CURVES),
        *((out[c] if out is not None else None) for c in CURVES),
    )
    return {c: (int(v), int(k)) for c, (v, k) in zip(CURVES, peaks)}


def native_requested_chunk(
    action: np.ndarray, block_size: np.ndarray, size: np.ndarray, start: int, out: np.ndarray
) -> None:
    """Requested bytes after each of these events, starting from ``start``, into ``out``
    (the C loop's curve pass over one chunk; only with :func:`native_available`)."""
    _nat._core.curves(action, block_size, size, (start, 0, 0, 0), out, None, None, None)


def requested_curve_of(rep) -> np.ndarray | None:
    """Requested bytes after each event, from the replay alone: the curve already made
    for the views, else only this one of the four curves in a C pass; None when neither
    is at hand (callers then sum the allocations' lifetimes: the same numbers)."""
    have = rep.derived("curves")
    if have is not None:
        return have["requested"]
    n = len(rep)
    if not (rep.uses_native_loop and n):
        return None
    out = np.empty(n, np.int64)
    native_curves(
        rep,
        curve_starts(rep),
        {"requested": out, "allocated": None, "active": None, "reserved": None},
    )
    return out


def _peaks(rep) -> dict[str, tuple[int, int]]:
    """(value, first event reaching it) of each curve, in chunks: no full curve is
    materialised unless one already exists."""
    n = len(rep)
    if not n:
        return {c: (0, -1) for c in CURVES}
    have = rep._derived.get("curves")
    if have is not None:
        return {c: (int(have[c][k]), k) for c in CURVES for k in [int(np.argmax(have[c]))]}
    carry = curve_starts(rep, None, None)
    if rep.native and _nat._core is not None:
        return native_curves(rep, carry, None)
    best: dict[str, tuple[int, int]] = {}
    for start in range(0, n, CHUNK_EVENTS):
        steps = _curve_steps(rep, slice(start, min(n, start + CHUNK_EVENTS)), None, None)
        for c in CURVES:
            values = np.cumsum(steps[c], out=steps[c])
            values += carry[c]
            k = int(np.argmax(values))
            if c not in best or values[k] > best[c][0]:
                best[c] = (int(values[k]), start + k)
            carry[c] = int(values[-1])
    return best


BLOCK = 64  # events per block: the finest envelope level and the recompute stretch
COARSE = 64  # blocks per coarse block (4096 events), the second envelope level


class CurveIndex:
    """Block maxima, block-start values and peaks of the four curves of ``rep``."""

    def __init__(self, rep) -> None:  # a DeviceReplay (not imported: it imports this module)
        self.rep = rep
        self.n = 0
        starts = curve_starts(rep, None, None)
        self.maxima = {c: np.empty(0, np.int64) for c in CURVES}
        self.checkpoints = {c: np.array([starts[c]], np.int64) for c in CURVES}
        self.native = rep.native and _nat._core is not None
        self.peaks = {c: (np.iinfo(np.int64).min if self.native else 0, -1) for c in CURVES}
        self._full = None if self.native else {c: np.zeros(0, np.int64) for c in CURVES}
        self.extend()

    def extend(self) -> None:
        """Take in the events appended to the replay since the last call (a live
        replay grows): the last, partial block and the new ones are summarised;
        everything before stays.  Cost: the new events, plus O(n / 64) copies."""
        rep = self.rep
        n_old, n = self.n, len(rep)
        if n <= n_old and n_old:
            return
        j = n_old // BLOCK  # the first block that is partial or new
        a = j * BLOCK
        nb = -(-(n - a) // BLOCK)
        mx = {c: np.empty(nb, np.int64) for c in CURVES}
        ck = {c: np.empty(nb + 1, np.int64) for c in CURVES}
        starts = {c: int(self.checkpoints[c][j]) for c in CURVES}
        if self.native:
            peaks = _nat._core.curve_blocks(
                np.ascontiguousarray(rep.action[a:n], np.int8),
                np.ascontiguousarray(rep.block_size[a:n], np.int64),
                np.ascontiguousarray(rep.size[a:n], np.int64),
                tuple(starts[c] for c in CURVES),
                BLOCK,
                *(mx[c] for c in CURVES),
                *(ck[c] for c in CURVES),
            )
            tail = {c: (int(v), int(k)) for c, (v, k) in zip(CURVES, peaks)}
        else:  # the Python path: the full curves, summarised the same way
            full = self._full
            assert full is not None
            steps = _curve_steps(rep, slice(n_old, n), None, None)
            tail = {}
            for c in CURVES:
                last = int(full[c][-1]) if n_old else int(self.checkpoints[c][0])
                new = np.cumsum(steps[c], out=steps[c])
                new += last
                y = full[c] = np.concatenate([full[c], new]) if n_old else new
                seg = y[a:n]
                pad = np.full(nb * BLOCK, np.iinfo(np.int64).min, np.int64)
                pad[: len(seg)] = seg
                mx[c][:] = pad.reshape(nb, BLOCK).max(axis=1) if nb else mx[c]
                ck[c][0] = starts[c]
                ck[c][1:] = seg[np.minimum(np.arange(1, nb + 1) * BLOCK, len(seg)) - 1]
                tail[c] = (int(seg.max()), int(np.argmax(seg))) if len(seg) else (0, -1)
        for c in CURVES:
            self.maxima[c] = np.concatenate([self.maxima[c][:j], mx[c]])
            self.checkpoints[c] = np.concatenate([self.checkpoints[c][:j], ck[c]])
            v, k = tail[c]
            if k >= 0 and (self.peaks[c][1] < 0 or v > self.peaks[c][0]):
                self.peaks[c] = (v, a + k)
        self.n = n
        self.coarse = {}
        for c, m in self.maxima.items():
            nc = len(m) // COARSE
            self.coarse[c] = m[: nc * COARSE].reshape(nc, COARSE).max(axis=1) if nc else m[:0]

    def levels(self, curve: str) -> list[tuple[int, np.ndarray]]:
        """(events per block, the max of each whole block): finest first."""
        out = [(BLOCK, self.maxima[curve][: self.n // BLOCK])]
        if len(self.coarse[curve]) >= 2:
            out.append((BLOCK * COARSE, self.coarse[curve]))
        return out

    def values(self, k0: int, k1: int) -> dict[str, np.ndarray]:
        """Exact values of the four curves after events ``k0..k1`` (inclusive)."""
        k0, k1 = max(int(k0), 0), min(int(k1), self.n - 1)
        if k1 < k0:
            return {c: np.zeros(0, np.int64) for c in CURVES}
        if self._full is not None:
            return {c: y[k0 : k1 + 1] for c, y in self._full.items()}
        j = k0 // BLOCK
        a, b = j * BLOCK, k1 + 1
        rep = self.rep
        out = {c: np.empty(b - a, np.int64) for c in CURVES}
        _nat._core.curves(
            np.ascontiguousarray(rep.action[a:b], np.int8),
            np.ascontiguousarray(rep.block_size[a:b], np.int64),
            np.ascontiguousarray(rep.size[a:b], np.int64),
            tuple(int(self.checkpoints[c][j]) for c in CURVES),
            *(out[c] for c in CURVES),
        )
        return {c: v[k0 - a :] for c, v in out.items()}

    def columns(self) -> dict[str, "CurveColumn"]:
        return {c: CurveColumn(self, c) for c in CURVES}


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
