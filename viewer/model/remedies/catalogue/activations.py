"""The activations' memory (estimated: the change alters what the recording cannot
show), each bounded by runs of edited streams (:mod:`..changes`), so the range is in
reserved bytes, segment caching included:

* ``gradient_checkpointing``: the repeated blocks' saved activations removed but one
  block's (recomputed one at a time), and besides keeping each block's largest saved
  tensor (the block input a checkpoint keeps is at most that large); the point is the
  middle; the range's floor saves no block's activations at all (the recomputed block
  may come after the head's peak), its top adds one block's bytes made again in
  backward where the cache may have no room;
* ``bf16_autocast``: activations and temporaries of autocast's bf16 ops halved, of its
  fp32 ops kept, the rest at three quarters, plus bf16 weight copies; the range goes
  from every activation halved to nothing saved but the copies added.

After an OOM (the run cut at it) both are estimated from the split at the OOM, as
the 8-bit optimizer is (``split_after_oom``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...categories.sharded import world_size
from ...core.units import format_bytes as fb
from ...core.units import plural
from ...whatif import Case
from ...whatif import requests as rq
from .. import changes, evidence, scaling, seq_scale
from ..remedy import ESTIMATED, Remedy
from ..split import parameters
from .context import Context, peak_of
from .spec import RemedySpec, Simulations, estimated


def _repeated_sites(evd: evidence.Evidence, mask: np.ndarray) -> bool:
    """Two or more allocations of ``mask`` share one call stack: the same code ran more
    than once (the repeated blocks of a model, whose saved activations checkpointing
    recomputes)."""
    sites = evd.site[mask]
    sites = sites[sites >= 0]
    return bool(len(sites)) and int(np.unique(sites, return_counts=True)[1].max()) >= 2


def _checkpoint_applies(ctx: Context) -> changes.Blocks | None:
    """The repeated blocks whose saved activations are live at the split's instant;
    None where the program checkpoints already (its forward ran under
    ``torch.utils.checkpoint``): what is saved then is the blocks' inputs, which
    checkpointing them again would not remove."""
    if ctx.split["activations"] <= 0:
        return None
    if evidence.uses_checkpoint(ctx.snap):
        return None
    reqs, at = ctx.case.requests, ctx.at
    # Made up to the instant and freed after it.
    upto = max(min(at + 1, ctx.n), 0)
    live = np.zeros(ctx.n, bool)
    live[:upto] = (
        ctx.activations[:upto] & (reqs.kind[:upto] == rq.ALLOC) & (ctx.evd.free_at[:upto] > at)
    )
    if not _repeated_sites(ctx.evd, live):
        return None
    return changes.repeated_blocks(ctx.case, ctx.evd, ctx.judgement)


def _checkpoint_simulations(ctx: Context, blocks: changes.Blocks) -> Simulations:
    # The point's two runs and the range's floor are three runs: a pool runs them side
    # by side.
    def run(keep_largest: bool, keep_last: bool = True) -> Callable[[], int]:
        return lambda: peak_of(
            changes.checkpoint_case(ctx.case, blocks, keep_largest, keep_last), ctx.limit
        )

    return {"low": run(False), "high": run(True), "floor": run(False, keep_last=False)}


def _checkpoint_build(ctx: Context, blocks: changes.Blocks, ran: Mapping[str, Any]) -> list[Remedy]:
    peak, act = ctx.peak, ctx.split["activations"]
    if ctx.cut:
        return [
            estimated(
                ctx,
                GRADIENT_CHECKPOINTING,
                peak - act // 2,
                peak - act * 2 // 3,
                peak - act // 2,
                where=ctx.activations_where,
                detail=f"estimated: half (up to two thirds) of the {fb(act)} of activations "
                f"live {ctx.moment} (a checkpointed block keeps its input and recomputes the "
                "rest)",
                acts_on=ctx.activations,
                from_split=True,
                point_floored=False,
            )
        ]
    a, b = ran["low"], ran["high"]
    # The floor: no block saves anything in forward.  Keeping the last block's (the
    # lower run) counts it beside the head's tensors and the loss, where a checkpointed
    # run has only the blocks' inputs: it recomputes that block in backward, after the
    # head's backward may have freed them.  The floor's run can land a little above the
    # others where the cache splits differently: the lowest of the three.
    return [
        estimated(
            ctx,
            GRADIENT_CHECKPOINTING,
            (a + b) // 2,
            min(a, b, ran["floor"]),
            max(a, b) + blocks.block_bytes,
            where=ctx.activations_where,
            detail=f"estimated: {plural(blocks.n_blocks, 'repeated block')}; re-simulated "
            "without their saved activations but one block's (recomputed one at a time in "
            "backward), and keeping besides each block's largest saved tensor (a checkpoint "
            "keeps the block's input, at most that large): the estimate is the middle of both "
            "runs; the range goes down to a run with no block's saved activations at all (a "
            "checkpointed forward saves none; the block recomputed first in backward may "
            "come after the head's peak), and adds to the higher run one block's "
            f"{fb(blocks.block_bytes)}, made again in backward where the cache may have no "
            "room for them",
            acts_on=blocks.saved,
            from_split=False,
            point_floored=False,
        )
    ]


GRADIENT_CHECKPOINTING = RemedySpec(
    id="gradient_checkpointing",
    title="Gradient checkpointing of the repeated blocks",
    change="checkpoint the repeated blocks: `torch.utils.checkpoint.checkpoint(block, x, "
    "use_reentrant=False)` (HF: `model.gradient_checkpointing_enable()`)",
    method=ESTIMATED,
    applies=_checkpoint_applies,
    simulations=_checkpoint_simulations,
    build=_checkpoint_build,
    split_after_oom=True,
)


def _sharded_in_full_precision(case: Case, evd: evidence.Evidence) -> bool:
    """Sharded training (FSDP) gathers each block's parameters from every rank, in bf16 /
    fp16 under a mixed-precision policy: a gathered tensor is ``world`` times a shard kept
    to the end (padded to a multiple of the ranks) in full precision, half that when
    gathered in half precision.  Whichever most gathered allocations of a forward match
    decides (FSDP1 also makes full-precision buffers once, lazily, in the first forward).
    Without the number of ranks (the capture's sidecar) it cannot be told: False."""
    world = world_size(case.snap.sidecar)
    if world is None or evd.category_reasons is None:
        return False
    reqs = case.requests
    alloc = reqs.kind == rq.ALLOC
    gathered = reqs.size[
        alloc & evd.category_in("parameter_gathered") & (evd.phase == evidence.FORWARD)
    ]
    unsharded = (
        np.unique(reqs.size[alloc & evd.reason_in("param_shard") & (evd.free_at >= len(reqs))])
        * world
    )
    if not len(gathered) or not len(unsharded):
        return False

    def matches(size: np.ndarray) -> np.ndarray:
        # A shard times the ranks is the unsharded tensor plus its padding (fewer than
        # ``world`` elements of at most 8 bytes).
        pos = np.minimum(np.searchsorted(unsharded, size), len(unsharded) - 1)
        return (unsharded[pos] >= size) & (unsharded[pos] - size < world * 8)

    return int(matches(gathered).sum()) > int(matches(gathered * 2).sum())


def autocast_seen(case: Case, evd: evidence.Evidence, j: scaling.Judgement) -> bool:
    """The recording already runs under autocast: its forward passes make half-size copies
    of the weights (bf16 / fp16 casts of fp32 parameters) - of at least half the distinct
    parameter sizes, so that activations that happen to have such a size do not count.
    Only trained parameters (those with a gradient of their size) are judged where there
    are any: a frozen base already in half precision (LoRA on a bf16 model) is used as it
    is and makes no copies, only its fp32 adapters do.  Trained parameters are few and
    small (adapters), so a size counts as copied only with at least one half-size forward
    allocation per parameter of that size (one copy each per forward), and the copied
    sizes must hold at least half the trained bytes (norm weights autocast does not copy
    are a small part; an activation that happens to have half an adapter's size is not
    evidence).  Without categories: many forward allocations of a model-state tensor's
    size."""
    reqs = case.requests
    alloc = reqs.kind == rq.ALLOC
    if evd.categories is not None and evd.category_in("parameter_gathered").any():
        return not _sharded_in_full_precision(case, evd)
    if evd.categories is not None:
        params = alloc & evd.category_in("parameter")
        fwd = reqs.size[alloc & (evd.phase == evidence.FORWARD) & ~params]
        sizes, count = np.unique(reqs.size[params], return_counts=True)
        trained = np.isin(sizes, reqs.size[alloc & evd.category_in("gradient")])
        if trained.any():
            sizes, count = sizes[trained], count[trained]
            even = sizes % 2 == 0
            halves, copies = np.unique(fwd, return_counts=True)
            got = np.zeros(len(sizes), np.int64)
            if len(halves):
                pos = np.minimum(np.searchsorted(halves, sizes // 2), len(halves) - 1)
                got = np.where(halves[pos] == sizes // 2, copies[pos], 0)
            copied = even & (got >= count)
            total = int((sizes * count)[even].sum())
            return total > 0 and 2 * int((sizes * count)[copied].sum()) >= total
        halves = sizes[sizes % 2 == 0] // 2
        if len(halves) >= 2:
            return int(np.isin(halves, fwd).sum()) >= len(halves) / 2
    return int((j.rule == scaling.STATE_SIZE)[evd.phase == evidence.FORWARD].sum()) > 8


#: A parameter size counts as a layer's when at least this many parameters have it (the
#: repeated blocks' weights and norms), not a size one odd layer happens to have.
_REPEATED = 4
_MIN_WIDTH = 16


def weights_in_half_precision(case: Case, evd: evidence.Evidence) -> bool:
    """The model's weights are bf16 / fp16 (what autocast would run the forward in):
    told from the sizes alone by a width ``d`` that both a vector (a norm's weight, a
    bias) and a square ``d x d`` matrix (an attention projection) have.  Their bytes,
    ``d*e`` and ``d*d*e``, give the element size ``e = (d*e)**2 / (d*d*e)``: 2 in half
    precision, 4 in fp32.  Only sizes of the repeated blocks count, and the answer is
    half precision only where more widths say 2 than 4.  Only attention models (their
    frames name an attention function) are judged: a square matrix of a vector's width is
    an attention projection there, while convolutions' channel doublings and
    squeeze-excitation layers match either reading.  Sharded training is not judged: a
    rank holds shards (half a square fp32 matrix on two ranks has a bf16 one's bytes)."""
    if evd.categories is None or not seq_scale.names_attention(case.snap):
        return False
    if evd.category_in("parameter_gathered").any():
        return False  # sharded: a rank's parameters are shards, not the weights' sizes
    reqs = case.requests
    params = reqs.size[(reqs.kind == rq.ALLOC) & evd.category_in("parameter")].astype(np.int64)
    sizes, counts = np.unique(params, return_counts=True)
    repeated = sizes[counts >= _REPEATED]

    def widths(element: int) -> int:
        vec = repeated[repeated % element == 0]
        d = vec // element
        d = d[d >= _MIN_WIDTH]  # a scalar's bytes are its own "square"
        return int(np.isin(d * d * element, repeated).sum())

    return widths(2) > widths(4)


def _autocast_applies(ctx: Context) -> bool | None:
    """Activations live at the split's instant, in a run not under autocast already and
    whose weights are not in half precision already (autocast would change nothing)."""
    if ctx.split["activations"] <= 0 or autocast_seen(ctx.case, ctx.evd, ctx.judgement):
        return None
    return None if weights_in_half_precision(ctx.case, ctx.evd) else True


def _autocast_peaks(ctx: Context) -> tuple[int, int, np.ndarray]:
    """(point, low, data): the peaks of :func:`..changes.autocast_cases`' runs."""
    low, point, data = changes.autocast_cases(ctx.case, ctx.evd, ctx.judgement)
    return peak_of(point, ctx.limit), peak_of(low, ctx.limit), data


def _autocast_simulations(ctx: Context, prep: bool) -> Simulations:
    return {"peaks": lambda: _autocast_peaks(ctx)}


def _autocast_build(ctx: Context, prep: bool, ran: Mapping[str, Any]) -> list[Remedy]:
    reqs, peak, act = ctx.case.requests, ctx.peak, ctx.split["activations"]
    # bf16 copies of the weights, cached for the forward and saved for backward.
    copies = int(reqs.size[(reqs.kind == rq.ALLOC) & parameters(ctx.evd, ctx.judgement)].sum()) // 2
    high = peak + copies
    if ctx.cut:  # from the split at the OOM: a quarter of the activations, up to half
        return [
            estimated(
                ctx,
                BF16_AUTOCAST,
                peak - act // 4 + copies,
                peak - act // 2,
                high,
                where=ctx.activations_where,
                detail=f"estimated: a quarter of the {fb(act)} of activations "
                f"live {ctx.moment} (autocast runs norms, softmax and the loss in fp32), "
                f"plus {fb(copies)} of bf16 weight copies; the range goes from half of them "
                "to nothing saved but the copies added",
                acts_on=ctx.activations,
                from_split=True,
                point_floored=False,
            )
        ]
    point_peak, low_peak, data = ran["peaks"]
    return [
        estimated(
            ctx,
            BF16_AUTOCAST,
            min(point_peak + copies, high),
            low_peak,
            high,
            where=ctx.activations_where,
            detail="estimated: re-simulated with the activations of the ops autocast runs in "
            "bf16 (convolutions, linear layers, matmuls, attention) halved, of its fp32 "
            "ops (norms, softmax, losses) kept, the rest at three quarters, plus "
            f"{fb(copies)} of bf16 weight copies; the range goes from every activation "
            "halved to nothing saved but the copies added",
            acts_on=data,
            from_split=False,
            point_floored=False,
        )
    ]


BF16_AUTOCAST = RemedySpec(
    id="bf16_autocast",
    title="bf16 mixed precision (autocast)",
    change="run forward and loss under `with torch.autocast('cuda', dtype=torch.bfloat16):`",
    method=ESTIMATED,
    applies=_autocast_applies,
    simulations=_autocast_simulations,
    build=_autocast_build,
    split_after_oom=True,
)
