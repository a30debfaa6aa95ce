"""Batch-size what-if: the recorded run re-simulated with the batch scaled.

:func:`scaled_case` multiplies the requested size of every allocation
:mod:`.scaling` judged to grow with the batch, keeps the rest, and returns
a what-if :class:`~..whatif.Case` over that request stream; the allocator
model (:mod:`..whatif`) then answers it under any setting and memory limit,
so rounding, segment sizes, caching and fragmentation are part of the
prediction.  :func:`largest_fitting_scale` bisects over such simulations for
the largest batch that runs without an out-of-memory error.

Blocks alive before the recording began (a wrapped trace) keep their size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import cast

import numpy as np

from ..core import parallel
from ..core.progress import Progress
from ..whatif import Case
from ..whatif import native_sim
from ..whatif.run import SimResult
from .scaling import Judgement

MAX_SCALE = 64.0  # the upward search stops here (a batch 64x the recorded one)


class ScaledCase(Case):
    """A :class:`~..whatif.Case` whose requests were batch-scaled.

    Its :attr:`recorded_peak` (the baseline of ``peak_reserved_vs_recorded``)
    stays the recording's own."""

    base: Case
    scale: Fraction
    judgement: Judgement

    @property
    def recorded_peak(self) -> int:
        return self.base.recorded_peak


def scaled_case(case: Case, judgement: Judgement, scale: float | Fraction,
                uncertain_factor: Fraction | int = 1) -> ScaledCase:
    """``case`` with the batch multiplied by ``scale`` (0.5 = half); the allocations whose
    scaling is uncertain (:attr:`~.scaling.Judgement.uncertain`) additionally by
    ``uncertain_factor``."""
    f = Fraction(scale).limit_denominator(1 << 20) if not isinstance(scale, Fraction) else scale
    if f <= 0:
        raise ValueError(f"the batch scale must be positive, not {scale}")
    sizes = judgement.scaled_sizes(f, uncertain_factor)
    out = cast(ScaledCase, case.with_requests(
        dataclasses.replace(case.requests, size=sizes.astype(np.int64))))
    out.__class__ = ScaledCase
    out.base, out.scale, out.judgement = case, f, judgement
    return out


ESTIMATE_SAMPLES = 32  # simulated draws of the workspace sizes for the estimate's range
# ... and on long streams (a replay of a million events takes seconds) fewer.
ESTIMATE_SAMPLES_LONG, LONG_STREAM = 8, 200_000
# A workspace that copies a convolution's two operands asks for up to this many times
# their bytes: measured 1.007-1.026 on MobileNetV3 and EfficientNet-B0 backward-filter
# (H100, cuDNN 9.19), the rest alignment and a per-call constant.
COPY_SLACK = Fraction(21, 20)
# What the range of a batch prediction spans, in words (CLI and GUI say it the same way).
RANGE_WHAT = ("the library may pick another algorithm at another batch (cuDNN does, per "
              "convolution), so each workspace may be like the recorded one (half to twice "
              "its estimated size), a copy of its operands, or none")
#: What the uncertain allocations are, in words that fit any model (a transformer's odd-sized
#: scratch is judged so too: see :attr:`.scaling.Judgement.workspace`).
WORKSPACE_WHAT = "library workspaces (not per-sample: made and freed inside one operation)"


