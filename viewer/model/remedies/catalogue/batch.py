"""``smaller_batch``: the largest batch that fits the limit (or half the batch when there
is no limit), re-simulated with every allocation that scales with the batch scaled
(:mod:`..batch_scale`; its search is part of the context, :func:`.context.gather`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.units import format_bytes as fb
from .. import batch_scale, scaling
from ..remedy import SIMULATED, Remedy
from .context import Context, most_common_user_frame, run_of_prediction
from .spec import RemedySpec, simulated

LARGEST_TITLE = "Smaller batch: the largest that fits ({what})"
HALF_TITLE = "Half the batch"


def workspace_note(pred: batch_scale.BatchPrediction) -> str:
    """``; estimate ...`` when cuDNN-like workspaces make a batch prediction an estimate
    (:func:`..batch_scale.is_estimate`); their range where its ends read apart, else the
    one value every size drawn gives."""
    est = pred.estimate
    if not pred.is_estimate or est is None:
        return ""
    span = batch_scale.range_words(est.low, est.high)
    return f"; estimate: {est.in_doubt()}: {est.why_range()}; " + (
        f"peak reserved {span}"
        if span
        else f"every size drawn gives the same peak reserved, {fb(est.low)}"
    )


def _applies(ctx: Context) -> tuple[str | None] | None:
    """(where the batch is made: the line most inputs were made at, if any), or None
    where nothing grows with the batch: a smaller one would change nothing."""
    evd, j = ctx.evd, ctx.judgement
    if not batch_scale.anything_scales(ctx.case, j):
        return None
    inputs = evd.category_in("input")
    if inputs.any():
        input_sites = evd.site[inputs]
    else:
        input_sites = evd.site[
            (j.rule == scaling.INPUT_ONCE)
            | (evd.user_line & j.scales & (j.rule != scaling.KEPT_EACH))
        ]
    return (most_common_user_frame(ctx.snap, input_sites) if len(input_sites) else None,)


def _build(ctx: Context, prep: tuple[str | None], ran: Mapping[str, Any]) -> list[Remedy]:
    case, j, batch, safe = ctx.case, ctx.judgement, ctx.batch, ctx.safe
    (where,) = prep
    if safe is not None and safe.scale < 1:
        f = safe.scale
        what = f"batch {safe.batch}" if safe.batch else f"{float(f):.0%} of the batch"
        r = simulated(
            ctx,
            SMALLER_BATCH,
            run_of_prediction(safe, case, ctx.limit),
            title=LARGEST_TITLE.format(what=what),
            change=f"reduce the batch size to {safe.batch}"
            if safe.batch
            else f"reduce the batch size to {float(f):.0%} of the recorded one",
            where=where,
            detail="re-simulated with every allocation that scales with the batch scaled"
            + workspace_note(safe),
            acts_on=j.scales,
            pred=safe,
        )
        r.batch, r.batch_scale = safe.batch, float(f)
        return [r]
    pred = ctx.half_batch()
    halved = batch // 2 if batch and batch >= 2 else None
    r = simulated(
        ctx,
        SMALLER_BATCH,
        run_of_prediction(pred, case, ctx.limit),
        title=HALF_TITLE,
        change=f"halve the batch size (to {halved})" if halved else "halve the batch size",
        where=where,
        detail="re-simulated with every allocation that scales with the batch halved"
        + workspace_note(pred),
        acts_on=j.scales,
        pred=pred,
    )
    r.batch, r.batch_scale = halved, 0.5
    return [r]


SMALLER_BATCH = RemedySpec(
    id="smaller_batch",
    title="Smaller batch",
    change="reduce the batch size",
    method=SIMULATED,
    applies=_applies,
    build=_build,
)
