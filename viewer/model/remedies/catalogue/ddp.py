"""DistributedDataParallel's gradients:

* ``gradient_as_bucket_view`` (simulated): where the parameters' gradients are tensors
  of their own beside DDP's gradient buckets (made in backward, still live when the
  optimizer steps; with the bucket view the ``.grad`` are the buckets and the tensors
  autograd makes are freed as the Reducer copies them in), the recorded stream with
  each of them freed there: in the backward that synchronises, right after it is made,
  or for a gradient accumulated under ``no_sync()``, at the same place of the last
  backward before the step.  The allocations themselves stay: autograd still makes
  them.  The saving is whatever the peak shows, nothing where they were not live at it.

* ``fsdp_full_shard`` (estimated): the same program under FSDP2 full sharding
  (``fully_shard``) on the recording's number of ranks (the capture's sidecar; one rank
  shares nothing and is not offered): each rank keeps 1/W of the parameters, of their
  gradients and of the optimizer state, and no bucket.  The recorded stream is
  re-simulated with those allocations at 1/W of their bytes (the buckets gone, or, where
  they are the gradients, at 1/W); FSDP then gathers a unit's parameters for its forward
  and backward (the all-gather's output) and holds its unsharded gradients until the
  reduce-scatter, bytes the recording cannot show: they are added to the simulated
  reserved curve wherever the recording runs a forward or backward pass.  How large a
  unit is depends on how the program wraps it: from the largest parameter tensor (one
  layer per unit, nothing prefetched) to the whole model (one unit, or
  ``reshard_after_forward=False``, which keeps every unit gathered): the range's ends.
  The point is one layer per unit the size of the largest tensor, the next one
  prefetched and one unit's unsharded gradients.

A smaller ``bucket_cap_mb`` is no remedy here: the buckets hold the parameters' bytes
whatever their cap, which only changes how those bytes are split into blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ...categories.sharded import world_size
from ...core.units import format_bytes as fb
from ...core.units import plural
from ...whatif import requests as rq
from .. import changes, edit, evidence
from ..remedy import ESTIMATED, SIMULATED, Remedy
from ..split import optimizer_state
from .context import Context, Run, run_edited
from .spec import RemedySpec, Simulations, estimated, simulated

DDP_BUCKET = "ddp_bucket"  # the categories' reason for the Reducer's buckets


@dataclass
class _Separate:
    """The parameters' gradients that are tensors of their own, and where the bucket
    view would free them."""

    grads: np.ndarray  # bool per request
    moves: list[tuple[int, int]]  # (allocation, the request it is freed after)
    steps: int  # optimizer steps they were live at


def _backward_runs(phase: np.ndarray, alloc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) request of each run of backward allocations (one backward pass)."""
    rows = np.flatnonzero(alloc)
    bwd = (phase[rows] == evidence.BACKWARD).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.r_[0, bwd, 0]))
    return rows[edges[0::2]], rows[edges[1::2] - 1]


def separate_gradients(ctx: Context) -> _Separate | None:
    """The gradients beside DDP's buckets: allocations the categories call gradients (not
    the buckets) made in backward and still live when the next optimizer step runs; None
    where the recording has no DDP bucket or no such gradient (the bucket view is on, or
    this is not DDP)."""
    evd = ctx.evd
    if evd.categories is None or evd.category_reasons is None:
        return None
    reqs = ctx.case.requests
    n = ctx.n
    alloc = reqs.kind == rq.ALLOC
    if not (alloc & evd.reason_in(DDP_BUCKET)).any():
        return None
    steps = np.flatnonzero(evd.phase == evidence.OPTIMIZER)
    if not len(steps):
        return None
    pos = np.searchsorted(steps, np.arange(n), side="right")
    next_step = np.where(pos < len(steps), steps[np.minimum(pos, len(steps) - 1)], n)
    grads = (
        alloc
        & (evd.phase == evidence.BACKWARD)
        & evd.category_in("gradient")
        & ~evd.reason_in(DDP_BUCKET)
        & (next_step < n)
        & (evd.free_at > next_step)
    )
    rows = np.flatnonzero(grads)
    if not len(rows):
        return None
    first, last = _backward_runs(evd.phase, alloc)
    own = np.searchsorted(first, rows, side="right") - 1
    # The backward that synchronises: the last one before the step.
    synced = np.searchsorted(last, next_step[rows], side="left") - 1
    frac = (rows - first[own]) / np.maximum(last[own] - first[own], 1)
    mapped = first[synced] + np.rint(frac * (last[synced] - first[synced])).astype(np.int64)
    after = np.where(own == synced, rows, mapped)
    moves = list(zip(rows.tolist(), after.tolist()))
    return _Separate(grads, moves, len(np.unique(next_step[rows])))


def _simulations(ctx: Context, sep: _Separate) -> Simulations:
    return {"run": lambda: run_edited(edit.frees_moved(ctx.case, sep.moves), ctx.case, ctx.limit)}


