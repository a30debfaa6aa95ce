"""Batch-size what-if: the recorded run re-simulated with the batch scaled.

:func:`scaled_case` multiplies the requested size of every allocation
:mod:`.scaling` judged to grow with the batch, keeps the rest, and returns
a what-if :class:`~..whatif.Case` over that request stream; the allocator
model (:mod:`..whatif`) then answers it under any setting and memory limit,
so rounding, segment sizes, caching and fragmentation are part of the
prediction.  :func:`largest_fitting_scale` bisects over such simulations for
the largest batch that runs without an out-of-memory error; :func:`predict` makes
one batch's prediction, :func:`estimate_range` simulates its range and
:func:`safe_answer` steps down to the largest batch that fits with room to spare.

What is simulated comes from two modules without simulations of their own:
:mod:`.batch_ranges` (the sizes the doubtful allocations could take, and the range
they give) and :mod:`.batch_judge` (exact or estimate, the error a prediction is held
to, whether it fits, in words).  Their public names are this module's too: callers
ask ``batch_scale`` for any batch answer.

Blocks alive before the recording began (a wrapped trace) keep their size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

import numpy as np

from ..core import parallel
from ..core.progress import Progress
from ..whatif import Case, native_sim
from ..whatif import requests as rq
from ..whatif.run import SimResult
from ..whatif.run import simulate as simulate_requests
from .batch_judge import (
    EXACT_ERROR,
    PLACEMENT_GAIN,
    POINT_ERROR,
    BatchPrediction,
    FitSearch,
    SafeAnswer,
    is_estimate,
    near_limit_words,
)
from .batch_ranges import (
    RANGE_WHAT,
    PeakEstimate,
    doubt_draws,
    exact_scale,
    range_words,
    workspace_bounds,
    workspace_sizes,
)
from .scaling import Judgement

__all__ = [
    "EXACT_ERROR",
    "MAX_SCALE",
    "POINT_ERROR",
    "RANGE_WHAT",
    "BatchPrediction",
    "FitSearch",
    "PeakEstimate",
    "SafeAnswer",
    "ScaledCase",
    "anything_scales",
    "estimate_range",
    "fits",
    "is_estimate",
    "largest_fitting_scale",
    "near_limit_words",
    "predict",
    "predict_beside",
    "range_words",
    "safe_answer",
    "scaled_case",
    "workspace_bounds",
    "workspace_sizes",
]

MAX_SCALE = 64.0  # the upward search stops here (a batch 64x the recorded one)
T = TypeVar("T")


class ScaledCase(Case):
    """A :class:`~..whatif.Case` whose requests were batch-scaled: ``base``'s requests
    with the requested sizes ``sizes``, at ``scale`` as ``judgement`` judged them.

    Its :attr:`recorded_peak` (the baseline of ``peak_reserved_vs_recorded``)
    stays the recording's own."""

    def __init__(
        self, base: Case, sizes: np.ndarray, scale: Fraction, judgement: Judgement
    ) -> None:
        requests = dataclasses.replace(base.requests, size=sizes.astype(np.int64))
        super().__init__(
            base.snap,
            base.device,
            requests,
            base.recorded,
            base.limit,
            base.limit_source,
            base.bounds,
            base.gpu_bytes,
        )
        self.window = base.window
        self.base, self.scale, self.judgement = base, scale, judgement

    @property
    def recorded_peak(self) -> int:
        return self.base.recorded_peak


def scaled_case(
    case: Case, judgement: Judgement, scale: float | Fraction, uncertain_factor: Fraction | int = 1
) -> ScaledCase:
    """``case`` with the batch multiplied by ``scale`` (0.5 = half); the allocations whose
    scaling is uncertain (:attr:`~.scaling.Judgement.uncertain`) additionally by
    ``uncertain_factor``."""
    f = exact_scale(scale)
    if f <= 0:
        raise ValueError(f"the batch scale must be positive, not {scale}")
    return ScaledCase(case, judgement.scaled_sizes(f, uncertain_factor), f, judgement)


def estimate_range(
    case: Case,
    judgement: Judgement,
    scale,
    conf=None,
    limit=None,
    samples: int | None = None,
    seed: int = 0,
) -> PeakEstimate | None:
    """Peak reserved over the sizes the :attr:`~.scaling.Judgement.doubtful` allocations
    could take at ``scale`` (:func:`.batch_ranges.doubt_draws`: their bounds and
    ``samples`` seeded draws within them), each draw simulated under ``conf`` and
    ``limit``, taken to at least the model's measured error around the point prediction
    (:data:`POINT_ERROR`, which the judge holds an estimate to: the range says the same);
    None when the recording has none."""
    return _estimate_beside(case, judgement, scale, conf, limit, samples, seed)[0]


