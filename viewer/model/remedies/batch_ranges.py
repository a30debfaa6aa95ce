"""The range of a batch prediction: the sizes the doubtful allocations could take.

A recording fixes every request's size at its own batch only; at another batch some are
known only within bounds (:attr:`~.scaling.Judgement.doubtful`): a library's workspaces
(cuDNN picks its algorithm per shape), torch.compile's autotuning allocations, and those
judged to scale by a size coincidence alone.  This module draws their sizes
(:func:`doubt_draws`: the bounds, seeded samples within them) and holds the range the
simulated draws give (:class:`PeakEstimate`) with its words; :mod:`.batch_scale` runs the
draws through the allocator model.  No simulation here: numpy over the judgement.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..core.units import format_bytes as fb
from ..core.units import plural
from .scaling import Judgement


def exact_scale(scale) -> Fraction:
    """A batch scale as an exact fraction: a float to the nearest 1/2^20, a
    :class:`~fractions.Fraction` as it is (the one conversion every batch answer uses)."""
    return Fraction(scale).limit_denominator(1 << 20) if not isinstance(scale, Fraction) else scale


ESTIMATE_SAMPLES = 32  # simulated draws of the workspace sizes for the estimate's range
# ... and on long streams (a replay of a million events takes seconds) fewer.
ESTIMATE_SAMPLES_LONG, LONG_STREAM = 8, 200_000
# A workspace that copies a convolution's two operands asks for up to this many times
# their bytes: measured 1.007-1.026 on MobileNetV3 and EfficientNet-B0 backward-filter
# (H100, cuDNN 9.19), the rest alignment and a per-call constant.
COPY_SLACK = Fraction(21, 20)
# What the range of a batch prediction spans, in words (CLI and GUI say it the same way).
RANGE_WHAT = (
    "the library may pick another algorithm at another batch (cuDNN does, per "
    "convolution), so each workspace may be like the recorded one (half to twice "
    "its estimated size), a copy of its operands, or none"
)
#: What the uncertain allocations are, in words that fit any model (a transformer's odd-sized
#: scratch is judged so too: see :attr:`.scaling.Judgement.workspace`).
WORKSPACE_WHAT = "library workspaces (not per-sample: made and freed inside one operation)"
TUNING_WHAT = (
    "torch.compile tunes its kernels per shape, so its benchmark buffers and "
    "argument copies may be absent, as recorded or twice as many at this batch"
)
GUESSED_WHAT = (
    "allocations whose size is both a model-state tensor's and a per-sample "
    "tensor's were judged by that alone, and may scale the other way"
)
#: Why the range reaches past the draws: the rest of the prediction is the recorded requests
#: resized and re-simulated, and the real run at another batch places and rounds its blocks
#: in segments the recording never showed (and may pick other kernels than the ones judged).
POINT_WHAT = (
    "the rest is the recorded requests resized and re-simulated, held to the batch "
    "model's measured error ({error}), for segment placement and rounding at sizes "
    "never recorded"
)
PLACEMENT_WHAT = (
    "and down to {gain} lower: the real allocator may pack its blocks better than they "
    "replay in segments at another run's addresses"
)


def workspace_bounds(judgement: Judgement, scale) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest requested size of every
    :attr:`~.scaling.Judgement.uncertain_workspace` allocation at ``scale`` (arrays over
    those allocations, in request order): :func:`workspace_sizes`' ``low`` and the larger
    of its ``band_high`` and ``copy``."""
    lo, band_hi, copy = workspace_sizes(judgement, scale)
    return lo, np.maximum(band_hi, copy)