def _constructed_at(ctx: Context) -> str | None:
    """The program's line that built DDP: that of the buckets made inside its
    ``__init__`` (None where the window began after it)."""
    evd, snap = ctx.evd, ctx.snap
    bucket_sites = np.unique(evd.site[evd.reason_in(DDP_BUCKET)]).tolist()
    for s in bucket_sites:
        if s < 0:
            continue
        for f in snap.stacks.frame_ids(int(s)).tolist():
            fn = snap.frames.filename_of(f).replace("\\", "/")
            if fn.endswith("nn/parallel/distributed.py") and snap.frames.name_of(f) == "__init__":
                return evidence.user_frame(snap, int(s))
    return None


def _build(ctx: Context, sep: _Separate, ran: Mapping[str, Any]) -> list[Remedy]:
    grads, size = sep.grads, ctx.case.requests.size
    per_step = int(size[grads].sum()) // max(sep.steps, 1)
    count = int(grads.sum()) // max(sep.steps, 1)
    # What they hold at the split's instant: the saving is the simulated peak's, which
    # the cache can move even where none of them is live then.
    live = grads & (np.arange(ctx.n) <= ctx.at) & (ctx.evd.free_at > ctx.at)
    r = simulated(
        ctx,
        GRADIENT_AS_BUCKET_VIEW,
        ran["run"],
        where=_constructed_at(ctx),
        detail=f"{plural(count, 'gradient')} ({fb(per_step)} each step) are tensors of their "
        "own beside DDP's buckets, live from the backward to the next zero_grad "
        f"({fb(int(size[live].sum()))} of them {ctx.moment}); re-simulated with each freed "
        "where the Reducer copies it into its bucket (autograd still makes it; under "
        "`no_sync()` it lives until the backward that synchronises)",
        acts_on=grads,
    )
    return [r] if r.saving_bytes > 0 else []


GRADIENT_AS_BUCKET_VIEW = RemedySpec(
    id="gradient_as_bucket_view",
    title="Gradients as views of DDP's buckets (gradient_as_bucket_view)",
    change="construct DDP with `DistributedDataParallel(model, ..., "
    "gradient_as_bucket_view=True)`: each `.grad` is then a view into its gradient "
    "bucket, not a second copy",
    method=SIMULATED,
    applies=separate_gradients,
    simulations=_simulations,
    build=_build,
)


@dataclass
class _Sharded:
    """What full sharding over ``world`` ranks changes: the allocations kept at 1/W of
    their bytes, the buckets that go, and the bytes of the parameters and gradients a
    gathered unit holds."""

    world: int
    params: np.ndarray  # bool per request: the parameters
    grads: np.ndarray  # the parameters' gradients (the buckets where they are the .grad)
    state: np.ndarray  # the optimizer state
    buckets: np.ndarray  # DDP's buckets that FSDP does not make (none where they are the .grad)
    largest: int  # bytes of the largest parameter tensor: the smallest unit there can be
    model: int  # bytes of every parameter: the largest unit
    grad_model: int  # bytes of every parameter's gradient: the whole model's, unsharded


def sharded(ctx: Context) -> _Sharded | None:
    """The model state of this DDP recording as FSDP2 full sharding would keep it on each
    of the recording's ranks; None where it is no DDP recording (no bucket), the number of
    ranks is not recorded or is one (sharding over one rank saves nothing), or the
    categories do not know the parameters."""
    evd = ctx.evd
    if evd.categories is None or evd.category_reasons is None:
        return None
    world = world_size(ctx.snap.sidecar)
    if world is None or world < 2:
        return None
    reqs = ctx.case.requests
    alloc = reqs.kind == rq.ALLOC
    buckets = alloc & evd.reason_in(DDP_BUCKET)
    params = alloc & evd.category_in("parameter")
    if not buckets.any() or not params.any():
        return None
    sep = separate_gradients(ctx)
    if sep is not None:
        grads, gone = sep.grads, buckets
        grad_model = int(reqs.size[grads].sum()) // max(sep.steps, 1)
    else:
        # The bucket view: the buckets are the gradients; FSDP keeps 1/W of them.
        grads, gone = buckets, np.zeros_like(buckets)
        grad_model = int(reqs.size[buckets & (evd.free_at >= ctx.n)].sum()) or int(
            reqs.size[buckets].max()
        )
    state = optimizer_state(evd, ctx.judgement) & alloc
    kept = params & (evd.free_at >= ctx.n)
    model = int(reqs.size[kept if kept.any() else params].sum())
    return _Sharded(
        world, params, grads, state, gone, int(reqs.size[params].max()), model, grad_model
    )


def unit_bytes(sh: _Sharded) -> tuple[int, int, int]:
    """(low, point, high) of the bytes a gathered unit adds in a forward or backward pass:
    one unit of the largest tensor; that unit, the next one prefetched and one unit's
    unsharded gradients; the whole model's parameters and gradients unsharded."""
    high = sh.model + sh.grad_model
    return sh.largest, min(3 * sh.largest, high), high