def _estimate_beside(
    case: Case,
    judgement: Judgement,
    scale,
    conf=None,
    limit=None,
    samples: int | None = None,
    seed: int = 0,
    here: Callable[[], T] | None = None,
) -> tuple[PeakEstimate | None, T | None]:
    """:func:`estimate_range`'s answer, and ``here()``'s (None without it), which this
    process runs while the draws' runs go on threads beside it, where the compiled model
    runs them (without the GIL)."""
    draws = doubt_draws(judgement, scale, samples, seed)
    if draws is None:
        return None, here() if here is not None else None
    f = draws.scale

    def peak(i: int) -> tuple[int, bool]:
        r = ScaledCase(case, draws.sizes(i), f, judgement).simulate(conf, limit)
        return r.peak_reserved_until_oom, r.first_oom is not None

    # The draws are made in order (the seeded generator); their runs are independent:
    # side by side on every core (threads of this process for the compiled model, which
    # needs no fork and no copy; else a pool), serially for a small case.
    native = native_sim.use_native()
    work = parallel.simulation_work(len(case.requests), native)
    mine: T | None = None
    if here is not None and native:
        with parallel.pmap_async(peak, range(len(draws)), work=work, threads=True) as beside:
            mine = here()
            got = beside.result()
    else:
        if here is not None:
            mine = here()
        got = parallel.pmap(peak, range(len(draws)), work=work, threads=native)
    return draws.estimate(got, POINT_ERROR, PLACEMENT_GAIN), mine


def fits(result: SimResult) -> bool:
    """The run goes through without an out-of-memory error."""
    return result.first_oom is None


def largest_fitting_scale(
    case: Case,
    judgement: Judgement,
    limit: int | None = None,
    conf=None,
    recorded_batch: int | None = None,
    precision: float = 0.01,
    progress: Progress | None = None,
) -> FitSearch:
    """Bisect over simulated runs for the largest scale that fits ``limit``.

    Peak memory grows with the batch, so "fits" is monotone in the scale;
    with ``recorded_batch`` the search is over whole batch sizes (exact),
    else to ``precision`` of the scale.  ``limit`` None: the case's own."""
    lim = case.limit if limit is None else limit
    tried: list[tuple[Fraction, bool, int]] = []
    progress = progress or Progress()

    def run(f: Fraction) -> bool:
        progress.update("search", min(len(tried) / 16, 0.99))
        r = scaled_case(case, judgement, f).simulate(conf, lim)
        ok = fits(r)
        tried.append((f, ok, r.peak_reserved_until_oom))
        return ok

    if recorded_batch:
        b = int(recorded_batch)
        step = lambda lo, hi: (lo + hi) // 2  # noqa: E731
        to_f = lambda k: Fraction(k, b)  # noqa: E731
        lo_v, hi_v = 0, None  # lo fits (0 = nothing known to fit), hi does not
        k = b
        if run(to_f(k)):
            lo_v = k
            while hi_v is None:
                k *= 2
                if k > MAX_SCALE * b:
                    break
                if run(to_f(k)):
                    lo_v = k
                else:
                    hi_v = k
        else:
            hi_v = k
        capped = hi_v is None
        hi_v = hi_v if hi_v is not None else lo_v
        while hi_v - lo_v > 1 and not capped:
            mid = step(lo_v, hi_v)
            if run(to_f(mid)):
                lo_v = mid
            else:
                hi_v = mid
        progress.update("search", 1.0)
        if lo_v == 0:
            return FitSearch(lim, None, None, None, tried)
        peak = next(p for f, ok, p in tried if f == to_f(lo_v) and ok)
        return FitSearch(lim, to_f(lo_v), lo_v, peak, tried, capped)
    # Scale only: bisection on a continuous scale, to `precision`.
    lo, hi = Fraction(0), None
    f = Fraction(1)
    if run(f):
        lo = f
        while hi is None and f * 2 <= MAX_SCALE:
            f *= 2
            if run(f):
                lo = f
            else:
                hi = f
    else:
        hi = f
        f = Fraction(1, 2)
        while f >= Fraction(1, 1024):
            if run(f):
                lo = f
                break
            hi = f
            f /= 2
    capped = hi is None
    while hi is not None and lo > 0 and (hi - lo) / hi > precision:
        mid = ((lo + hi) / 2).limit_denominator(1 << 16)
        if run(mid):
            lo = mid
        else:
            hi = mid
    progress.update("search", 1.0)
    if lo == 0:
        return FitSearch(lim, None, None, None, tried)
    peak = next(p for s, ok, p in tried if s == lo and ok)
    return FitSearch(lim, lo, None, peak, tried, capped)


