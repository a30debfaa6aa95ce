"""A replay that grows: new trace events are applied to the kept allocator state.

A live session (Tracy's worker model) receives the trace in increments.  A
:class:`~.device.DeviceReplay` built with ``live=True`` keeps its replay state
after the last event (the C state, or the Python reference's ``_State``), so
:func:`extend_device` replays only the new events.  The event columns grow in
place (capacity doubling: appending k events copies k values, amortised), and
what views derived from them is extended rather than recomputed:

* keyframes: appended as the new events pass keyframe positions;
* the curve summary (:class:`~.curves.CurveIndex`): the last partial block and
  the new blocks (:meth:`~.curves.CurveIndex.extend`);
* lifetimes (``alloc_of`` / ``freed_at`` / ``free_requested_at``): the new
  events are paired by the C scan, seeded with the allocations still open.

Full curves and peaks computed before are dropped (recomputed on use).  The
timeline level (intervals, dropped rows, compaction) is
:meth:`vramscope.viewer.model.replay.timeline.Timeline.extend`.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..core.snapshot import Action, Trace
from .device import CHUNK_EVENTS, NATIVE_KEYFRAME_BUDGET_BLOCKS, DeviceReplay, link_lifetimes
from .native_loop import _core, _known_arrays, _layout_from_columns, _run_native
from .state import Known, _apply

EVENT_COLUMNS = ("action", "addr", "size", "stream", "stack", "time_us")


def is_live(rep: DeviceReplay) -> bool:
    """Whether ``rep`` kept its replay state (built with ``live=True``)."""
    return "state" in rep._derived


def _grow(bufs: dict, key: str, col: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``col`` with ``values`` appended, as a view of a buffer with spare capacity
    (reallocated only when full, growing by half: appending k values copies O(k),
    amortised; a live ring, compacted at 1.25x its size, never outgrows 1.5x)."""
    n, m = len(col), len(values)
    buf = bufs.get(key)
    # The column must still be the head of its buffer (a trim slices the front off).
    if buf is None or not (
        n + m <= len(buf)
        and id(col.base) == id(buf)
        and col.__array_interface__["data"][0] == buf.__array_interface__["data"][0]
    ):
        buf = np.empty(max((n + m) * 3 // 2, 1024), col.dtype)
        buf[:n] = col
        buf[n + m :] = 0  # touch the spare pages now, not one page fault at a time later
        bufs[key] = buf
    buf[n : n + m] = values
    return buf[: n + m]


def _append(rep: DeviceReplay, name: str, values: np.ndarray) -> None:
    """Append ``values`` to the event column ``name`` of ``rep``."""
    bufs = rep._derived.setdefault("buffers", {})
    setattr(rep, name, _grow(bufs, name, getattr(rep, name), values))


def adopt(rep: DeviceReplay) -> None:
    """Give the event columns of a live replay (and its lifetimes and intervals, once
    computed) spare capacity now, so the first update copies no more than the later
    ones (a copy of the whole ring belongs to the build, not to an update)."""
    bufs = rep._derived.setdefault("buffers", {})
    for c in EVENT_COLUMNS + ("rows", "block_size", "pool"):
        setattr(rep, c, _grow(bufs, c, getattr(rep, c), getattr(rep, c)[:0]))
    lt = rep._derived.get("lifetimes")
    if lt is not None:
        for name in list(lt):
            if name != "open":
                lt[name] = _grow(bufs, "lt:" + name, lt[name], lt[name][:0])
    iv = rep._derived.get("intervals")
    if iv is not None:
        ivb = rep._derived.setdefault("iv_buffers", {})
        for f in iv.__dataclass_fields__:
            col = getattr(iv, f)
            setattr(iv, f, _grow(ivb, f, col, col[:0]))


def extend_device(
    rep: DeviceReplay, trace: Trace, rows: np.ndarray, known: Known | None = None
) -> int:
    """Append the events at ``rows`` of ``trace`` (this device's, in order) to ``rep``
    and replay them from the kept state; returns the number of events added.

    ``known``: the facts of the segments now (:func:`.seed.known_facts` of the live
    snapshot), so segments the new events create get their pool and size class."""
    m = len(rows)
    if not is_live(rep):
        raise ValueError("this replay keeps no state: build it with live=True")
    if known is not None:
        rep.known = rep.known.merged(known)
        arrays = _known_arrays(rep.known)
        if "known" in rep._derived:
            rep._derived["known"] = arrays
        if rep.native:
            _core.set_known(rep._derived["state"], *arrays)
        else:
            rep._derived["state"].known = rep.known
    if not m:
        return 0
    k0 = len(rep)
    for c in EVENT_COLUMNS:
        _append(rep, c, getattr(trace, c)[rows])
    _append(rep, "rows", np.asarray(rows).astype(rep.rows.dtype, copy=False))
    _append(rep, "block_size", np.zeros(m, np.int64))
    _append(rep, "pool", np.full(m, -1, np.int32))
    n = k0 + m
    every = rep.keyframe_every
    state = rep._derived["state"]
    if rep.native:
        start = k0
        while start < n:
            stop = min(n, start + CHUNK_EVENTS)
            kfs, _ = _run_native(state, rep, start, stop, every, None, rep.block_size, rep.pool)
            rep.keyframes.extend(_layout_from_columns(c) for c in kfs)
            start = stop
        rep.inconsistencies = _core.inconsistencies(state) + rep.seed_inconsistencies
        rep._derived["last"] = (n - 1, _layout_from_columns(_core.layout(state)))
    else:
        cuts = sorted({k0, n} | set(range((k0 // every + 1) * every, n + 1, every)))
        for a, b in itertools.pairwise(cuts):
            _apply(state, rep, a, b, rep.block_size, rep.pool)
            if b % every == 0:
                rep.keyframes.append(state.layout())
        rep.inconsistencies = state.inconsistencies + rep.seed_inconsistencies
        rep._derived["last"] = (n - 1, state.layout())
    # Layouts that grow far beyond the first one: keep every other keyframe.
    while (
        sum(kf.n_blocks for kf in rep.keyframes) > 2 * NATIVE_KEYFRAME_BUDGET_BLOCKS
        and len(rep.keyframes) > 1
    ):
        rep.keyframes = rep.keyframes[1::2]
        rep.keyframe_every *= 2
    for stale in ("curves", "peaks"):
        rep._derived.pop(stale, None)
    if "lifetimes" in rep._derived:
        _extend_lifetimes(rep, k0)
    index = rep._derived.get("curve_index")
    if index is not None:
        index.extend()
    return m


def _extend_lifetimes(rep: DeviceReplay, k0: int) -> None:
    """Pair the events from ``k0`` on with their allocations, in place.

    The allocations still open at ``k0`` (not yet free_completed) are put in
    front of the new events as allocations, so the scan pairs a new free with
    an allocation from before; "never" (the old length) becomes the new one."""
    lt = rep._derived["lifetimes"]
    n = len(rep)
    freed_at = lt["freed_at"]
    dt = freed_at.dtype
    if n >= np.iinfo(dt).max:  # past int32: pair everything again (int64)
        rep._derived["lifetimes"] = link_lifetimes(rep.action, rep.addr, rep.native)
        return
    open_idx = lt.get("open")
    if open_idx is None:
        allocs = np.flatnonzero(rep.action[:k0] == Action.ALLOC)
        open_idx = allocs[freed_at[allocs] == k0]
    p = len(open_idx)
    act = np.concatenate([np.zeros(p, np.int8), rep.action[k0:n]])
    addr = np.concatenate([rep.addr[open_idx], rep.addr[k0:n]])
    new = link_lifetimes(act, addr, rep.native)
    q = len(act)

    def to_global(x: np.ndarray) -> np.ndarray:
        """Indices into the combined scan -> indices of the replay (-1 and q kept apart)."""
        out = np.where(x < p, open_idx[np.minimum(x, max(p - 1, 0))] if p else x, x - p + k0)
        return out

    a_new = new["alloc_of"][p:]
    f_open, r_open = new["freed_at"][:p], new["free_requested_at"][:p]
    f_new, r_new = new["freed_at"][p:], new["free_requested_at"][p:]
    bufs = rep._derived.setdefault("buffers", {})
    for name, tail in (
        ("alloc_of", np.where(a_new >= 0, to_global(a_new), -1)),
        ("freed_at", np.where(f_new < q, f_new - p + k0, n)),
        ("free_requested_at", np.where(r_new < q, r_new - p + k0, n)),
    ):
        lt[name] = _grow(bufs, "lt:" + name, lt[name][:k0], tail.astype(dt))
    # The open allocations: closed now where the scan found their free.
    lt["freed_at"][open_idx] = np.where(f_open < q, f_open - p + k0, n)
    before = lt["free_requested_at"][open_idx]
    lt["free_requested_at"][open_idx] = np.where(
        before < k0, before, np.where(r_open < q, r_open - p + k0, n)
    )
    allocs_new = np.flatnonzero(rep.action[k0:n] == Action.ALLOC) + k0
    still = np.concatenate([open_idx[f_open >= q], allocs_new[lt["freed_at"][allocs_new] == n]])
    lt["open"] = still