def sharded_case(ctx: Context, sh: _Sharded):
    """The recorded stream with the model state at 1/W of its bytes and DDP's buckets at
    the allocator's smallest block (kept as rows, so that the stream's requests stay the
    recorded ones and the forward and backward passes stay where they were)."""
    shard = Fraction(1, sh.world)
    case = changes.with_sizes(ctx.case, sh.params | sh.grads | sh.state, shard)
    return changes.with_sizes(case, sh.buckets, Fraction(0))


def _sharded_simulations(ctx: Context, sh: _Sharded) -> Simulations:
    return {"run": lambda: run_edited(sharded_case(ctx, sh), ctx.case, ctx.limit)}


def with_units(run: Run, passes: np.ndarray, extra: int) -> int:
    """The peak of ``run`` with ``extra`` bytes held wherever ``passes`` (bool per request:
    a forward or backward pass) and nothing added elsewhere."""
    reserved = np.asarray(run.reserved)
    m = passes[: len(reserved)]
    in_passes = int(reserved[m].max()) + extra if m.any() else 0
    return max(int(run.demand), in_passes)


def _model_state(ctx: Context, sh: _Sharded) -> tuple[int, int, int, int]:
    """Bytes of (parameters, gradients, optimizer state, buckets) live at the split's
    instant under DDP."""
    live = (np.arange(ctx.n) <= ctx.at) & (ctx.evd.free_at > ctx.at)
    size = ctx.case.requests.size
    p, g, o, b = (int(size[m & live].sum()) for m in (sh.params, sh.grads, sh.state, sh.buckets))
    return p, g, o, b


def _sharded_build(ctx: Context, sh: _Sharded, ran: Mapping[str, Any]) -> list[Remedy]:
    w = sh.world
    p, g, o, b = _model_state(ctx, sh)
    lo_x, point_x, hi_x = unit_bytes(sh)
    passes = (ctx.evd.phase == evidence.FORWARD) | (ctx.evd.phase == evidence.BACKWARD)
    if ctx.cut or "run" not in ran:
        # The recorded run ends at the OOM: from the split there, the model state live at
        # it at 1/W, the buckets gone, a unit gathered if it was in a pass.  What a pass
        # after the cut would have gathered is not in the recording: the high end holds
        # the whole model gathered wherever the OOM was.
        base = ctx.peak - (p + g + o + b) + (p + g + o) // w
        gathered = bool(0 <= ctx.at < ctx.n and passes[ctx.at])
        point, low = (base + (x if gathered else 0) for x in (point_x, lo_x))
        high = base + hi_x
        how = "estimated from the split at the OOM"
    else:
        run = ran["run"]
        point, low, high = (with_units(run, passes, x) for x in (point_x, lo_x, hi_x))
        how = "re-simulated"
    r = estimated(
        ctx,
        FSDP_FULL_SHARD,
        point,
        low,
        high,
        where=_constructed_at(ctx),
        detail=f"estimated for FSDP2 full sharding over the same {plural(w, 'rank')}: per rank "
        f"parameters {fb(p // w)}, gradients {fb(g // w)} and optimizer state {fb(o // w)} "
        f"(1/{w} of the {fb(p)}, {fb(g)} and {fb(o)} each rank holds {ctx.moment} under "
        f"DDP), no gradient buckets ({fb(b)} now); {how} with them so, plus what FSDP "
        "gathers in each forward and backward pass (the all-gather's parameters and the "
        "unsharded gradients before the reduce-scatter), which depends on how the model "
        f"is wrapped: from {fb(lo_x)} (one unit of the largest parameter tensor) to "
        f"{fb(hi_x)} (the whole model as one unit, or reshard_after_forward=False); "
        f"{fb(point_x)} at the point (that unit, the next one prefetched and its gradients)",
        acts_on=sh.params | sh.grads | sh.state | sh.buckets,
        from_split=ctx.cut,
    )
    if not (ctx.cut or "run" not in ran):
        # The point's curve: the shards' run with its unit's bytes in every pass.
        curve = np.asarray(ran["run"].reserved, np.int64).copy()
        curve[passes[: len(curve)]] += point_x
        r.curve = curve
        r.curve_x = ctx.case.curve_x() if ran["run"].curve_x is None else ran["run"].curve_x
    # The change in this recording's figures: what each rank would keep for good.
    kept = ctx.evd.free_at >= ctx.n
    state = int(ctx.case.requests.size[sh.state & kept].sum())
    r.change = (
        f"{FSDP_FULL_SHARD.change}; each of the {plural(w, 'rank')} keeps 1/{w} of the parameters "
        f"({fb(sh.model // w)}), of their gradients ({fb(sh.grad_model // w)}) and of the "
        f"optimizer state ({fb(state // w)}), and no gradient bucket"
    )
    return [r] if r.saving_bytes > 0 else []


FSDP_FULL_SHARD = RemedySpec(
    id="fsdp_full_shard",
    title="Model state sharded over the ranks (FSDP2 fully_shard)",
    change="replace DDP with FSDP2 full sharding on the same ranks: "
    "`torch.distributed.fsdp.fully_shard(block)` for each block, then "
    "`fully_shard(model)`",
    method=ESTIMATED,
    applies=sharded,
    simulations=_sharded_simulations,
    build=_sharded_build,
    split_after_oom=True,
)
