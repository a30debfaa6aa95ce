"""A remedy of the catalogue as data (:class:`RemedySpec`), and the two ways a remedy's
prediction is built from it: :func:`simulated` (a run of the edited stream) and
:func:`estimated` (a point and a range, under the one floor rule, :func:`floored`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.units import format_bytes as fb
from ..batch_scale import BatchPrediction
from ..remedy import ESTIMATED, SIMULATED, Remedy
from .context import Context, Run

# A spec's simulations: a name for each run its remedy reads, and the call that makes it
# (run on advise's pool, where it builds and drops its edited stream).
Simulations = dict[str, Callable[[], Any]]


def no_simulations(ctx: Context, prep: Any) -> Simulations:
    """A remedy that needs no run of the pool."""
    return {}


@dataclass(frozen=True)
class RemedySpec:
    """One remedy of the catalogue: what it is, when it applies, the runs it needs and
    how its prediction is built.

    ``applies(ctx)`` answers what the remedy acts on (the allocations it changes, the
    blocks it checkpoints, ...), or None where it does not apply to this recording;
    ``simulations(ctx, prep)`` names the runs it needs (run side by side on advise's
    pool); ``build(ctx, prep, ran)`` makes its remedies from them (``ran``: each of its
    runs' answer by name; none where the change saves nothing).  ``title`` and
    ``change`` are its words; a remedy built for one recording may word them with its
    figures (the batch it names, the setting)."""

    id: str
    title: str
    change: str
    # How its peak is predicted: SIMULATED, ESTIMATED, or GPU_FREED (what else holds the
    # GPU goes; those lead the list).
    method: str
    applies: Callable[[Context], Any]
    build: Callable[[Context, Any, Mapping[str, Any]], list[Remedy]]
    simulations: Callable[[Context, Any], Simulations] = no_simulations
    # Its runs build an edited stream (longer than a run of the recorded stream at
    # other settings): the pool starts them first.
    edits_stream: bool = True
    # After an OOM it is estimated from the split at the OOM and needs no run: the
    # recorded run was cut there, and an edited stream shows nothing of what the change
    # does after it (:attr:`.context.Context.cut`).
    split_after_oom: bool = False

    def runs(self, ctx: Context, prep: Any) -> Simulations:
        """The runs this spec needs for ``ctx`` (none after an OOM where it estimates
        from the split)."""
        if ctx.cut and self.split_after_oom:
            return {}
        return self.simulations(ctx, prep)


def spread(point: int, *ends: int) -> tuple[int, int] | None:
    """The range of ``point`` and ``ends``: their lowest and highest (None where they are
    one value: a range of zero width is no range, the estimate is labelled alone)."""
    lo, hi = min(point, *ends), max(point, *ends)
    return (lo, hi) if lo < hi else None


def simulated(
    ctx: Context,
    spec: RemedySpec,
    run: Run,
    *,
    where: str | None,
    detail: str = "",
    acts_on: np.ndarray | None = None,
    remedy_id: str | None = None,
    title: str | None = None,
    change: str | None = None,
    pred: BatchPrediction | None = None,
    ends: tuple[int, ...] = (),
) -> Remedy:
    """The simulated remedy of ``spec`` whose prediction is ``run``; its range the one of
    ``ends`` (other runs that bound what the recording cannot show), else of ``pred`` (a
    batch prediction that is an estimate).  ``remedy_id``, ``title``, ``change``: the
    spec's, worded for this recording."""
    p = run.demand
    batch_estimate = pred is not None and pred.is_estimate
    if ends:
        rng = spread(p, *ends)
    else:
        rng = pred.range if pred is not None and pred.is_estimate else None
    return Remedy(
        remedy=spec.id if remedy_id is None else remedy_id,
        title=spec.title if title is None else title,
        predicted_peak_reserved_bytes=p,
        saving_bytes=ctx.peak - p,
        method=SIMULATED,
        change=spec.change if change is None else change,
        where=where,
        fits=run.fits,
        detail=detail,
        curve=run.reserved,
        curve_x=ctx.case.curve_x() if run.curve_x is None else run.curve_x,
        acts_on=acts_on,
        predicted_peak_reserved_range=rng,
        batch_estimate=batch_estimate,
    )


def floored(
    point: int,
    low: int,
    high: int,
    floor: int,
    *,
    from_split: bool,
    point_floored: bool,
) -> tuple[int, tuple[int, int] | None, bool]:
    """The one floor rule: (point, range, whether the floor bounds it) of an estimate.

    The segments reserved before the recording (``floor``) stay reserved in every
    prediction, as in the simulated ones: the window cannot tell what made them.  An end
    computed from the split (``from_split``: the peak less some bytes) is raised to the
    floor; an end that is a simulated run keeps those segments itself and is taken as it
    is.  ``point_floored``: the point too is raised to the floor; the checkpointing and
    autocast estimates keep theirs as computed (from the split at an OOM their range then
    collapses on a point below the floor), so that their answers stay what they are."""
    p = max(point, floor) if point_floored else point
    lo = min(max(low, floor) if from_split else low, p)
    hi = max(high, p)
    return p, (lo, hi) if lo < hi else None, bool(floor) and lo <= floor


def estimated(
    ctx: Context,
    spec: RemedySpec,
    point: int,
    low: int,
    high: int,
    *,
    where: str | None,
    detail: str,
    acts_on: np.ndarray | None,
    from_split: bool,
    point_floored: bool = True,
    says_floor: bool = True,
) -> Remedy:
    """The estimated remedy of ``spec``: ``point`` in ``low`` - ``high`` under the floor
    rule (:func:`floored`); where the floor bounds the range the detail says so, unless
    ``says_floor`` is off (the 8-bit optimizer's estimate at an OOM has never said it)."""
    p, rng, at_floor = floored(
        int(point),
        int(low),
        int(high),
        ctx.floor,
        from_split=from_split,
        point_floored=point_floored,
    )
    if at_floor and says_floor:
        detail += (
            f"; the {fb(ctx.floor)} reserved before the recording started stays "
            "reserved in this prediction (the window cannot show what made it)"
        )
    return Remedy(
        remedy=spec.id,
        title=spec.title,
        predicted_peak_reserved_bytes=p,
        saving_bytes=ctx.peak - p,
        method=ESTIMATED,
        change=spec.change,
        where=where,
        fits=None if ctx.limit is None else p <= ctx.limit,
        detail=detail,
        acts_on=acts_on,
        predicted_peak_reserved_range=rng,
    )
