"""What CUDA graphs hold in their private pools while the allocator counts it free.

A CUDA graph (``torch.compile(mode="reduce-overhead")``'s cudagraph trees,
``torch.cuda.graph``) asks the allocator for memory only while it is captured, in a
private pool; every replay writes the same addresses again without asking.  cudagraph
trees free the captured outputs' blocks once the program drops them and hand later
replays' outputs to the program as tensors over the same addresses, which the allocator
does not own.  So a gradient the backward graph writes on every replay is, after the
capture's iteration, memory the program holds and the allocator (its counters, the
categories of allocated bytes) counts free.

Told from the recording alone:

* a **capture output** is an allocation in a private pool that the program freed (its
  free is not inside a capture: no allocation of that pool follows it in the same
  capture run) - the scratch a graph frees inside its own capture is not one;
* it is **held at an instant** ``k`` when ``k`` lies in an iteration after the pool's last
  allocation (replays only, so a pool the program allocates from every iteration - a
  user's ``MemPool`` - never counts), no later allocation has reused its address by
  ``k``, and ``k``'s phase lies where the captured output was live: from the phase it
  was made in to the phase the program freed it in (both of the same iteration, or
  across into the next), each replay's output being held as the captured one was.
  Instants in the same phase as either end are not counted (which side of the replay
  they fall on is not recorded).

These bytes are reported beside the categories of allocated memory, never added to the
allocator's counters (which they are not part of).
"""

from __future__ import annotations

import numpy as np

from ..replay.timeline import Intervals
from .iterations import Phases
from .reasons import CATEGORY_NAMES


class CaptureOutputs:
    """The capture outputs of one device's breakdown (columns, made once): interval ids,
    the phase and iteration of their allocation and of the program's free, and the
    iteration of their pool's last allocation.  ``intervals``, ``phases`` and
    ``category`` are the breakdown's, ``pools`` the snapshot's pool ids."""

    def __init__(
        self,
        intervals: Intervals,
        n_events: int,
        pools: list[tuple[int, int]],
        phases: Phases,
        category: np.ndarray,
    ) -> None:
        self.intervals, self.n_events, self.phases = intervals, n_events, phases
        self.category = category
        iv, n = intervals, n_events
        private = np.array([p != (0, 0) for p in pools] + [False], bool)
        in_private = private[np.where(iv.pool >= 0, iv.pool, len(pools))] & (iv.start >= 0)
        ids = np.flatnonzero(in_private)
        empty = np.zeros(0, np.int64)
        self.ids, self.alloc_phase, self.free_phase = empty, empty, empty
        self.alloc_iter, self.free_iter, self.pool_last_iter = empty, empty, empty
        self.reused_from = empty
        if not len(ids) or not n:
            return
        # The program, not the capture, freed it: no allocation of the same pool comes
        # between its free and the next allocation of any other pool (the capture run
        # it was made in has ended by then).
        order = np.argsort(iv.start, kind="stable")
        starts = iv.start[order]
        pool_of = iv.pool[order]
        run_break = np.flatnonzero(pool_of[1:] != pool_of[:-1]) + 1
        run_first = np.concatenate(([0], run_break))
        run_last_start = starts[np.concatenate((run_break - 1, [len(starts) - 1]))]
        run_of = (
            np.searchsorted(run_first, np.searchsorted(starts, iv.start[ids], "left"), "right") - 1
        )
        freed = (iv.end[ids] < n) & (iv.end[ids] > run_last_start[run_of])
        ids = ids[freed]
        # Made and freed in iterations, the free in the same one or the next (what a
        # replay's output is held over); others are never counted.
        iteration, phase = phases.iteration, phases.phase
        made_in = np.asarray(iteration[iv.start[ids]], np.int64)
        freed_in = np.asarray(iteration[iv.end[ids]], np.int64)
        ids = ids[(made_in >= 0) & (freed_in >= made_in) & (freed_in <= made_in + 1)]
        if not len(ids):
            return
        last_alloc = {
            int(p): int(iv.start[in_private & (iv.pool == p)].max())
            for p in np.unique(iv.pool[ids])
        }
        self.ids = ids
        self.reused_from = _first_reuse(iv, ids)
        self.alloc_phase = phase[iv.start[ids]].astype(np.int64)
        self.free_phase = phase[iv.end[ids]].astype(np.int64)
        self.alloc_iter = np.asarray(iteration[iv.start[ids]], np.int64)
        self.free_iter = np.asarray(iteration[iv.end[ids]], np.int64)
        self.pool_last_iter = np.asarray(
            iteration[np.array([last_alloc[int(p)] for p in iv.pool[ids]], np.int64)], np.int64
        )

    def held_at(self, k: int) -> np.ndarray:
        """Bytes held by capture outputs after event ``k``, per category (int64,
        CATEGORY_NAMES order)."""
        out = np.zeros(len(CATEGORY_NAMES), np.int64)
        if not len(self.ids) or not 0 <= k < self.n_events:
            return out
        it_k = int(self.phases.iteration[k])
        ph_k = int(self.phases.phase[k])
        if it_k < 0:
            return out
        iv = self.intervals
        a, f = self.alloc_phase, self.free_phase
        window = np.where(
            self.free_iter == self.alloc_iter, (a < ph_k) & (ph_k < f), (ph_k > a) | (ph_k < f)
        )
        ok = (it_k > self.pool_last_iter) & (iv.end[self.ids] <= k) & (self.reused_from > k)
        ids = self.ids[ok & window]
        return np.bincount(
            self.category[ids], weights=iv.requested[ids], minlength=len(CATEGORY_NAMES)
        ).astype(np.int64)


def _first_reuse(iv: Intervals, ids: np.ndarray) -> np.ndarray:
    """Per id of ``ids``: the start event of the first later allocation of the same pool
    that overlaps its bytes (its memory holds something else from then on), or a value
    past every event where none does."""
    out = np.full(len(ids), np.iinfo(np.int64).max, np.int64)
    for p in np.unique(iv.pool[ids]):
        mine = np.flatnonzero(iv.pool[ids] == p)
        pool = np.flatnonzero((iv.pool == p) & (iv.start >= 0))
        order = np.argsort(iv.addr[pool], kind="stable")
        lo = iv.addr[pool][order]
        hi = lo + iv.size[pool][order]
        st = iv.start[pool][order]
        # An allocation overlapping [a, b) starts below b and ends above a.
        for j in mine:
            i = ids[j]
            a, b = int(iv.addr[i]), int(iv.addr[i] + iv.size[i])
            upto = int(np.searchsorted(lo, b, "left"))
            later = st[:upto][(hi[:upto] > a) & (st[:upto] > iv.start[i])]
            if len(later):
                out[j] = int(later.min())
    return out
