"""``allocator:SETTINGS``: other ``PYTORCH_CUDA_ALLOC_CONF`` settings (the what-if
standard set), the recorded stream simulated under each; the best few that lower the
peak, or that make a run that ran out of memory fit."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from ...whatif import RECOMMENDED
from ..remedy import SIMULATED, Remedy
from .context import Context, Run, fits
from .spec import RemedySpec, Simulations, simulated

ALLOCATOR_REMEDIES = 2  # how many allocator settings to list (the best that lower the peak)


def _applies(ctx: Context) -> list[str] | None:
    """The standard settings other than the recorded one."""
    case = ctx.case
    confs = [c for c in RECOMMENDED if c and case.config_of(c) != case.recorded]
    return confs or None


def _simulations(ctx: Context, confs: list[str]) -> Simulations:
    return {conf: partial(ctx.case.simulate, conf, ctx.limit) for conf in confs}


def _build(ctx: Context, confs: list[str], ran: Mapping[str, Any]) -> list[Remedy]:
    lim = ctx.limit
    found = [(conf, ran[conf]) for conf in confs]
    found.sort(key=lambda cr: (fits(cr[1], lim) not in (True, None), cr[1].peak_reserved_until_oom))
    out = []
    for conf, res in found[:ALLOCATOR_REMEDIES]:
        run = Run.of(res, ctx.case, lim)
        # A setting that still runs out of memory, or needs as much, is no remedy
        # (`vramscope whatif --recommend` lists them all).
        # On a run that ran out of memory a setting that makes it fit is a remedy even
        # when it needs as much at its peak (fragmentation: the same bytes, placed so
        # that they fit).
        rescues = ctx.cut and run.fits is True
        if run.fits is False or (run.demand >= ctx.peak and not rescues):
            continue
        out.append(
            simulated(
                ctx,
                ALLOCATOR,
                run,
                remedy_id=f"allocator:{conf}",
                title=f"{ALLOCATOR.title} {conf}",
                change=ALLOCATOR.change.format(conf=conf),
                where=None,
                detail=f"{res.n_cuda_malloc} cudaMalloc, fragmentation at the peak "
                f"{res.fragmentation_at_peak:.0%}",
            )
        )
    return out


ALLOCATOR = RemedySpec(
    id="allocator",
    title="Allocator setting",
    change="PYTORCH_CUDA_ALLOC_CONF={conf} (set before the process starts CUDA)",
    method=SIMULATED,
    applies=_applies,
    simulations=_simulations,
    build=_build,
    # The recorded stream at other settings: no stream to build, shorter than the rest.
    edits_stream=False,
)
