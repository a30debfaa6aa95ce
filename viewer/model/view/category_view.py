"""What the window shows of the memory categories, Qt-free: the breakdown of
the trace's device, whether the views colour by category or by code site, which
categories the views keep (a filter), and the iteration / phase spans the timeline
shades.  Views subscribe to ``events`` and only draw.

Events (:class:`~vramscope.viewer.model.view.evented.EmitterGroup`): ``breakdown`` (bd or
None), ``color_mode`` (str), ``category_filter`` (frozenset or None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..categories.iterations import PH_BACKWARD, PH_FORWARD, PH_OPTIMIZER, PHASE_NAMES, IterationOf
from ..categories.reasons import CATEGORY_NAMES
from ..core.members import one_of
from .evented import EmitterGroup

if TYPE_CHECKING:
    from ..categories.breakdown import MemoryBreakdown

COLOR_SITE = "site"  # the present colouring: one colour per code site (top frame)
COLOR_CATEGORY = "category"
PHASES_SHOWN = (PH_FORWARD, PH_BACKWARD, PH_OPTIMIZER)


@dataclass(frozen=True)
class PhaseSpan:
    """Events ``start..end`` (inclusive) of one phase of one iteration."""

    iteration: int
    phase: str  # "forward" | "backward" | "optimizer"
    start: int
    end: int


def phase_spans(bd: MemoryBreakdown | None) -> list[PhaseSpan]:
    """Per iteration, each of its forward / backward / optimizer phases as one span (from
    the first to the last event of that phase inside the iteration): iterations x phases
    spans on a training run, fewer on evaluation (no backward).  From the runs of equal
    phases cut at the iterations' bounds (a few per iteration): no column of every event
    (at 10M events the per-event version made ~400 MB of temporaries, a second of page
    faults; :func:`phase_spans_of_columns` is that reference, tests compare the two)."""
    if bd is None or not bd.n_events:
        return []
    it_of = bd.phases.iteration
    if not isinstance(it_of, IterationOf):
        return phase_spans_of_columns(bd)
    lo, end = it_of.lo.astype(np.int64), int(it_of.end)
    if not len(lo):
        return []
    runs = bd.phases.phase_runs()
    keep = np.isin(runs.value, PHASES_SHOWN)
    s = np.maximum(runs.start[keep], lo[0])  # events outside every iteration: none
    e = np.minimum(runs.end[keep], end)
    p = runs.value[keep].astype(np.int64)
    ok = e > s
    s, e, p = s[ok], e[ok], p[ok]
    if not len(s):
        return []
    # Each run cut at the iterations' bounds: one piece per iteration it touches.
    i0 = np.searchsorted(lo, s, "right") - 1
    i1 = np.searchsorted(lo, e - 1, "right") - 1
    count = i1 - i0 + 1
    run = np.repeat(np.arange(len(s)), count)
    it = i0[run] + np.arange(len(run)) - np.repeat(np.cumsum(count) - count, count)
    hi = np.append(lo[1:], end)
    ps = np.maximum(s[run], lo[it])
    pe = np.minimum(e[run], hi[it])
    key = it * 8 + p[run]
    order = np.argsort(key, kind="stable")  # pieces are in event order: kept per key
    k = key[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    last = np.r_[first[1:] - 1, len(k) - 1]
    first_ev, last_ev = ps[order][first], pe[order][last] - 1
    return [
        PhaseSpan(int(key_ // 8), PHASE_NAMES[int(key_ % 8)], int(a), int(b))
        for key_, a, b in zip(k[first].tolist(), first_ev.tolist(), last_ev.tolist())
    ]


def phase_spans_of_columns(bd: MemoryBreakdown | None) -> list[PhaseSpan]:
    """:func:`phase_spans` from the per-event phase and iteration columns (the reference)."""
    if bd is None or not bd.n_events:
        return []
    it = bd.phases.iteration.astype(np.int64)
    ph = bd.phases.phase.astype(np.int64)
    keep = (it >= 0) & one_of(ph, PHASES_SHOWN)
    ev = np.flatnonzero(keep)
    if not len(ev):
        return []
    key = it[ev] * 8 + ph[ev]
    # Runs of one (iteration, phase) in event order, then the runs (a few per iteration)
    # grouped by key: no sort of the millions of events (that took seconds on 10M).
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:] - 1, len(key) - 1]
    rk = key[starts]
    order = np.argsort(rk, kind="stable")
    k = rk[order]
    first_ev, last_ev = ev[starts[order]], ev[ends[order]]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    last = np.r_[first[1:] - 1, len(k) - 1]
    # A group's runs are in event order (stable sort): its first run's start and its
    # last run's end.
    return [
        PhaseSpan(int(k[a] // 8), PHASE_NAMES[int(k[a] % 8)], int(first_ev[a]), int(last_ev[b]))
        for a, b in zip(first.tolist(), last.tolist())
    ]


class CategoryView:
    """The category state of one window (see the module docstring)."""

    def __init__(self) -> None:
        self.events = EmitterGroup("breakdown", "color_mode", "category_filter")
        self.bd: MemoryBreakdown | None = None
        self.color_mode = COLOR_SITE
        self.category_filter: frozenset[int] | None = None  # category indices kept
        self.spans: list[PhaseSpan] = []

    def set_breakdown(self, bd: MemoryBreakdown | None, spans=None) -> None:
        """Show ``bd``; ``spans``: its :func:`phase_spans` where already built (off the
        GUI thread), else they are built here."""
        self.bd = bd
        self.spans = list(spans) if spans is not None and bd is not None else phase_spans(bd)
        self.events.breakdown.emit(bd)

    @property
    def by_category(self) -> bool:
        """Do the views colour by category now (chosen, and a breakdown to colour by)?"""
        return self.color_mode == COLOR_CATEGORY and self.bd is not None

    def set_color_mode(self, mode: str) -> None:
        if mode not in (COLOR_SITE, COLOR_CATEGORY):
            raise ValueError(f"colour mode {mode!r}: 'site' or 'category'")
        if mode != self.color_mode:
            self.color_mode = mode
            self.events.color_mode.emit(mode)

    def set_category_filter(self, categories) -> None:
        """Keep only ``categories`` (names or indices; None or all of them: no filter)."""
        if categories is not None:
            idx = frozenset(
                CATEGORY_NAMES.index(c) if isinstance(c, str) else int(c) for c in categories
            )
            categories = None if len(idx) == len(CATEGORY_NAMES) else idx
        if categories != self.category_filter:
            self.category_filter = categories
            self.events.category_filter.emit(categories)

    # ------------------------------------------------------------------ columns for views
    def interval_categories(self) -> np.ndarray | None:
        """int8 category per allocation of the trace's device (timeline interval ids)."""
        return self.bd.category if self.bd is not None else None

    def block_categories(self, k: int, addresses: np.ndarray) -> np.ndarray:
        """Category (-1: none) of the allocation at each block address after event ``k``."""
        if self.bd is None or k < 0:
            return np.full(len(addresses), -1, np.int8)
        return self.bd.categories_of_addresses(min(int(k), self.bd.n_events - 1), addresses)

    def keep_blocks(self, k: int, addresses: np.ndarray) -> np.ndarray | None:
        """Which blocks the category filter keeps (None: no filter, all)."""
        f = self.category_filter
        if f is None or self.bd is None:
            return None
        cats = self.block_categories(k, addresses)
        return np.isin(cats, np.fromiter(f, np.int64, len(f)))

    def leak_stack_mask(self, leak_index: int, n_stacks: int) -> np.ndarray | None:
        """Per stack: the stacks of what leak ``leak_index`` keeps (to highlight)."""
        bd = self.bd
        if bd is None or not 0 <= leak_index < len(bd.leaks):
            return None
        ids = np.asarray(bd.leaks[leak_index].allocations, np.int64)
        mask = np.zeros(n_stacks, bool)
        st = bd.intervals.stack[ids]
        mask[st[st >= 0]] = True
        return mask

    def category_stack_mask(self, category: int, n_stacks: int) -> np.ndarray:
        """Per stack: the stacks of the allocations of one category (to highlight)."""
        mask = np.zeros(n_stacks, bool)
        bd = self.bd
        if bd is not None:
            st = bd.intervals.stack[bd.category == category]
            mask[st[st >= 0]] = True
        return mask
