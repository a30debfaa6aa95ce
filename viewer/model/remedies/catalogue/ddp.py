"""DistributedDataParallel's gradients:

* ``gradient_as_bucket_view`` (simulated): where the parameters' gradients are tensors
  of their own beside DDP's gradient buckets (made in backward, still live when the
  optimizer steps; with the bucket view the ``.grad`` are the buckets and the tensors
  autograd makes are freed as the Reducer copies them in), the recorded stream with
  each of them freed there: in the backward that synchronises, right after it is made,
  or for a gradient accumulated under ``no_sync()``, at the same place of the last
  backward before the step.  The allocations themselves stay: autograd still makes
  them.  The saving is whatever the peak shows, nothing where they were not live at it.

A smaller ``bucket_cap_mb`` is no remedy here: the buckets hold the parameters' bytes
whatever their cap, which only changes how those bytes are split into blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.units import format_bytes as fb
from ...core.units import plural
from ...whatif import requests as rq
from .. import edit, evidence
from ..remedy import SIMULATED, Remedy
from .context import Context, run_edited
from .spec import RemedySpec, Simulations, simulated

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
    if not (alloc & (evd.category_reasons == DDP_BUCKET)).any():
        return None
    steps = np.flatnonzero(evd.phase == evidence.OPTIMIZER)
    if not len(steps):
        return None
    pos = np.searchsorted(steps, np.arange(n), side="right")
    next_step = np.where(pos < len(steps), steps[np.minimum(pos, len(steps) - 1)], n)
    grads = (
        alloc
        & (evd.phase == evidence.BACKWARD)
        & (evd.categories == "gradient")
        & (evd.category_reasons != DDP_BUCKET)
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
    bucket_sites = np.unique(evd.site[evd.category_reasons == DDP_BUCKET]).tolist()
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
