"""The allocations' lifetimes the categories need, without the columns they do not.

:func:`timeline.intervals` materialises nine columns per allocation; the
classification reads four of them in bulk (start, end, requested bytes, stack).
At 10M events (3.3M allocations) the other five are ~90 MB of fresh memory - on
a cold open, page faults that cost more than the arithmetic.  :func:`lean_intervals`
returns the same :class:`~..replay.timeline.Intervals` with ``size``, ``addr``,
``stream`` and ``pool`` made on first access (same values, same dtypes: the
tests compare every column with :func:`timeline.intervals`).  With the compiled
passes (``_native/catcore.c``) the eager columns come from one pass over the events,
each written once into its final array, without the replay's lifetimes of every event
(three int32 columns of n) - the numpy path below stays the reference.
"""

from __future__ import annotations

import numpy as np

from ..core.snapshot import Action
from ..replay import ALLOCATED, BEFORE_RECORDING, PENDING, DeviceReplay, initial_segment_of_blocks
from ..replay.incremental import is_live
from ..replay.timeline import Intervals, gather_column, intervals
from . import native_passes as native

_LAZY = ("size", "addr", "stream", "pool")


class LeanIntervals(Intervals):
    """:class:`Intervals` whose columns ``size``/``addr``/``stream``/``pool`` are gathered
    from the replay's event columns when first read."""

    def __init__(
        self, rep: DeviceReplay, alloc: np.ndarray, live0: np.ndarray, **eager: np.ndarray
    ) -> None:
        for name, col in eager.items():
            object.__setattr__(self, name, col)
        self._lazy = (rep, alloc, live0)

    def __getattr__(self, name: str) -> np.ndarray:
        # Only reached for attributes not set yet: the lazy columns.
        if name not in _LAZY or "_lazy" not in self.__dict__:
            raise AttributeError(name)
        rep, alloc, live0 = self._lazy
        init = rep.initial
        if name in ("stream", "pool"):
            pre_seg = initial_segment_of_blocks(init)[live0]
            pre = (init.seg_stream if name == "stream" else init.seg_pool)[pre_seg]
        else:
            pre = (init.blk_size if name == "size" else init.blk_addr)[live0]
        src = {"size": rep.block_size, "addr": rep.addr, "stream": rep.stream, "pool": rep.pool}[
            name
        ]
        col = gather_column(pre, src, alloc, np.int32 if name == "pool" else np.int64)
        object.__setattr__(self, name, col)
        return col


def column_at(iv: Intervals, name: str, ids: np.ndarray) -> np.ndarray:
    """``getattr(iv, name)[ids]`` without making a lazy column of every allocation for a
    few of them (the addresses of a handful of candidates)."""
    if not isinstance(iv, LeanIntervals) or name not in ("size", "addr") or name in iv.__dict__:
        return getattr(iv, name)[ids]
    rep, alloc, live0 = iv._lazy
    ids = np.asarray(ids, np.int64)
    p = len(live0)
    pre = ids < p
    init = rep.initial
    out = np.empty(len(ids), np.int64)
    out[pre] = (init.blk_size if name == "size" else init.blk_addr)[live0[ids[pre]]]
    src = rep.block_size if name == "size" else rep.addr
    out[~pre] = src[alloc[ids[~pre] - p]]
    return out


def lean_intervals(rep: DeviceReplay) -> Intervals:
    """The device's allocation lifetimes (= ``timeline.intervals(rep)``), with the columns
    the classification does not read in bulk made lazily.  A live replay, or one whose
    intervals are kept already, gets those (extended in place by live updates)."""
    have = rep.derived("intervals")
    if have is not None or is_live(rep):
        return intervals(rep)
    n = len(rep)
    init = rep.initial
    live0 = np.flatnonzero((init.blk_state == ALLOCATED) | (init.blk_state == PENDING))
    if native.available() and rep.derived("lifetimes") is None:
        return _lean_native(rep, live0)
    # As timeline._intervals: in-window allocations, plus blocks live at the start (their
    # end is their first free_completed by address).
    alloc = np.flatnonzero(rep.action == Action.ALLOC)
    pre_end = np.full(len(live0), n, dtype=np.int64)
    if len(live0):
        orphan = np.flatnonzero(
            (rep.action == Action.FREE_COMPLETED) & (rep.alloc_of == BEFORE_RECORDING)
        )
        if len(orphan):
            where = {a: i for i, a in enumerate(init.blk_addr[live0].tolist())}
            for k, a in zip(orphan.tolist(), rep.addr[orphan].tolist()):
                i = where.pop(a, None)
                if i is not None:
                    pre_end[i] = k
    p = len(live0)
    start = np.empty(p + len(alloc), np.int64)
    start[:p] = -1
    start[p:] = alloc
    return LeanIntervals(
        rep,
        alloc,
        live0,
        start=start,
        event=start,
        end=gather_column(pre_end, rep.freed_at, alloc, np.int64),
        requested=gather_column(init.blk_requested[live0], rep.size, alloc, np.int64),
        stack=gather_column(init.blk_stack[live0], rep.stack, alloc, np.int32),
    )


def _lean_native(rep: DeviceReplay, live0: np.ndarray) -> Intervals:
    """:func:`lean_intervals` from one C pass over the events (catcore.alloc_lifetimes):
    each column written once into its final array, no lifetimes of every event (three
    int32 columns of n), no mask or index array of every event."""
    n = len(rep)
    init = rep.initial
    m = native.count_allocs(rep.action)
    p = len(live0)
    start = np.empty(p + m, np.int64)
    end = np.empty(p + m, np.int64)
    requested = np.empty(p + m, np.int64)
    stack = np.empty(p + m, np.int32)
    orphan_at, orphan_addr = native.alloc_lifetimes(
        rep.action, rep.addr, rep.size, rep.stack, start[p:], end[p:], requested[p:], stack[p:]
    )
    start[:p] = -1
    end[:p] = n
    requested[:p] = init.blk_requested[live0]
    stack[:p] = init.blk_stack[live0]
    if p and len(orphan_at):
        # A block from before recording ends at the first orphan free at its address.
        where = {a: i for i, a in enumerate(init.blk_addr[live0].tolist())}
        for k, a in zip(orphan_at.tolist(), orphan_addr.tolist()):
            i = where.pop(a, None)
            if i is not None:
                end[i] = k
    # The allocation events themselves: start[p:] (the lazy columns gather through them).
    return LeanIntervals(
        rep, start[p:], live0, start=start, event=start, end=end, requested=requested, stack=stack
    )
