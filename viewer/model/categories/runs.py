"""The runs of equal phases of a phase column (:class:`PhaseRuns`): where each starts and
ends and its phase - a few per iteration, so questions about the phases of spans of
events are answered from them, not from masks of every event."""

from __future__ import annotations

import numpy as np

from . import native_passes as native


class PhaseRuns:
    """The runs of equal phases of a phase column: where each starts and ends and its
    phase.  A few per iteration, so questions about the phases of spans of events (where
    the optimizer steps are, does an iteration hold a backward) are answered from them,
    not from masks and index arrays of every event (fresh memory at 10M events)."""

    def __init__(
        self, phase: np.ndarray, known: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        n = len(phase)
        if known is not None:  # (starts, phases) of the runs, from the pass that wrote them
            start, value = known
        elif native.available():
            start, value = native.runs(phase)
        elif n:
            start = np.concatenate(([0], np.flatnonzero(phase[1:] != phase[:-1]) + 1))
            value = phase[start]
        else:
            start, value = np.zeros(0, np.int64), np.zeros(0, np.int8)
        self.start = start
        self.end = np.append(start[1:], n).astype(np.int64)
        self.value = value

    def of(self, *phases: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends exclusive) of the runs of any of ``phases`` (= ``_runs`` of the
        mask of that phase, for one phase)."""
        keep = np.isin(self.value, phases)
        return self.start[keep], self.end[keep]

    def any_in(self, lo: np.ndarray, hi: np.ndarray, *phases: int) -> np.ndarray:
        """Per span [lo_i, hi_i): does an event of ``phases`` lie in it?"""
        s, e = self.of(*phases)
        i = np.searchsorted(e, lo, "right")  # the first such run ending after lo
        ok = i < len(s)
        out = np.zeros(len(lo), bool)
        out[ok] = s[i[ok]] < hi[ok]
        return out
