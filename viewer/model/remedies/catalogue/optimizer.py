"""The optimizer's memory:

* ``8bit_optimizer`` (simulated): the optimizer state's allocations at a quarter of
  their bytes, with a range down to the run without state nor step temporaries (SGD
  without momentum): another optimizer makes other temporaries;
* ``set_to_none`` (estimated): the gradients the program zeroes in place (by their
  category, outliving the iteration after theirs) freed as each iteration begins and made
  again in its backward, re-simulated; the range makes them at the backward's end and
  start.  After an OOM, from the split: those live at a forward instant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...core.units import format_bytes as fb
from ...whatif import Case
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


def _kept_gradients(ctx: Context) -> np.ndarray | None:
    """The gradients the program zeroes in place (known by their category): made in a
    backward and outliving the whole iteration after it (set to None, they would be freed
    by the next iteration's ``zero_grad``).  Only where the next iteration ran a backward
    (the recording's last one, a tail after it, or before the iterations are known cannot
    show it)."""
    evd, n = ctx.evd, ctx.n
    if evd.categories is None:
        return None
    reqs = ctx.case.requests
    it = evd.iteration.astype(np.int64)
    starts = np.asarray(evd.iteration_starts, np.int64)
    # Per iteration: whether a backward ran in it (and none after the last).
    has_bwd = np.zeros(len(starts) + 1, bool)
    if len(starts):
        first_bwd, _, ends = changes.backward_bounds(evd, starts, n)
        has_bwd[: len(starts)] = first_bwd < ends
    known = (it >= 0) & has_bwd[np.clip(it + 1, 0, len(starts))]
    grads = (reqs.kind == rq.ALLOC) & evd.category_in("gradient") & known
    grads &= (evd.phase == evidence.BACKWARD) & evidence.kept_across_iterations(evd, n)
    return grads if grads.any() else None


def _grads_applies(ctx: Context) -> np.ndarray | None:
    """Gradients zeroed in place (:func:`_kept_gradients`).  After an OOM (no run after
    it to simulate): those live at the split's instant, when it is in a forward pass."""
    grads = _kept_gradients(ctx)
    if grads is None or not ctx.cut:
        return grads
    at = ctx.at
    if not (0 <= at < ctx.n) or ctx.evd.phase[at] != evidence.FORWARD:
        return None
    live = grads & (np.arange(ctx.n) <= at) & (ctx.evd.free_at > at)
    return live if live.any() else None


def _grads_case(ctx: Context, grads: np.ndarray, place: str) -> Case | None:
    """The stream with the gradients set to None, made again in backward at ``place``."""
    return changes.gradients_set_to_none(ctx.case, ctx.evd, grads, place)


def _grads_simulations(ctx: Context, grads: np.ndarray) -> Simulations:
    """The run with the gradients made again where the first backward made them, and the
    peaks with them made at each backward's start and end (the bounds of where autograd
    makes them): three runs, side by side on advise's pool.  None where the iterations do
    not place them."""

    def point() -> Run | None:
        edited = _grads_case(ctx, grads, changes.AS_FIRST)
        return None if edited is None else run_edited(edited, ctx.case, ctx.limit)

    def bound(place: str) -> Callable[[], int | None]:
        def peak() -> int | None:
            edited = _grads_case(ctx, grads, place)
            return None if edited is None else peak_of(edited, ctx.limit)

        return peak

    return {"point": point, "start": bound(changes.AT_START), "end": bound(changes.AT_END)}


def _grads_build(ctx: Context, grads: np.ndarray, ran: Mapping[str, Any]) -> list[Remedy]:
    kept_grads = int(ctx.case.requests.size[grads].sum())
    # The optimizer's line (its state is made in the step): zero_grad is called beside it.
    state = optimizer_state(ctx.evd, ctx.judgement) & (ctx.case.requests.kind == rq.ALLOC)
    if not state.any():
        state = ctx.judgement.rule == scaling.OPTIMIZER
    where = most_common_user_frame(ctx.snap, ctx.evd.site[state])
    if ctx.cut:
        return [
            estimated(
                ctx,
                SET_TO_NONE,
                ctx.peak - kept_grads,
                ctx.peak - kept_grads,
                ctx.peak,
                where=where,
                detail=f"estimated: {fb(kept_grads)} of gradients are live at a peak in the "
                "forward pass; with set_to_none they are made again in backward.  Reserved "
                "falls by up to their bytes: the range reaches the recorded peak, where the "
                "freed gradients' segments stay cached",
                acts_on=grads,
                from_split=True,
            )
        ]
    point, at_start, at_end = ran["point"], ran["start"], ran["end"]
    if point is None:
        return []
    p = point.demand
    # Made at the backward's start, the gradients may pack worse than the program packs
    # them in place; the remedy frees memory, so the range stops at the recorded peak.
    high = max(p, min(at_start, ctx.peak))
    return [
        estimated(
            ctx,
            SET_TO_NONE,
            p,
            min(p, at_end),
            high,
            where=where,
            detail=f"estimated: re-simulated with the {fb(kept_grads)} of gradients zeroed in "
            "place freed as each iteration begins and made again in its backward where the "
            "first backward made them; the range makes them at each backward's end and "
            "start (where autograd makes a gradient the in-place recording shows only once)",
            acts_on=grads,
            from_split=False,
            point_floored=False,
        )
    ]


SET_TO_NONE = RemedySpec(
    id="set_to_none",
    title="Free gradients before the forward pass (set_to_none)",
    change="call `optimizer.zero_grad(set_to_none=True)` "
    "(the default since torch 2.0) instead of zeroing gradients in place",
    method=ESTIMATED,
    applies=_grads_applies,
    simulations=_grads_simulations,
    build=_grads_build,
    split_after_oom=True,
)
