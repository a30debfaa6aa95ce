"""The categories' passes over every event in C (``_native/catcore.c``), when built.

Each function here has a numpy reference in this package that stays the fallback
(``VRAMSCOPE_PURE_PYTHON=1``, or no compiler) and that the tests compare with exactly
(tests/model/test_categories_native.py).  The C passes write only the columns the
classification keeps - no per-event masks, index arrays or casts, each of which is a
fresh 10-80 MB mapping at 10M events - and let go of the GIL.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._native import native_module

_cat: Any = native_module("catcore")  # None: not built, or VRAMSCOPE_PURE_PYTHON


def available() -> bool:
    """Whether the compiled passes are used."""
    return _cat is not None


def _c(a: np.ndarray, dtype) -> np.ndarray:
    return np.ascontiguousarray(a, dtype)


def count_allocs(action: np.ndarray) -> int:
    """Number of ALLOC events (no mask of every event)."""
    return int(_cat.count_action(_c(action, np.int8), 0))


def alloc_lifetimes(
    action, addr, size, stack, start, end, requested, stack_out
) -> tuple[np.ndarray, np.ndarray]:
    """Fill, per allocation event in order, its event (``start``), the free_completed that
    ends it (``end``, n: never), ``requested`` and ``stack_out``; return the orphan
    free_completed events and their addresses (frees of blocks from before recording)."""
    ev, ad = _cat.alloc_lifetimes(
        _c(action, np.int8),
        _c(addr, np.int64),
        _c(size, np.int64),
        _c(stack, np.int32),
        start,
        end,
        requested,
        stack_out,
    )
    return np.frombuffer(ev, np.int64), np.frombuffer(ad, np.int64)


def phases(
    action, stack, stack_code: np.ndarray, forced: list[tuple[int, int, int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """(evidence int8, guessed bool, phase int8) per event: ``event_evidence`` and
    ``fill_phases`` in one pass (``stack_code``: evidence | guessed << 4 per stack, and a
    last 0 for stack -1; ``forced``: (lo, hi, phase) ranges applied in order); and the
    runs of equal phases of that column, as :func:`runs` gives them."""
    n = len(action)
    ev = np.empty(n, np.int8)
    guessed = np.empty(n, bool)
    phase = np.empty(n, np.int8)
    f = np.array(forced, np.int64).reshape(-1)
    at, v = _cat.phases(
        _c(action, np.int8),
        _c(stack, np.int32),
        _c(stack_code, np.int8),
        f,
        ev,
        guessed.view(np.uint8),
        phase,
    )
    return ev, guessed, phase, (np.frombuffer(at, np.int64), np.frombuffer(v, np.int8))


def runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, value) of each run of equal values of an int8 column."""
    at, v = _cat.runs(_c(values, np.int8))
    return np.frombuffer(at, np.int64), np.frombuffer(v, np.int8)


def spans_any(values: np.ndarray, value: int, lo: np.ndarray, end: int) -> np.ndarray:
    """``np.logical_or.reduceat(values[:end] == value, lo)`` without the mask."""
    return np.frombuffer(
        _cat.spans_any(_c(values, np.int8), int(value), _c(lo, np.int64), int(end)), bool
    )


def next_equal(values: np.ndarray, value: int, queries: np.ndarray) -> np.ndarray:
    """Per query q: the first event e >= q with ``values[e] == value`` (``len(values)``
    when none) - ``searchsorted`` over those events' positions, without them."""
    return np.frombuffer(
        _cat.next_equal(_c(values, np.int8), int(value), _c(queries, np.int64)), np.int64
    )


def classify_window(
    start,
    end,
    stack,
    kinds_ext,
    phase,
    evidence,
    guessed,
    run_ends,
    b_starts,
    it_lo,
    it_end,
    reason_ids,
    reason,
    scalars,
) -> bool:
    """classify._window's rules in one pass over the allocations, written into ``reason``
    (int16); False (nothing written) when the allocations are not in event order."""
    return bool(
        _cat.classify_window(
            _c(start, np.int64),
            _c(end, np.int64),
            _c(stack, np.int32),
            _c(kinds_ext, np.int32),
            _c(phase, np.int8),
            _c(evidence, np.int8),
            _c(guessed, bool).view(np.uint8),
            _c(run_ends, np.int64),
            _c(b_starts, np.int64),
            _c(it_lo, np.int64),
            _c(it_end, np.int64),
            _c(reason_ids, np.int16),
            reason,
            tuple(int(x) for x in scalars),
        )
    )


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of int64 values, by hashing (linear)."""
    u, inv = _cat.unique_inverse(_c(values, np.int64))
    return np.frombuffer(u, np.int64), np.frombuffer(inv, np.int64)


def span_peaks(
    action, size, start: int, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(maximum, first event at it) of the requested curve in each span [lo_i, hi_i)."""
    top, peak = _cat.span_peaks(
        _c(action, np.int8), _c(size, np.int64), int(start), _c(lo, np.int64), _c(hi, np.int64)
    )
    return np.frombuffer(top, np.int64).copy(), np.frombuffer(peak, np.int64).copy()