def predict(
    case: Case,
    judgement: Judgement,
    scale,
    limit: int | None = None,
    conf=None,
    recorded_batch: int | None = None,
    result: SimResult | None = None,
) -> BatchPrediction:
    """The run at ``scale`` under ``limit`` (``result``: its simulation, when made), with
    the workspace draws under the same limit where :func:`is_estimate` says they matter."""
    f = exact_scale(scale)
    sc = scaled_case(case, judgement, f)
    given = result

    def point() -> tuple[SimResult, int]:
        r = given if given is not None else sc.simulate(conf, limit)
        if r.first_oom is not None and limit is not None:
            return r, simulate_requests(sc.requests, r.config, None, case.gpu_bytes).peak_reserved
        return r, r.peak_reserved_until_oom

    est: PeakEstimate | None = None
    if is_estimate(judgement, f):
        # The point's run(s) here while the draws run beside them.
        est, mine = _estimate_beside(case, judgement, f, conf, limit, here=point)
        assert mine is not None
        result, peak = mine
    else:
        result, peak = point()
    b = f * recorded_batch if recorded_batch else None
    batch = int(b) if b is not None and b.denominator == 1 else None
    return BatchPrediction(f, batch, result, peak, limit, est, is_estimate(judgement, f))


def anything_scales(case: Case, judgement: Judgement) -> bool:
    """Some allocation of ``case``'s stream grows with the batch (else a smaller batch
    changes nothing)."""
    return bool((judgement.scales & (case.requests.kind == rq.ALLOC)).any())


def predict_beside(
    case: Case,
    judgement: Judgement,
    scale,
    limit: int | None = None,
    recorded_batch: int | None = None,
) -> parallel.Pending:
    """:func:`predict` started on a thread of this process, for a caller with other work
    to do before it needs the answer (``.result()[0]``; ``.close()`` where it never
    will).  The compiled model simulates without the GIL, so the prediction's runs
    overlap that work; without it (or where a thread does not pay) the prediction is
    made when asked for, as :func:`predict` would.  Nothing may fork until it was
    taken (:func:`..core.parallel.pmap_async`'s ``threads``)."""
    native = native_sim.use_native()
    return parallel.pmap_async(
        lambda f: predict(case, judgement, f, limit, None, recorded_batch),
        [exact_scale(scale)],
        work=parallel.simulation_work(len(case.requests), native),
        jobs=None if native else 1,
        threads=True,
    )


def safe_answer(
    case: Case,
    judgement: Judgement,
    search: FitSearch,
    conf=None,
    recorded_batch: int | None = None,
    precision: float = 0.01,
    progress: Progress | None = None,
) -> SafeAnswer | None:
    """Step down from the search's point answer while its uncertainty reaches the limit
    (:attr:`BatchPrediction.may_not_fit`): bisection over whole batches with the recorded
    batch known, else over the scale to ``precision``.  None without a limit."""
    lim = search.limit
    if lim is None:
        return None
    progress = progress or Progress()
    by_batch = bool(recorded_batch) and search.batch is not None
    b = int(recorded_batch) if recorded_batch else 0
    seen: dict[Fraction, BatchPrediction] = {}

    def at(f: Fraction) -> BatchPrediction:
        if f not in seen:
            progress.update("margin", min(len(seen) / 8, 0.99))
            seen[f] = predict(case, judgement, f, lim, conf, b or None)
        return seen[f]

    point = search.scale
    if point is None:
        return SafeAnswer(lim, search, None, None)
    first = at(point)
    safe: BatchPrediction | None = first if not first.may_not_fit else None
    if safe is None:
        if by_batch:
            k = int(search.batch or 0)
            lo, hi = 0, k  # lo: safe (0: none known), hi: not safe
            if k - 1 >= 1 and not at(Fraction(k - 1, b)).may_not_fit:
                lo = k - 1
            else:
                hi = k - 1
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if at(Fraction(mid, b)).may_not_fit:
                        hi = mid
                    else:
                        lo = mid
            safe = at(Fraction(lo, b)) if lo > 0 else None
        else:
            lo_f, hi_f = Fraction(0), point
            while lo_f == 0 or (hi_f - lo_f) / hi_f > precision:
                half = ((lo_f + hi_f) / 2).limit_denominator(1 << 16)
                if at(half).may_not_fit:
                    hi_f = half
                else:
                    lo_f = half
                if hi_f < Fraction(1, 1024):
                    break
            safe = at(lo_f) if lo_f > 0 else None
    # The batch after the answer: the point answer itself when the margin stepped down,
    # else the smallest that did not fit in the search (none when it stopped at its cap).
    nxt: BatchPrediction | None = None
    if safe is not None and by_batch:
        k = int(safe.batch or 0) + 1
        if not (search.capped and safe.scale == point):
            nxt = at(Fraction(k, b))
    elif safe is not None:
        if safe.scale != point:
            nxt = first
        else:
            over = [f for f, ok, _ in search.tried if not ok and f > point]
            nxt = at(min(over)) if over else None
    elif search.batch is not None and by_batch:
        nxt = at(Fraction(1, b))
    progress.update("margin", 1.0)
    return SafeAnswer(lim, search, safe, nxt)
