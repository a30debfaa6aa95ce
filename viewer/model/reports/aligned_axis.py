"""The Over-time view's x axis: two recordings' events on one aligned axis.

Aligned span ``i`` (an iteration, or a stretch of relative time, of
:class:`~vramscope.viewer.model.reports.aligned.Alignment`) occupies ``[i, i + 1]`` on
both sides; each side's events inside it are spread linearly over that interval.  What
a side records before its first span (building the model, loading data) is drawn in a
short "before" stretch left of 0, what follows its last span in an "after" stretch
right of the last span, both as wide on either side; a side with fewer spans than the
other leaves the spans it lacks empty.  :class:`SideAxis` maps that side's events to x
and back.  The curves drawn on it are decimated to the plot's pixel columns by
:func:`vramscope.viewer.model.view.curve_lod.decimate` (``minmax``, ``x_range``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The "before" and "after" stretches: as wide (in spans) as their events would take at
#: the pace of a span, within these bounds (a long warm-up does not squeeze the spans).
EDGE_MIN, EDGE_MAX = 0.15, 0.5


@dataclass
class SideAxis:
    """One side's events on the aligned axis: pieces of events ``k0[j]..k1[j] - 1``
    spread over ``x0[j]..x1[j]`` (in order, together every event ``0..n - 1``)."""

    k0: np.ndarray
    k1: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    n: int

    def x_of(self, k) -> np.ndarray:
        """The x of events ``k`` (an int or an array; clamped to the recording)."""
        k = np.clip(np.asarray(k, np.int64), 0, max(self.n - 1, 0))
        j = np.clip(np.searchsorted(self.k0, k, side="right") - 1, 0, len(self.k0) - 1)
        width = (self.k1[j] - self.k0[j]).astype(np.float64)
        return self.x0[j] + (k - self.k0[j]) / width * (self.x1[j] - self.x0[j])

    def event_at(self, x: float) -> int:
        """The event shown at ``x``: the one whose stretch holds ``x``; where this side
        has no events (a span only the other side has), the last event before ``x``."""
        j = int(np.searchsorted(self.x0, x, side="right")) - 1
        if j < 0:
            return 0
        if x >= self.x1[j]:
            return int(self.k1[j] - 1)
        f = (x - self.x0[j]) / (self.x1[j] - self.x0[j])
        k = int(self.k0[j] + np.floor(f * (self.k1[j] - self.k0[j])))
        return int(min(max(k, self.k0[j]), self.k1[j] - 1))


@dataclass
class SpanAxis:
    """Both sides on one axis: spans ``0..n_spans - 1`` at ``[i, i + 1]``, a "before"
    stretch ``[-lead, 0]`` and an "after" one ``[n_spans, n_spans + tail]``."""

    labels: list[str]
    lead: float
    tail: float
    a: SideAxis
    b: SideAxis

    @property
    def n_spans(self) -> int:
        return len(self.labels)

    @property
    def x_range(self) -> tuple[float, float]:
        return -self.lead, self.n_spans + self.tail

    def span_of(self, x: float) -> int:
        """The span at ``x``: -1 before the first, ``n_spans`` after the last."""
        return int(min(max(np.floor(x), -1), self.n_spans))

    def where(self, x: float) -> str:
        """``x`` in words: the span's label, "before iteration 0", "after iteration 7"."""
        i = self.span_of(x)
        if 0 <= i < self.n_spans:
            return self.labels[i]
        if not self.labels:
            return "the whole run"
        return f"before {self.labels[0]}" if i < 0 else f"after {self.labels[-1]}"


def _ranges(spans, side: str) -> list[tuple[int, int, int]]:
    """(span index, first event, last event + 1) of one side's spans, in order."""
    out = []
    for i, s in enumerate(spans):
        f = getattr(s, side)
        if f is not None and f.end >= f.start:
            out.append((i, int(f.start), int(f.end) + 1))
    return out


def _side(ranges, n: int, n_spans: int, lead: float, tail: float) -> SideAxis:
    pieces: list[tuple[int, int, float, float]] = []
    pos = 0
    first = ranges[0][1] if ranges else n
    if first > 0:
        pieces.append((0, first, -lead, 0.0))
        pos = first
    for i, k0, k1 in ranges:
        if k0 > pos:  # events between two spans: a sliver at the boundary
            x = float(i)
            pieces.append((pos, k0, x - 1e-6, x))
        k0 = max(k0, pos)
        if k1 > k0:
            pieces.append((k0, k1, float(i), float(i + 1)))
            pos = k1
    if pos < n:
        pieces.append((pos, n, float(n_spans), n_spans + tail))
    if not pieces:  # no events at all: one empty piece keeps the lookups defined
        pieces.append((0, 1, 0.0, 1.0))
    cols = list(zip(*pieces))
    return SideAxis(
        np.asarray(cols[0], np.int64),
        np.asarray(cols[1], np.int64),
        np.asarray(cols[2], np.float64),
        np.asarray(cols[3], np.float64),
        n,
    )


def _edge(events: list[int], pace: float) -> float:
    """Width of the before / after stretch: the widest side's events at a span's pace."""
    most = max(events)
    if most <= 0:
        return 0.0
    return float(min(max(most / max(pace, 1.0), EDGE_MIN), EDGE_MAX))


def build_axis(alignment, n_a: int, n_b: int) -> SpanAxis:
    """The aligned axis of ``alignment`` for sides of ``n_a`` and ``n_b`` events."""
    spans = alignment.spans
    ra, rb = _ranges(spans, "a"), _ranges(spans, "b")
    sizes = [k1 - k0 for _i, k0, k1 in ra + rb]
    pace = float(np.mean(sizes)) if sizes else 1.0
    lead = _edge([ra[0][1] if ra else 0, rb[0][1] if rb else 0], pace)
    tail = _edge([n_a - ra[-1][2] if ra else 0, n_b - rb[-1][2] if rb else 0], pace)
    labels = [s.label for s in spans]
    return SpanAxis(
        labels,
        lead,
        tail,
        _side(ra, n_a, len(spans), lead, tail),
        _side(rb, n_b, len(spans), lead, tail),
    )
