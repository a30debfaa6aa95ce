"""What else holds the GPU (not simulated: the program's own peak is unchanged; it fits
because the memory the allocator can have rises; these lead the list where they apply):

* ``free_gpu``: free or move the other processes named on the device (pid, command
  line, bytes), or the memory this process holds outside the allocator;
* ``empty_cache``: after an OOM outside the allocator, return the allocator's wholly
  free segments to the GPU when they are more than it had free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...analysis.gpu_accounting import GpuAccounting, GpuHolder, gpu_accounting
from ...analysis.oom import releasable_bytes
from ...core.units import format_bytes as fb
from ...whatif import Case
from ..remedy import GPU_FREED, Remedy
from .context import Context
from .spec import RemedySpec

NOT_SIMULATED = "not simulated: the program's own peak reserved is unchanged"
OUTSIDE_NEED = (
    "the library's allocation failed outside PyTorch's allocator, whose need "
    "the recording does not hold"
)


def _limit_rises(
    ctx: Context,
    spec: RemedySpec,
    title: str,
    change: str,
    fits: bool | None,
    why: str,
    limit: int | None,
) -> Remedy:
    """A remedy of what else holds the GPU: the program's peak, unchanged, saves nothing;
    ``fits`` under ``limit``, the memory the allocator could have had with the change."""
    return Remedy(
        remedy=spec.id,
        title=title,
        predicted_peak_reserved_bytes=ctx.peak,
        saving_bytes=0,
        method=GPU_FREED,
        change=change,
        where=None,
        fits=fits,
        detail=f"{NOT_SIMULATED}; {why}",
        limit_with_change_bytes=limit,
    )


def _outside_accounting(case: Case) -> GpuAccounting | None:
    acc = gpu_accounting(case.snap)
    return acc if acc.known else None


def _other_device_words(od: dict | None) -> tuple[str, str]:
    """(where else to run, the title's ``, or pick a freer device``) from the freest other
    device, said as the verdict says it (where every device was listed)."""
    move = (
        f"or run on another device: {od['words']}"
        if od is not None and od["fits"]
        else f"{od['words']}"
        if od is not None
        else "or run on a device with room: `CUDA_VISIBLE_DEVICES=N` (`nvidia-smi` lists "
        "each device's free memory)"
    )
    pick = ", or pick a freer device" if od is None or od["fits"] else ""
    return move, pick


def _free_the_gpu(ctx: Context, prep: bool, ran: Mapping[str, Any]) -> list[Remedy]:
    """Free or move what else held the GPU: the other processes named (pid, command line,
    bytes), another device, ``CUDA_VISIBLE_DEVICES``.  It fits when the program's peak is
    under what the allocator could have had with them gone."""
    case, peak, held, outside = ctx.case, ctx.peak, ctx.held_by_others, ctx.outside
    limit: int | None
    od: dict | None  # the freest other device, where every device was listed
    if held is not None and held.gpu_shortfall is not None:
        short = held.gpu_shortfall
        od = held.other_device
        holders = short["holders"]
        freed, limit = short["freed_bytes"], short["could_have_bytes"] + short["freed_bytes"]
    elif outside is not None and outside.device_free_bytes is not None:
        acc = _outside_accounting(case)
        holders = [h.to_dict() for h in acc.holders_by_size()] if acc is not None else []
        freed = sum(h["used_bytes"] for h in holders)
        od = outside.other_device
        if not holders or freed <= outside.device_free_bytes:
            return []  # the others held less than was left: not what ran out
        limit = None  # the library's need is not recorded: whether it fits is not known
    else:
        return []
    dev = f"device {case.device}"
    move, pick = _other_device_words(od)
    if holders:
        named = [GpuHolder(**h).label() for h in holders[:3]]
        if len(holders) == 1:
            who = f"{named[0]}, which holds {fb(freed)} of {dev}"
        else:
            more = f" and {len(holders) - 3} more" if len(holders) > 3 else ""
            who = (
                ", ".join(f"{n} ({fb(h['used_bytes'])})" for n, h in zip(named, holders))
                + f"{more}, which hold {fb(freed)} of {dev}"
            )
        title = f"Free or move the other process{'es' if len(holders) > 1 else ''} on {dev}{pick}"
        change = f"stop or move {who}; {move}"
    else:
        title = "Free the memory this process holds outside the allocator"
        change = (
            f"{fb(freed)} of {dev} is held outside PyTorch's allocator by this process "
            "(CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers, other libraries): "
            "free what it no longer needs"
            + (
                f"; {move}"
                if od is not None
                else ", or run on a device with more room (`CUDA_VISIBLE_DEVICES=N`)"
            )
        )
    fits = peak <= limit if limit is not None else None
    why = (
        f"the allocator could have had {fb(limit)} with that memory free, "
        f"{'above' if fits else 'still below'} the {fb(peak)} the run needs"
        if limit is not None
        else OUTSIDE_NEED
    )
    return [_limit_rises(ctx, FREE_GPU, title, change, fits, why, limit)]


FREE_GPU = RemedySpec(
    id="free_gpu",
    title="Free or move the other processes on the device",
    change="stop or move them, or run on another device",
    method=GPU_FREED,
    applies=lambda ctx: True,
    build=_free_the_gpu,
)


def _return_the_cache(ctx: Context, prep: bool, ran: Mapping[str, Any]) -> list[Remedy]:
    """After an OOM outside the allocator: the allocator's wholly free segments, handed
    back by ``torch.cuda.empty_cache()``, when they are more than the GPU had free (a
    library's handle or workspace then finds room).  Its fit is not known."""
    outside = ctx.outside
    if outside is None or outside.device_free_bytes is None:
        return []
    whole = releasable_bytes(ctx.snap, ctx.case.device)
    if whole <= outside.device_free_bytes:
        return []
    where = f"  [{outside.where}]" if outside.where else ""
    change = (
        f"{EMPTY_CACHE.change}{where}: "
        f"{fb(whole)} of wholly free segments go back to the GPU, where "
        f"{outside.library} can allocate (the GPU had {fb(outside.device_free_bytes)} free)"
    )
    return [_limit_rises(ctx, EMPTY_CACHE, EMPTY_CACHE.title, change, None, OUTSIDE_NEED, None)]


EMPTY_CACHE = RemedySpec(
    id="empty_cache",
    title="Return the allocator's free segments to the GPU (empty_cache)",
    change="call `torch.cuda.empty_cache()` before the call that failed",
    method=GPU_FREED,
    applies=lambda ctx: True,
    build=_return_the_cache,
)
