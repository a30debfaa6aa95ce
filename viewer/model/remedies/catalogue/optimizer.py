"""The optimizer's memory:

* ``8bit_optimizer`` (simulated): the optimizer state's allocations at a quarter of
  their bytes, with a range down to the run without state nor step temporaries (SGD
  without momentum): another optimizer makes other temporaries;
* ``set_to_none`` (estimated): the gradients live at a peak in the forward pass (with
  the categories package: gradients zeroed in place stay allocated), the range up to
  the recorded peak (freed segments may stay cached).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.units import format_bytes as fb
from ...whatif import requests as rq
from .. import changes, evidence, scaling
from ..remedy import ESTIMATED, SIMULATED, Remedy
from ..split import optimizer_state
from .context import Context, Run, most_common_user_frame, peak_of, run_edited
from .spec import RemedySpec, Simulations, estimated, simulated


def _state_applies(ctx: Context) -> np.ndarray | None:
    """The optimizer state's allocations, where some is live at the split's instant."""
    state = optimizer_state(ctx.evd, ctx.judgement) & (ctx.case.requests.kind == rq.ALLOC)
    return state if ctx.split["optimizer_state"] > 0 and state.any() else None


def _optimizer_runs(ctx: Context, state: np.ndarray) -> tuple[Run, int]:
    """The 8-bit optimizer's run, and the peak without state nor step temporaries."""
    eight, none = changes.optimizer_cases(ctx.case, ctx.evd, state)
    return run_edited(eight, ctx.case, ctx.limit), peak_of(none, ctx.limit)


def _state_simulations(ctx: Context, state: np.ndarray) -> Simulations:
    return {"runs": lambda: _optimizer_runs(ctx, state)}


def _state_build(ctx: Context, state: np.ndarray, ran: Mapping[str, Any]) -> list[Remedy]:
    where = most_common_user_frame(ctx.snap, ctx.evd.site[state])
    peak, opt = ctx.peak, ctx.split["optimizer_state"]
    if ctx.cut:
        return [
            estimated(
                ctx,
                EIGHT_BIT_OPTIMIZER,
                peak - opt * 3 // 4,
                peak - opt,
                peak - opt * 3 // 4 + 1,
                where=where,
                detail=f"estimated: three quarters of the {fb(opt)} of optimizer state live "
                f"{ctx.moment} (down to all of it: SGD without momentum)",
                acts_on=state,
                from_split=True,
                says_floor=False,
            )
        ]
    eight_run, none_peak = ran["runs"]
    return [
        simulated(
            ctx,
            EIGHT_BIT_OPTIMIZER,
            eight_run,
            where=where,
            detail=f"re-simulated with the {fb(int(ctx.case.requests.size[state].sum()))} of "
            "optimizer state allocations at a quarter of their bytes (two fp32 moments "
            "become two 8-bit ones); the range reaches down to no state and none of the "
            "step's temporaries (SGD without momentum), whose run is simulated too",
            acts_on=state,
            ends=(none_peak,),
        )
    ]


EIGHT_BIT_OPTIMIZER = RemedySpec(
    id="8bit_optimizer",
    title="8-bit optimizer state",
    change="use an 8-bit optimizer (e.g. `bitsandbytes.optim.AdamW8bit`, torchao's "
    "`AdamW8bit`) or SGD without momentum",
    method=SIMULATED,
    applies=_state_applies,
    simulations=_state_simulations,
    build=_state_build,
    split_after_oom=True,
)


def _grads_applies(ctx: Context) -> np.ndarray | None:
    """The gradients live at a peak in the forward pass (known by their category) that
    the program zeroes in place: their blocks outlive the iteration after the one that
    made them.  Gradients freed by then are set to None already (made again in each
    backward, freed by ``zero_grad``): the remedy is the program's own practice."""
    evd, at, n = ctx.evd, ctx.at, ctx.n
    if evd.categories is None or not (0 <= at < n) or evd.phase[at] != evidence.FORWARD:
        return None
    reqs = ctx.case.requests
    grads = (
        (reqs.kind == rq.ALLOC)
        & (np.arange(n) <= at)
        & (evd.free_at > at)
        & evd.category_in("gradient")
    )
    grads &= evidence.kept_across_iterations(evd, n)
    return grads if int(reqs.size[grads].sum()) > 0 else None


def _grads_build(ctx: Context, grads: np.ndarray, ran: Mapping[str, Any]) -> list[Remedy]:
    kept_grads = int(ctx.case.requests.size[grads].sum())
    optimizer = ctx.evd.site[ctx.judgement.rule == scaling.OPTIMIZER]
    return [
        estimated(
            ctx,
            SET_TO_NONE,
            ctx.peak - kept_grads,
            ctx.peak - kept_grads,
            ctx.peak,
            where=most_common_user_frame(ctx.snap, optimizer),
            detail=f"estimated: {fb(kept_grads)} of gradients are live at a peak in the "
            "forward pass; with set_to_none they are made again in backward.  Reserved falls "
            "by up to their bytes: the range reaches the recorded peak, where the freed "
            "gradients' segments stay cached",
            acts_on=grads,
            from_split=True,
        )
    ]


SET_TO_NONE = RemedySpec(
    id="set_to_none",
    title="Free gradients before the forward pass (set_to_none)",
    change="call `optimizer.zero_grad(set_to_none=True)` "
    "(the default since torch 2.0) instead of zeroing gradients in place",
    method=ESTIMATED,
    applies=_grads_applies,
    build=_grads_build,
)
