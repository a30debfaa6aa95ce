"""The recorded request stream edited as a remedy changes the program, for the remedy
catalogue (:mod:`.catalogue`) to simulate: what is kept, the optimizer's state, the
precision of activations, checkpointed blocks.

Each edit gives one stream, or two that bound what the change can do where the
recording cannot tell exactly (an 8-bit optimizer's own temporaries, which ops
autocast runs in bf16, which tensor a checkpoint keeps per block).  The allocator
model runs each one, so segment caching and rounding are in the answer: the real
reserved peak moves by other amounts than the bytes removed (a freed block stays
cached, a smaller one may fit a segment already there).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..core.members import one_of
from ..whatif import Case
from ..whatif import requests as rq
from . import edit, evidence, no_grad, scaling


def _alloc(case: Case) -> np.ndarray:
    return case.requests.kind == rq.ALLOC


def with_sizes(case: Case, mask: np.ndarray, factor: Fraction) -> Case:
    """``case`` with the allocations of ``mask`` asking ``factor`` times their bytes
    (rounded up to the allocator's 512 B; at least 512 B)."""
    sizes = case.requests.size.copy()
    m = mask & _alloc(case)
    new = -((-sizes[m] * factor.numerator) // factor.denominator)
    sizes[m] = np.maximum(-(-new // 512) * 512, 512)
    return case.with_requests(dataclasses.replace(case.requests, size=sizes.astype(np.int64)))


def _gone_rows(case: Case, drop: np.ndarray) -> np.ndarray:
    """Rows :func:`.edit.without` removes for ``drop``: the allocations and their frees."""
    reqs = case.requests
    drop = drop & _alloc(case)
    gone = drop.copy()
    freeing = (
        (reqs.kind == rq.FREE) | (reqs.kind == rq.FREE_REQ) | (reqs.kind == rq.FREE_DONE)
    ) & (reqs.ref >= 0)
    gone[freeing] = drop[reqs.ref[freeing]]
    return gone


# -- what is kept every iteration ------------------------------------------------------


def iteration_starts(case: Case, evd: evidence.Evidence) -> np.ndarray:
    """Request index where each iteration begins: from the optimizer steps, else (an
    evaluation loop) each allocation at the line of the window's first forward
    allocation (each iteration begins with its batch).  Empty: not known."""
    if evd.n_iterations and len(evd.iteration_starts) >= 2:
        return np.asarray(evd.iteration_starts, np.int64)
    fw = np.flatnonzero(_alloc(case) & (evd.phase == evidence.FORWARD) & (evd.site >= 0))
    if not len(fw):
        return np.zeros(0, np.int64)
    starts = fw[evd.site[fw] == evd.site[fw[0]]]
    return starts if len(starts) >= 2 else np.zeros(0, np.int64)


def kept_freed(case: Case, evd: evidence.Evidence, kept: np.ndarray) -> Case:
    """``case`` as the program that keeps nothing across iterations:

    * what the program's own line makes only to keep it (``x.detach().clone()``,
      the innermost frame the program's code) is not made at all;
    * the rest (outputs the model made, and the graphs they hold) is freed when its
      iteration ends, as a loop that keeps ``.item()`` drops them; with no iteration
      known, right after the next allocation from its call site (the last stays).
    """
    reqs = case.requests
    n = len(reqs)
    clones = kept & evd.user_line
    out_rows = np.flatnonzero(kept & ~clones)
    starts = iteration_starts(case, evd)
    frees: list[tuple[int, int]] = []
    if len(starts):
        nxt = np.searchsorted(starts, out_rows, side="right")
        ends = np.where(nxt < len(starts), starts[np.minimum(nxt, len(starts) - 1)] - 1, n - 1)
        frees = [(a, k) for a, k in zip(out_rows.tolist(), ends.tolist()) if k > a]
    else:
        last_of: dict[int, int] = {}
        for i in out_rows.tolist():
            s_ = int(evd.site[i])
            if s_ in last_of:
                frees.append((last_of[s_], i))
            last_of[s_] = i
    if clones.any():
        # Rows shift when the clones and their frees go: renumber the frees' rows.
        gone = _gone_rows(case, clones)
        new_index = np.cumsum(~gone) - 1
        frees = [
            (int(new_index[a]), int(new_index[k])) for a, k in frees if not gone[a] and not gone[k]
        ]
        case = edit.without(case, clones)
    return edit.freed_after(case, frees)


def graphs_freed(case: Case) -> Case | None:
    """``case`` with the graphs its forwards dropped without a backward freed as a
    ``no_grad`` forward frees them (:mod:`.no_grad`); None: no such forward."""
    got = no_grad.plan(case, evidence.gather(case, categories=None))
    return got.case if got is not None else None


# -- optimizer state -------------------------------------------------------------------


def optimizer_step_temporaries(case: Case, evd: evidence.Evidence, state: np.ndarray) -> np.ndarray:
    """Allocations the optimizer step makes and frees in it (foreach intermediates):
    another optimizer makes others."""
    return _alloc(case) & (evd.phase == evidence.OPTIMIZER) & ~state & (evd.free_at < len(evd))


def optimizer_cases(case: Case, evd: evidence.Evidence, state: np.ndarray) -> tuple[Case, Case]:
    """(8-bit, none): the stream with the optimizer state's allocations at a quarter of
    their bytes (two fp32 moments become two 8-bit ones; the per-block scales are
    under 2 % more), and with no state and none of the step's temporaries (SGD
    without momentum updates in place)."""
    eight = with_sizes(case, state, Fraction(1, 4))
    none = edit.without(case, state | optimizer_step_temporaries(case, evd, state))
    return eight, none


# -- autocast --------------------------------------------------------------------------

# Innermost torch functions whose outputs autocast makes bf16 (its lower-precision list:
# convolutions, linear layers, matmuls, attention) ...
_LOW_PRECISION = {
    "_conv_forward",
    "conv1d",
    "conv2d",
    "conv3d",
    "linear",
    "matmul",
    "bmm",
    "scaled_dot_product_attention",
    "multi_head_attention_forward",
}
# ... and those it runs in fp32 (its fp32 list: norms, softmax, losses).
_FP32 = {
    "layer_norm",
    "group_norm",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "normalize",
    "rms_norm",
}


def _op_of(snap, stack: int) -> str | None:
    """The innermost Python function of ``stack`` in torch (``linear.py``'s ``forward``
    is ``linear``; None: no torch frame innermost)."""
    if stack < 0:
        return None
    for f in snap.stacks.frame_ids(stack).tolist():
        fn = snap.frames.filename_of(f).replace("\\", "/")
        if not fn.endswith(".py"):
            continue
        if "/torch/" not in fn:
            return None
        name = snap.frames.name_of(f)
        if name == "forward" and fn.endswith("/modules/linear.py"):
            return "linear"
        return name
    return None


def data_allocations(case: Case, evd: evidence.Evidence, j: scaling.Judgement) -> np.ndarray:
    """Allocations made from the batch's data (activations, temporaries, gradients of
    activations): what autocast makes in bf16 where it can.  Model state stays fp32."""
    if evd.categories is not None:
        return _alloc(case) & evd.category_in("activation", "temporary")
    return _alloc(case) & j.scales & one_of(evd.phase, (evidence.FORWARD, evidence.BACKWARD))


def autocast_cases(
    case: Case, evd: evidence.Evidence, j: scaling.Judgement
) -> tuple[Case, Case, np.ndarray]:
    """(low, point, data): the stream with every data allocation at half its bytes (all
    in bf16: the most autocast can save), and with those of autocast's bf16 ops halved,
    those of its fp32 ops kept and the rest (ops that follow their inputs' dtype, the
    backward pass) at three quarters (half their inputs bf16)."""
    data = data_allocations(case, evd, j)
    snap = case.snap
    rows = np.flatnonzero(data)
    uniq, inv = np.unique(evd.site[rows], return_inverse=True)
    ops = [_op_of(snap, int(s_)) for s_ in uniq.tolist()]
    low_p = np.zeros(len(evd), bool)
    fp32 = np.zeros(len(evd), bool)
    low_p[rows] = np.array([o in _LOW_PRECISION for o in ops], bool)[inv] if ops else False
    fp32[rows] = np.array([o in _FP32 for o in ops], bool)[inv] if ops else False
    low = with_sizes(case, data, Fraction(1, 2))
    point = with_sizes(
        with_sizes(case, low_p, Fraction(1, 2)), data & ~low_p & ~fp32, Fraction(3, 4)
    )
    return low, point, data


# -- gradient checkpointing ------------------------------------------------------------


@dataclass
class Blocks:
    """The saved activations of a model's repeated blocks, per forward."""

    saved: np.ndarray  # bool per request: saved in forward by a repeated block, freed later
    last: np.ndarray  # bool per request: ... by each forward's last block
    largest: np.ndarray  # bool per request: each block's largest saved tensor
    n_blocks: int
    block_bytes: int  # the most one block saves in a forward (requested bytes)


def repeated_blocks(case: Case, evd: evidence.Evidence, j: scaling.Judgement) -> Blocks | None:
    """The forward activations freed in the window (saved for backward) whose call site
    runs the same number of times in every iteration - once per block - grouped into
    blocks by the order of their calls: the k-th call of a site in a forward belongs
    to block ``k * blocks // calls``.  None: no site repeats."""
    reqs = case.requests
    n = len(reqs)
    alloc = _alloc(case)
    act = evd.category_in("activation") if evd.categories is not None else j.scales
    saved = alloc & act & (evd.phase == evidence.FORWARD) & (evd.free_at < n) & (evd.site >= 0)
    rows = np.flatnonzero(saved)
    if not len(rows):
        return None
    key = evd.iteration[rows].astype(np.int64) * (1 << 32) + evd.site[rows].astype(np.int64)
    order = np.lexsort((rows, key))
    ks = key[order]
    start = np.r_[True, ks[1:] != ks[:-1]]
    group = np.cumsum(start) - 1
    calls = np.bincount(group)[group]
    rank = np.arange(len(rows)) - np.flatnonzero(start)[group]
    rep_calls = calls[start][calls[start] >= 2]
    if not len(rep_calls):
        return None
    vals, counts = np.unique(rep_calls, return_counts=True)
    nb = int(vals[np.argmax(counts)])  # blocks: the most common number of calls
    rep = (calls >= 2) & (calls % nb == 0)
    blk = rank * nb // np.maximum(calls, 1)
    r = rows[order]
    out_saved = np.zeros(n, bool)
    out_saved[r[rep]] = True
    last = np.zeros(n, bool)
    last[r[rep & (blk == nb - 1)]] = True
    # Each block (iteration, block) keeps its input: at most its largest saved tensor.
    it = evd.iteration[r].astype(np.int64)
    bkey = it * (nb + 1) + blk
    sizes = reqs.size[r]
    largest = np.zeros(n, bool)
    sel = np.flatnonzero(rep)
    # Blocks are numbered densely (iterations times blocks): per block, a bin.
    per_block: np.ndarray = np.zeros(1)
    if len(sel):
        bins = bkey[sel] - bkey[sel].min()
        top = np.full(int(bins.max()) + 1, -1, np.int64)
        np.maximum.at(top, bins, sizes[sel])
        # The first of each block's largest, in the order of the calls.
        at_top = np.flatnonzero(sizes[sel] == top[bins])
        first = np.full(len(top), len(sel), np.int64)
        np.minimum.at(first, bins[at_top], at_top)
        largest[r[sel[first[first < len(sel)]]]] = True
        per_block = np.bincount(bins, weights=sizes[sel])
    return Blocks(out_saved, last, largest, nb, int(per_block.max()))


def checkpoint_case(
    case: Case, blocks: Blocks, keep_largest: bool = False, keep_last: bool = True
) -> Case:
    """The stream without the repeated blocks' saved activations but the last block's
    (one block is recomputed at a time in backward): the point's lower run; with
    ``keep_largest``, its higher one, keeping each block's largest saved tensor (a
    checkpoint keeps the block's input, at most that large); without ``keep_last``, the
    range's floor: no block's saved activations at all (a checkpointed forward saves none, and
    the block recomputed first in backward may come after the head's peak).  None
    places the recomputed block's tensors where backward makes them again: a cache with
    no room for them there needs up to :attr:`Blocks.block_bytes` more
    (:mod:`.catalogue.activations` adds it to the range's top)."""
    dropped = blocks.saved & ~blocks.last if keep_last else blocks.saved.copy()
    if keep_largest:
        dropped &= ~blocks.largest
    return edit.without(case, dropped)


def backward_bounds(
    evd: evidence.Evidence, starts: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per iteration beginning at request ``starts[k]`` (of ``n``): its backward's first
    and last request, and its end (the next one's start); the first is the end where the
    iteration ran no backward."""
    ends = np.append(starts[1:], n)
    backward = np.flatnonzero(evd.phase == evidence.BACKWARD)
    if not len(backward):
        return ends.copy(), ends.copy(), ends
    first = backward[np.minimum(np.searchsorted(backward, starts), len(backward) - 1)]
    first = np.where((first >= starts) & (first < ends), first, ends)
    last = backward[np.maximum(np.searchsorted(backward, ends) - 1, 0)]
    return first, last, ends


#: Where :func:`gradients_set_to_none` makes a gradient again in a later backward: where
#: the first backward made it, or at the backward's first or last request (the bounds:
#: autograd makes a gradient when its parameter's use is reached, which a recording of
#: gradients zeroed in place shows only for the first iteration).
AS_FIRST, AT_START, AT_END = "as_first", "at_start", "at_end"


def gradients_set_to_none(
    case: Case, evd: evidence.Evidence, grads: np.ndarray, place: str = AS_FIRST
) -> Case | None:
    """``case`` as the program that sets its gradients to None before each forward instead
    of zeroing them in place: each gradient of ``grads`` (allocations kept across
    iterations) is freed when the next iteration begins, and made again in that
    iteration's backward where ``place`` says: by default where the first backward made
    it, after as many of the backward's other requests as came before it there.  None when
    the iterations are not known (nothing to place the frees by)."""
    reqs = case.requests
    n = len(reqs)
    starts = iteration_starts(case, evd)
    rows = np.flatnonzero(grads & (reqs.kind == rq.ALLOC))
    if len(starts) < 2 or not len(rows):
        return None
    first_bwd, last_bwd, ends = backward_bounds(evd, starts, n)
    if not (first_bwd < ends).any():
        return None
    it_of = np.searchsorted(starts, rows, side="right") - 1
    # Requests of the backward before each gradient, the gradients' own allocations left
    # out (the later iterations make none of them).
    is_grad = np.zeros(n + 1, np.int64)
    is_grad[rows + 1] = 1
    grads_before = np.cumsum(is_grad)
    after, kind, size, stream, ref_old, ref_new = [], [], [], [], [], []
    for a, k0 in zip(rows.tolist(), it_of.tolist()):
        if k0 < 0 or first_bwd[k0] > a:
            continue  # made before the iterations or outside a backward: not moved
        offset = (a - first_bwd[k0]) - int(grads_before[a] - grads_before[first_bwd[k0]])
        prev_old, prev_new = a, -1
        for k in range(k0 + 1, len(starts)):
            after.append(int(starts[k]) - 1)  # freed as the iteration begins
            kind.append(rq.FREE)
            size.append(int(reqs.size[a]))
            stream.append(int(reqs.stream[a]))
            ref_old.append(prev_old)
            ref_new.append(prev_new)
            if first_bwd[k] >= ends[k]:
                break  # no backward in it: the gradient stays None
            if place == AT_START:
                at = int(first_bwd[k]) - 1
            elif place == AT_END:
                at = int(last_bwd[k])
            else:
                at = min(int(first_bwd[k]) + offset - 1, int(ends[k]) - 1)
            after.append(at)
            kind.append(rq.ALLOC)
            size.append(int(reqs.size[a]))
            stream.append(int(reqs.stream[a]))
            ref_old.append(-1)
            ref_new.append(-1)
            prev_old, prev_new = -1, len(after) - 1
    if not after:
        return None
    return edit.with_rows(
        case,
        np.array(after, np.int64),
        np.array(kind, np.int8),
        np.array(size, np.int64),
        np.array(stream, np.int64),
        np.array(ref_old, np.int64),
        np.array(ref_new, np.int64),
    )