def workspace_bounds(judgement: Judgement, scale) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest requested size of every
    :attr:`~.scaling.Judgement.uncertain_workspace` allocation at ``scale`` (arrays over
    those allocations, in request order): :func:`workspace_sizes`' ``low`` and the larger
    of its ``band_high`` and ``copy``."""
    lo, band_hi, copy = workspace_sizes(judgement, scale)
    return lo, np.maximum(band_hi, copy)


def workspace_sizes(judgement: Judgement, scale
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, band_high, copy) per :attr:`~.scaling.Judgement.uncertain_workspace`
    allocation at ``scale``.

    ``low`` .. ``band_high``: an algorithm like the recorded one, half to twice the
    estimated size (a fixed weight part plus a per-sample part, :mod:`.workspaces`;
    proportional where no fixed part was found), widened to take in the recorded size.
    cuDNN picks its algorithm per shape: measured on ResNet-18, a forward workspace of
    ``W + 1 x output`` at batch 16 and 32 is ``W + 2 x output`` at 48 and 64 (twice the
    estimate from 32, half of it from 64), and a backward-filter workspace keeps 8
    partial weight gradients at batch 16 but 15 at 32; every workspace of the ResNet-18
    sweeps lies in this band at every other batch (tests/model/test_remedies_workspaces.py).
    ``copy``: an algorithm that copies the workspace's operands at ``scale``
    (:data:`COPY_SLACK` x their bytes; 0 where they are not known).  MobileNetV3's
    backward-filter workspaces copy both operands up to batch 56 and are under 0.5 MiB
    from 64 (:mod:`.workspaces`): from 64, half the batch asks for hundreds of times the
    estimate, which only the copy takes in."""
    f = Fraction(scale).limit_denominator(1 << 20) if not isinstance(scale, Fraction) else scale
    w = judgement.uncertain_workspace
    est = judgement.scaled_sizes(f)[w]
    rec = judgement.size[w]
    lo = np.maximum(np.minimum(est // 2, rec), 1)
    hi = np.maximum(est * 2, rec)
    copy = np.zeros_like(hi)
    if judgement.operands is not None:
        ops = judgement.operands[w]
        copy = -((-ops * COPY_SLACK.numerator * f.numerator)
                 // (COPY_SLACK.denominator * f.denominator))
    return lo, hi, copy


@dataclass
class PeakEstimate:
    """The range of peak reserved bytes over workspace sizes drawn within their bounds:
    an estimate (the library's choice at another batch is not in the recording), unlike
    the rest of the prediction, which follows from per-sample sizes."""

    low: int
    high: int
    workspaces: int  # allocations whose size is estimated
    workspace_bytes: int  # their requested bytes at the estimated size
    samples: int

    def to_dict(self) -> dict:
        return {"estimate": True, "low_bytes": self.low, "high_bytes": self.high,
                "workspace_allocations": self.workspaces,
                "workspace_bytes_estimated": self.workspace_bytes,
                "samples": self.samples,
                "what": WORKSPACE_WHAT + " estimated as a fixed weight part plus a per-sample "
                        "part; " + RANGE_WHAT}

    @property
    def is_range(self) -> bool:
        """Whether the workspace sizes tried move the peak at all (a range of zero width
        is one value: the workspaces are too small or too short-lived to matter)."""
        return self.low != self.high


def estimate_range(case: Case, judgement: Judgement, scale, conf=None, limit=None,
                   samples: int | None = None, seed: int = 0) -> PeakEstimate | None:
    """Peak reserved over the workspace sizes cuDNN could ask for at ``scale``; None when
    the recording has no workspace whose size is uncertain.

    Per workspace, three kinds of algorithm (:func:`workspace_sizes`): one like the
    recorded (half .. twice the estimate), one that copies its operands, and one with no
    workspace (cuDNN always has such an algorithm; MobileNetV3 at batch 64 used them
    where batch 32 took 124 MiB).  Peak reserved is not monotone in a workspace's size (a
    large one leaves a large cached segment that later activations share), so the range
    is not taken from the bounds alone: the estimated point; all at the band's low, all at
    its high, all copies, all without a workspace; ``samples`` draws within the band and
    half as many with each layer shape's algorithm drawn too; one choice per recorded
    size (the same layer shape makes the same choice in every iteration), seeded so the
    answer repeats.  ``samples`` None: :data:`ESTIMATE_SAMPLES`, or
    :data:`ESTIMATE_SAMPLES_LONG` past :data:`LONG_STREAM` requests."""
    w = judgement.uncertain_workspace
    if not w.any():
        return None
    if samples is None:
        samples = ESTIMATE_SAMPLES if len(w) <= LONG_STREAM else ESTIMATE_SAMPLES_LONG
    f = Fraction(scale).limit_denominator(1 << 20) if not isinstance(scale, Fraction) else scale
    base = judgement.scaled_sizes(f)
    lo, hi, copy = workspace_sizes(judgement, f)
    copied = np.maximum(copy, lo)
    none = np.ones_like(lo)
    _, group = np.unique(judgement.size[w], return_inverse=True)
    groups = int(group.max()) + 1
    rng = np.random.default_rng(seed)
    draws = [base[w], lo, hi, none]
    if (copy > hi).any():
        draws.append(np.maximum(copy, hi))  # every workspace at its bounds' top
    llo, lhi = np.log(lo), np.log(hi)

    def band():
        u = rng.random(groups)[group]
        return np.clip(np.exp(llo + u * (lhi - llo)).astype(np.int64), lo, hi)

    for _ in range(samples):
        draws.append(band())
    for _ in range(samples // 2):
        sizes = band()
        kind = rng.integers(0, 3, groups)[group]  # 0 like recorded, 1 copy, 2 none
        sizes[kind == 1] = copied[kind == 1]
        sizes[kind == 2] = 1
        draws.append(sizes)

    def peak(sizes: np.ndarray) -> int:
        s = base.copy()
        s[w] = sizes
        return _with_sizes(case, judgement, f, s).simulate(conf, limit).peak_reserved_until_oom

    # The draws are made above, in order (the seeded generator); their runs are
    # independent: side by side on every core, serially for a small case.
    peaks = parallel.pmap(peak, draws, work=parallel.simulation_work(len(case.requests),
                                                                     native_sim.use_native()))
    return PeakEstimate(min(peaks), max(peaks), int(w.sum()), int(base[w].sum()), samples)


def _with_sizes(case: Case, judgement: Judgement, f: Fraction, sizes: np.ndarray) -> ScaledCase:
    out = cast(ScaledCase, case.with_requests(
        dataclasses.replace(case.requests, size=sizes.astype(np.int64))))
    out.__class__ = ScaledCase
    out.base, out.scale, out.judgement = case, f, judgement
    return out


def fits(result: SimResult) -> bool:
    """The run goes through without an out-of-memory error."""
    return result.first_oom is None


@dataclass
class FitSearch:
    """The largest batch scale that fits under a limit, and the runs that showed it."""

    limit: int | None
    scale: Fraction | None  # None: not even the smallest scale tried fits
    batch: int | None  # with the recorded batch known: the largest batch that fits
    peak_reserved: int | None  # of the largest fitting run
    tried: list[tuple[Fraction, bool, int]]  # (scale, fits, peak reserved until OOM)
    capped: bool = False  # still fits at MAX_SCALE (the search stopped there)


def largest_fitting_scale(case: Case, judgement: Judgement, limit: int | None = None,
                          conf=None, recorded_batch: int | None = None,
                          precision: float = 0.01,
                          progress: Progress | None = None) -> FitSearch:
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