def workspace_sizes(judgement: Judgement, scale) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    f = exact_scale(scale)
    w = judgement.uncertain_workspace
    est = judgement.scaled_sizes(f)[w]
    rec = judgement.size[w]
    lo = np.maximum(np.minimum(est // 2, rec), 1)
    hi = np.maximum(est * 2, rec)
    copy = np.zeros_like(hi)
    if judgement.operands is not None:
        ops = judgement.operands[w]
        copy = -(
            (-ops * COPY_SLACK.numerator * f.numerator) // (COPY_SLACK.denominator * f.denominator)
        )
    return lo, hi, copy


@dataclass
class PeakEstimate:
    """The range of peak reserved bytes over workspace sizes drawn within their bounds:
    an estimate (the library's choice at another batch is not in the recording), unlike
    the rest of the prediction, which follows from per-sample sizes."""

    low: int
    high: int
    # Allocations whose size is estimated (library workspaces, and the autotuning and
    # size-judged ones counted below too), and their requested bytes at the estimate.
    workspaces: int
    workspace_bytes: int
    samples: int
    # Draws simulated, and how many of them ran out of memory under the limit they were
    # simulated with (none without one): a draw that runs out means the prediction's
    # range reaches the limit.
    draws: int = 0
    ooms: int = 0
    # Of them: torch.compile's autotuning allocations, and allocations judged by their size
    # alone (:attr:`~.scaling.Judgement.tuning`, :attr:`~.scaling.Judgement.guessed`).
    tuning: int = 0
    guessed: int = 0
    # The draws' own lowest and highest peak, and the error the point prediction is held to
    # around them (:data:`.batch_judge.POINT_ERROR`): :attr:`low` and :attr:`high` are the
    # wider of the two.  Zero: the draws alone.
    drawn_low: int = 0
    drawn_high: int = 0
    point_error: Fraction = Fraction(0)
    # How much lower than the point the range reaches for segment placement
    # (:data:`.batch_judge.PLACEMENT_GAIN`); zero: not at all.
    placement: Fraction = Fraction(0)

    def to_dict(self) -> dict:
        what = (
            WORKSPACE_WHAT
            + " estimated as a fixed weight part plus a per-sample part; "
            + RANGE_WHAT
        )
        if self.tuning:
            what += "; " + TUNING_WHAT
        if self.guessed:
            what += "; " + GUESSED_WHAT
        if self.point_error:
            what += "; " + self.point_what()
        return {
            "estimate": True,
            "low_bytes": self.low,
            "high_bytes": self.high,
            "workspace_allocations": self.workspaces,
            "workspace_bytes_estimated": self.workspace_bytes,
            "tuning_allocations": self.tuning,
            "size_guessed_allocations": self.guessed,
            "samples": self.samples,
            "draws": self.draws,
            "draws_out_of_memory": self.ooms,
            "drawn_low_bytes": self.drawn_low or self.low,
            "drawn_high_bytes": self.drawn_high or self.high,
            "point_error": float(self.point_error),
            "placement_gain": float(self.placement),
            "in_doubt": self.in_doubt(),
            "why_range": self.why_range(),
            "what": what,
        }

    def point_what(self) -> str:
        """:data:`POINT_WHAT` with the error as a percentage (and :data:`PLACEMENT_WHAT`
        where the range reaches lower for placement)."""
        out = POINT_WHAT.format(error=f"{float(self.point_error):.0%}")
        if self.placement:
            out += ", " + PLACEMENT_WHAT.format(gain=f"{float(self.placement):.0%}")
        return out

    @property
    def library_workspaces(self) -> int:
        """Of :attr:`workspaces`, those a library's algorithm choice sizes."""
        return self.workspaces - self.tuning - self.guessed

    def in_doubt(self) -> str:
        """What the estimate rests on, counted: "3 library workspaces", "2 library
        workspaces, 26 autotuning allocations and 1 allocation judged by its size"."""
        parts = [
            plural(n, one, many)
            for n, one, many in (
                (self.library_workspaces, "library workspace", None),
                (self.tuning, "autotuning allocation", None),
                (self.guessed, "allocation judged by its size", "allocations judged by their size"),
            )
            if n > 0
        ]
        if not parts:
            return plural(self.workspaces, "allocation") + " of estimated size"
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    def why_range(self) -> str:
        """Why those allocations may take other sizes, for the kinds present, and why the
        range reaches past them (:attr:`point_error`)."""
        why = (
            "; ".join(
                w
                for n, w in (
                    (self.library_workspaces, RANGE_WHAT),
                    (self.tuning, TUNING_WHAT),
                    (self.guessed, GUESSED_WHAT),
                )
                if n > 0
            )
            or RANGE_WHAT
        )
        return why + "; " + self.point_what() if self.point_error else why


# One draw: the requests it sizes otherwise than the point estimate, and their sizes.
Patch = tuple[np.ndarray, np.ndarray]
_NO_CHANGE: Patch = (np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass
class DoubtDraws:
    """The draws of :func:`doubt_draws` - every request's size at the point estimate and,
    per draw, the few requests it sizes otherwise - and what was drawn: the
    :class:`PeakEstimate` of their simulated runs says it."""

    scale: Fraction
    base: np.ndarray
    patches: list[Patch]
    samples: int
    # The allocations drawn, and their requested bytes at the point estimate; of them,
    # autotuning's and the size-judged ones (the rest are library workspaces).
    drawn: int
    drawn_bytes: int
    tuning: int
    guessed: int

    def __len__(self) -> int:
        return len(self.patches)

    def sizes(self, i: int) -> np.ndarray:
        """Every request's size in draw ``i``: a new array, made when the draw's run
        starts (dozens of full copies of a long stream made up front were most of a
        range's serial time, and its memory)."""
        out = self.base.copy()
        rows, sizes = self.patches[i]
        out[rows] = sizes
        return out

    def estimate(
        self,
        runs: list[tuple[int, bool]],
        point_error: Fraction = Fraction(0),
        placement: Fraction = Fraction(0),
    ) -> PeakEstimate:
        """The range over the draws' runs: (peak reserved until any OOM, ran out of
        memory) per draw, the first the point prediction's (the doubtful sizes as
        estimated).  ``point_error``: the error the point prediction is held to, a share of
        it, which the range takes in too.  The draws only move the doubtful allocations;
        where none moves the peak (tiny workspaces, or ones whose segments later blocks
        reuse anyway) they alone would give a range of zero width, yet the real run
        differs by more: the per-sample requests land in segments, and are rounded, as the
        recording never showed at this batch."""
        peaks = [p for p, _ in runs]
        point = peaks[0]
        margin = int(point * point_error)
        return PeakEstimate(
            min(min(peaks), point - margin - int(point * placement)),
            max(max(peaks), point + margin),
            self.drawn,
            self.drawn_bytes,
            self.samples,
            len(runs),
            sum(1 for _, oom in runs if oom),
            self.tuning,
            self.guessed,
            min(peaks),
            max(peaks),
            point_error,
            placement,
        )


def doubt_draws(
    judgement: Judgement, scale, samples: int | None = None, seed: int = 0
) -> DoubtDraws | None:
    """The sizes the :attr:`~.scaling.Judgement.doubtful` allocations could take at
    ``scale``: the workspaces cuDNN could ask for, torch.compile's autotuning and the
    allocations judged by size alone (:func:`_tuning_and_guessed_draws`); None when the
    recording has none.

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
    tun = judgement.tuning & ~w
    guess = (
        judgement.guessed & ~w & ~tun if judgement.guessed is not None else np.zeros(len(w), bool)
    )
    if not (w.any() or tun.any() or guess.any()):
        return None
    if samples is None:
        samples = ESTIMATE_SAMPLES if len(w) <= LONG_STREAM else ESTIMATE_SAMPLES_LONG
    f = exact_scale(scale)
    base = judgement.scaled_sizes(f)
    patches: list[Patch] = []
    if w.any():
        rows = np.flatnonzero(w)
        patches += [(rows, d) for d in _workspace_draws(judgement, f, samples, seed)]
    else:
        patches.append(_NO_CHANGE)
    if tun.any() or guess.any():
        patches += _tuning_and_guessed_draws(judgement, f, base, tun, guess, samples, seed + 1)
    every = w | tun | guess
    return DoubtDraws(
        f,
        base,
        patches,
        samples,
        int(every.sum()),
        int(base[every].sum()),
        int(tun.sum()),
        int(guess.sum()),
    )


def _workspace_draws(
    judgement: Judgement, f: Fraction, samples: int, seed: int
) -> list[np.ndarray]:
    """The workspaces' sizes per draw (see :func:`doubt_draws`), over
    :attr:`~.scaling.Judgement.uncertain_workspace` in request order."""
    w = judgement.uncertain_workspace
    lo, hi, copy = workspace_sizes(judgement, f)
    copied = np.maximum(copy, lo)
    none = np.ones_like(lo)
    _, group = np.unique(judgement.size[w], return_inverse=True)
    groups = int(group.max()) + 1
    rng = np.random.default_rng(seed)
    draws = [judgement.scaled_sizes(f)[w], lo, hi, none]
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
    return draws


def _tuning_and_guessed_draws(
    judgement: Judgement,
    f: Fraction,
    base: np.ndarray,
    tun: np.ndarray,
    guess: np.ndarray,
    samples: int,
    seed: int,
) -> list[Patch]:
    """Draws of the autotuning allocations and of those judged by size alone, as patches
    of ``base`` (the point estimate's sizes).

    Autotuning at another shape tunes other kernels, other times (GPT-2 under
    torch.compile: 16, 22 and 26 benchmark buffers of 60 MiB at batch 4, 8 and 12), and the
    segments its buffers leave behind are reused by the iterations after it, so the peak
    moves with them either way: each is drawn absent (1 B), as estimated or twice its size
    (two where one was), all together and one by one.  A size-judged allocation is drawn
    judged the other way (its recorded size where it was scaled, scaled where it was kept),
    all of one size together: the size is all that judged them."""
    rng = np.random.default_rng(seed)
    out: list[Patch] = []
    t = np.flatnonzero(tun)
    if len(t):
        out.append((t, np.ones(len(t), np.int64)))  # all absent
        out.append((t, base[t] * 2))  # all twice
    g = np.flatnonzero(guess)
    other = np.zeros(0, np.int64)
    group = np.zeros(0, np.int64)
    rec = np.zeros(0, np.int64)
    scratch = np.zeros(0, bool)
    if len(g):
        # Its recorded size where it was judged to scale, scaled where it was kept.
        rec = judgement.size[g]
        other = np.where(judgement.scales[g], rec, -((-rec * f.numerator) // f.denominator))
        st = judgement.staging
        if st is not None:  # a staging buffer: the other end of what its cap allows
            at = np.searchsorted(g, st.rows)
            hit = (at < len(g)) & (g[np.minimum(at, len(g) - 1)] == st.rows)
            other[at[hit]] = st.other(f)[hit]
        _, group = np.unique(rec, return_inverse=True)
        out.append((g, other))
        if judgement.scratch is not None:
            scratch = judgement.scratch[g]
    for _ in range(samples):
        rows, sizes = [], []
        if len(t):
            kind = rng.integers(0, 3, len(t))  # 0 as estimated, 1 absent, 2 twice
            rows += [t[kind == 1], t[kind == 2]]
            sizes += [np.ones(int((kind == 1).sum()), np.int64), base[t[kind == 2]] * 2]
        if len(g):  # (never one of t's: the two sets are apart)
            flip = rng.random(int(group.max()) + 1)[group] < 0.5
            drawn = other
            if scratch.any():
                # A library's scratch may take any size between its two readings (BERT's
                # 125 MiB at batch 4 is 132.8 MiB at 8, not 250), and the segment it then
                # needs moves the peak more than its bytes (142 MiB there).
                u = rng.random(int(group.max()) + 1)[group]
                lo, hi = np.minimum(base[g], other), np.maximum(base[g], other)
                between = lo + ((hi - lo) * u).astype(np.int64)
                drawn = np.where(scratch, -((-between) // 512) * 512, other)
            rows.append(g[flip])
            sizes.append(drawn[flip])
        out.append(
            (np.concatenate(rows), np.concatenate(sizes).astype(np.int64)) if rows else _NO_CHANGE
        )
    return out


def range_words(low: int, high: int) -> str | None:
    """``"6.90 GiB - 7.10 GiB"``, or None where the two ends read the same (a range of
    zero width, or one narrower than the figures show, is one value: say it once)."""
    lo, hi = fb(low), fb(high)
    return None if lo == hi else f"{lo} - {hi}"
