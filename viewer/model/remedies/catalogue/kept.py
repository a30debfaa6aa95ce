"""Memory kept past its use, freed (both simulated):

* ``free_kept``: drop what is kept every iteration (a leak in training; outputs and
  their graphs kept by an evaluation loop without ``no_grad``): what the program's own
  line makes only to keep (``.detach().clone()``) is not made, the rest is freed at its
  iteration's end; an evaluation loop is told to use ``no_grad`` too, and its graphs
  are freed as :mod:`..no_grad` frees them;
* ``no_grad_forward``: forwards whose graph no backward uses (:mod:`..no_grad`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.members import one_of
from ...core.units import format_bytes as fb
from ...core.units import plural
from ...whatif import Case
from ...whatif import requests as rq
from .. import changes, evidence, no_grad, scaling
from ..remedy import SIMULATED, Remedy
from .context import Context, Run, most_common_user_frame, run_edited
from .spec import RemedySpec, Simulations, simulated

EVAL_CHANGE = (
    "keep `loss.item()` / `out.detach().cpu()`, not the tensors, and run "
    "evaluation under `with torch.no_grad():`"
)


def alive_to_the_end(case: Case, evd: evidence.Evidence) -> np.ndarray:
    """Allocations alive when the program's work ended: never freed, or freed in the
    recording's closing frees, after its last allocation (a list the loop appended to
    goes when its function returns, before the snapshot is taken: what it kept lived
    all along)."""
    reqs = case.requests
    alloc = reqs.kind == rq.ALLOC
    if not alloc.any():
        return alloc
    last = int(np.flatnonzero(alloc)[-1])
    return alloc & (evd.free_at > last)


def kept_each_iteration(case: Case, evd: evidence.Evidence, j: scaling.Judgement) -> np.ndarray:
    """Allocations the program keeps every iteration: alive to the end
    (:func:`alive_to_the_end`), growing with the batch, two or more from one call site
    (whatever rule judged them: the categories call kept graphs activations), with that
    site's last ones that the recording's end cut off.  One of a site alive to the end is
    the last iteration's output, which any loop holds until it ends: not kept."""
    reqs = case.requests
    n = len(reqs)
    never = alive_to_the_end(case, evd)
    if not never.any():
        return never
    # Closing frees count as never freed, so that the site's earlier frees tell cut_off's
    # "made and freed before, none after" as they do for a recording that ends mid-run.
    ended = dataclasses.replace(evd, free_at=np.where(never, n, evd.free_at))
    cut = scaling.cut_off(reqs, ended, never)
    cand = never & ~cut & j.scales
    sites, counts = np.unique(evd.site[cand], return_counts=True)
    keeping = sites[counts >= 2]
    return never & j.scales & one_of(evd.site, keeping)


def iterations_spanned(evd: evidence.Evidence, mask: np.ndarray, reqs) -> int:
    """How many distinct iterations the requests of ``mask`` were made in (0: no
    iterations known)."""
    bd = evd.breakdown
    its = bd.iterations if bd is not None else None
    if its:
        starts = np.array([it.start for it in its], np.int64)
        ev = reqs.event[mask]
        inside = np.searchsorted(starts, ev, side="right") - 1
        return int(len(np.unique(inside[inside >= 0])))
    if evd.n_iterations:
        return int(len(np.unique(evd.iteration[mask & (evd.iteration >= 0)])))
    return 0


@dataclass
class _Kept:
    kept: np.ndarray  # bool per request: kept every iteration
    # No backward, no optimizer step: evaluation (or no telling).
    eval_loop: bool


def _kept_applies(ctx: Context) -> _Kept | None:
    """What is kept every iteration, where the same line kept something in two or more
    iterations (the evidence for it)."""
    evd = ctx.evd
    kept = kept_each_iteration(ctx.case, evd, ctx.judgement)
    if not kept.any() or iterations_spanned(evd, kept, ctx.case.requests) < 2:
        return None
    eval_loop = not (evd.phase == evidence.BACKWARD).any() or evd.n_iterations == 0
    return _Kept(kept, eval_loop)


def _kept_freed_run(ctx: Context, k: _Kept) -> tuple[Run, bool]:
    """The run keeping nothing across iterations (an evaluation loop's graphs freed too,
    where it has any), and whether they were."""
    freed = changes.kept_freed(ctx.case, ctx.evd, k.kept)
    # An evaluation loop is told to run under no_grad too: its prediction is of both
    # (the graphs the kept outputs held go as a no_grad forward frees them).
    graphs = changes.graphs_freed(freed) if k.eval_loop else None
    return run_edited(graphs or freed, ctx.case, ctx.limit), graphs is not None


def _kept_simulations(ctx: Context, k: _Kept) -> Simulations:
    return {"run": lambda: _kept_freed_run(ctx, k)}


def _kept_build(ctx: Context, k: _Kept, ran: Mapping[str, Any]) -> list[Remedy]:
    kept_run, graphs_freed = ran["run"]
    kept = k.kept
    per = int(ctx.case.requests.size[kept].sum())
    r = simulated(
        ctx,
        FREE_KEPT,
        kept_run,
        change=EVAL_CHANGE if k.eval_loop else None,
        where=most_common_user_frame(ctx.snap, ctx.evd.site[kept]),
        detail=f"{plural(int(kept.sum()), 'allocation')} ({fb(per)}) kept to the end, made again "
        "and again at the same line; re-simulated with what the program's own line made "
        "to keep not made, and the rest freed at the end of its iteration"
        + (
            "; and with the graphs freed as a no_grad forward frees them"
            if graphs_freed
            else "; without no_grad the graph is still saved in each step, so no_grad "
            "saves more than this"
            if k.eval_loop
            else ""
        ),
        acts_on=kept,
    )
    return [r] if r.saving_bytes > 0 else []


FREE_KEPT = RemedySpec(
    id="free_kept",
    title="Free what is kept every iteration",
    change="do not keep tensors across iterations: `del` them, or keep `.item()` / `.detach()`",
    method=SIMULATED,
    applies=_kept_applies,
    simulations=_kept_simulations,
    build=_kept_build,
)


def _no_grad_run(ctx: Context) -> tuple[str | None, str, np.ndarray, Run] | None:
    """(where, detail, allocations, run) of the no-grad remedy; None: none."""
    ng = no_grad.plan(ctx.case, ctx.evd)
    if ng is None:
        return None
    return ng.where, ng.detail, ng.allocations, run_edited(ng.case, ctx.case, ctx.limit)


def _no_grad_build(ctx: Context, prep: bool, ran: Mapping[str, Any]) -> list[Remedy]:
    if ran["run"] is None:
        return []
    where, detail, allocations, run = ran["run"]
    r = simulated(ctx, NO_GRAD_FORWARD, run, where=where, detail=detail, acts_on=allocations)
    return [r] if r.saving_bytes > 0 else []


NO_GRAD_FORWARD = RemedySpec(
    id="no_grad_forward",
    title=no_grad.TITLE,
    change=no_grad.CHANGE,
    method=SIMULATED,
    # Whether a forward's graph goes unused is found where its run is made (a pool task).
    applies=lambda ctx: True,
    simulations=lambda ctx, prep: {"run": lambda: _no_grad_run(ctx)},
    build=_no_grad_build,
)
