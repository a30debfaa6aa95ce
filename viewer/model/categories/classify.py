"""One category and one reason for every allocation (interval) of a device.

Vectorised over the intervals: the phase of the event that made an
allocation, the evidence of its stack, and where its life ends relative to
the phases decide (see :mod:`.reasons` for every rule in words):

- made by a module's ``_apply`` / construction: parameter;
- made in the optimizer step and alive after it: optimizer state; freed in it:
  temporary;
- made in backward and alive after it: gradient; freed in it: temporary;
- made in forward and alive when backward starts: activation; freed before:
  temporary;
- made by the user's code outside the model and alive into the next forward:
  input;
- allocated before recording: sizes decide where they can (one block per
  gradient of the same size is a parameter, further ones optimizer state) -
  marked as guesses; else unknown.
"""

from __future__ import annotations

import numpy as np

from ..timeline import Intervals
from . import stack_kinds as sk
from .iterations import PH_BACKWARD, PH_FORWARD, PH_OPTIMIZER, PH_OTHER, Phases
from .reasons import ACTIVATION, GRADIENT, PARAMETER, REASONS, reason_id

R = reason_id
_REASON_CATEGORY = np.array([r.category for r in REASONS], np.int8)


def _run_ends(phase: np.ndarray) -> np.ndarray:
    """Per event: the exclusive end of the run of equal phases that holds it."""
    n = len(phase)
    if n == 0:
        return np.zeros(0, np.int64)
    change = np.flatnonzero(np.diff(phase)) + 1
    ends = np.append(change, n).astype(np.int64)
    run = np.zeros(n, np.int64)
    run[change] = 1
    np.cumsum(run, out=run)
    return ends[run]


def _next_index(mask: np.ndarray) -> np.ndarray:
    """Per event k: the first j >= k with mask[j] (len(mask) if none)."""
    n = len(mask)
    idx = np.where(mask, np.arange(n, dtype=np.int64), n)
    return np.minimum.accumulate(idx[::-1])[::-1] if n else idx


def classify(iv: Intervals, ph: Phases, n_events: int) -> tuple[np.ndarray, np.ndarray]:
    """(category int8, reason int8) per interval."""
    m = len(iv)
    n = n_events
    reason = np.full(m, -1, np.int16)
    if m == 0:
        return np.zeros(0, np.int8), np.zeros(0, np.int8)
    s = iv.start
    e = iv.end
    made = s >= 0
    s0 = np.maximum(s, 0)
    phase = ph.phase[s0] if n else np.zeros(m, np.int8)
    ev = ph.evidence[s0] if n else np.zeros(m, np.int8)
    guessed = ph.guessed[s0] if n else np.zeros(m, bool)
    kinds_all = ph.stack_kinds
    stack = iv.stack
    kinds = np.where(stack >= 0, kinds_all[np.clip(stack, 0, max(len(kinds_all) - 1, 0))]
                     if len(kinds_all) else 0, 0)
    run_end = _run_ends(ph.phase)[s0] if n else np.zeros(m, np.int64)
    next_b = np.append(_next_index(ph.phase == PH_BACKWARD), n)[s0 + 1] if n else s0
    next_f_event = np.append(_next_index(ph.evidence == sk.EV_FORWARD), n)
    next_f = next_f_event[np.minimum(s0 + 1, n)]

    def put(mask, code):
        sel = mask & (reason < 0)
        reason[sel] = R(code)

    # From before recording, freed in the first backward (a ring buffer that starts
    # inside an iteration): that iteration's activations.
    pre_end = np.minimum(e, max(n - 1, 0))
    put(~made & (e < n) & (ph.phase[pre_end] == PH_BACKWARD if n else False)
        & (ph.iteration[pre_end] <= 0 if n else False), "pre_act_freed_in_backward")
    put(~made, "unknown_pre_recording")
    put((kinds & sk.K_WORKSPACE) != 0, "workspace_cublas")
    other_or_fwd = (phase == PH_OTHER) | (phase == PH_FORWARD)
    param = (ev == sk.EV_PARAM_INIT) & other_or_fwd
    put(param & ((kinds & sk.K_APPLY) != 0), "param_module_apply")
    put(param, "param_module_init")

    opt = phase == PH_OPTIMIZER
    survives = e > run_end
    # Alive at the end of a recording that stops right after a step: kept by the step.
    put(opt & ((kinds & sk.K_OPT_INIT) != 0) & (survives | (e >= n)), "opt_init_group")
    put(opt & (survives | (e >= n)), "opt_survives_step")
    put(opt, "temp_optimizer")

    bwd = phase == PH_BACKWARD
    put(bwd & survives & ((kinds & sk.K_ACCUMULATE_GRAD) != 0), "grad_accumulate")
    put(bwd & survives & guessed, "grad_survives_backward_guess")
    put(bwd & survives, "grad_survives_backward")
    put(bwd, "temp_backward")

    fwd = phase == PH_FORWARD
    has_b = next_b < n
    put(fwd & has_b & (e > next_b) & guessed, "act_saved_guess")
    if ph.iterations:
        it_end = np.array([it.end for it in ph.iterations], np.int64)
        own = ph.iteration[s0]
        kept = fwd & has_b & (e > next_b) & (own >= 0) & (
            e > it_end[np.maximum(own, 0)] + 1)
        put(kept, "act_kept")
    put(fwd & has_b & (e > next_b), "act_saved")
    put(fwd & ~has_b & survives, "act_output_no_backward")
    put(fwd, "temp_forward")

    # Inputs: made outside any pass, alive into the next forward, freed by the end of the
    # iteration after that one (parameters made without a telling stack live on).
    other = phase == PH_OTHER
    iters = ph.iterations
    if iters:
        ends = np.array([it.end for it in iters] + [n], np.int64)
        it_of_f = ph.iteration[np.minimum(next_f, n - 1)] if n else np.zeros(m, np.int32)
        limit = ends[np.minimum(np.maximum(it_of_f, 0) + 1, len(iters))] + 1
    else:
        limit = np.full(m, n + 1, np.int64)
    into_forward = other & (next_f < n) & (e > next_f) & (e <= limit)
    put(into_forward & (ev == sk.EV_USER), "input_user_code")
    put(into_forward & (ev == sk.EV_NONE), "input_lifetime")
    put(other & (e <= run_end), "temp_other")
    if iters:
        first = iters[0].start
        setup = other & (s0 < first) & (e > first)
        put(setup, "unknown_setup")  # refined by sizes below
        put(np.ones(m, bool), "unknown_other")
    else:
        put(np.ones(m, bool), "unknown_no_iterations")

    _refine_by_sizes(iv, reason, ph)
    _workspaces(iv, reason, ph, n)
    reason8 = reason.astype(np.int8)
    return _REASON_CATEGORY[reason8], reason8


def _refine_by_sizes(iv: Intervals, reason: np.ndarray, ph: Phases) -> None:
    """Sizes of gradients name what nothing else can: a module's block without a
    gradient of its size is a buffer; blocks from before recording (or from setup without
    a telling stack) of a gradient's exact size are parameters and optimizer state."""
    cat = _REASON_CATEGORY[reason]
    grads = np.flatnonzero(cat == GRADIENT)
    if not len(grads):
        return
    req = iv.requested
    grad_sizes = np.unique(req[grads])
    params = np.flatnonzero(cat == PARAMETER)
    buffer = params[~np.isin(req[params], grad_sizes)]
    reason[buffer] = R("param_buffer")

    # Gradients per size in one iteration (the most any iteration made).
    if ph.iterations:
        it = ph.iteration[np.maximum(iv.start[grads], 0)].astype(np.int64)
        key = it * (1 << 40) + np.searchsorted(grad_sizes, req[grads])
        uk, counts = np.unique(key, return_counts=True)
        per_size = np.zeros(len(grad_sizes), np.int64)
        np.maximum.at(per_size, uk % (1 << 40), counts)
    else:
        per_size = np.unique(req[grads], return_counts=True)[1]
    first = ph.iterations[0].start if ph.iterations else 0
    unknown_long = np.flatnonzero(
        ((reason == R("unknown_pre_recording")) | (reason == R("unknown_setup")))
        & (iv.end > first))
    if not len(unknown_long):
        return
    sizes = req[unknown_long]
    pos = np.searchsorted(grad_sizes, sizes)
    pos_c = np.minimum(pos, len(grad_sizes) - 1)
    match = grad_sizes[pos_c] == sizes
    cand = unknown_long[match]
    if not len(cand):
        return
    order = np.lexsort((iv.addr[cand], req[cand]))
    cand = cand[order]
    csize = req[cand]
    g = per_size[np.searchsorted(grad_sizes, csize)]
    _, first_of, count = np.unique(csize, return_index=True, return_counts=True)
    rank = np.arange(len(cand)) - np.repeat(first_of, count)
    total = np.repeat(count, count)
    # Per size: one parameter per gradient, then whole multiples of the gradient count
    # (up to 3: Adam's two moments and a master copy) as optimizer state; the rest stays
    # unknown.
    states = np.minimum((np.maximum(total - g, 0) // g) * g, 3 * g)
    pre = iv.start[cand] < 0
    is_param = rank < g
    is_state = ~is_param & (rank < g + states)
    reason[cand[is_param & pre]] = R("pre_param_size_match")
    reason[cand[is_param & ~pre]] = R("param_size_match")
    reason[cand[is_state]] = R("pre_opt_size_match")


# cuBLAS workspace sizes: 4096 KiB x 8 (CUBLAS_WORKSPACE_CONFIG default on sm90+),
# 4096 KiB x 2 + 16 KiB x 8 (older GPUs), 4 MiB, and cuBLASLt's 1 MiB.
WORKSPACE_SIZES = np.array([1 << 20, 4 << 20, (8 << 20) + (128 << 10), 32 << 20], np.int64)


def _workspaces(iv: Intervals, reason: np.ndarray, ph: Phases, n: int) -> None:
    """Without C++ frames a library workspace looks like an activation or a gradient that
    is never freed: made in the first iteration's forward/backward, alive to the end, of
    a workspace's size and of no parameter's (a guess)."""
    if not ph.iterations or n == 0:
        return
    first = ph.iterations[0]
    cat = _REASON_CATEGORY[reason]
    s = iv.start
    cand = np.flatnonzero((s >= first.start) & (s <= first.end) & (iv.end >= n)
                          & np.isin(iv.requested, WORKSPACE_SIZES)
                          & np.isin(cat, (GRADIENT, ACTIVATION)))
    if not len(cand):
        return
    params = iv.requested[cat == PARAMETER]
    cand = cand[~np.isin(iv.requested[cand], params)]
    # One workspace per cuBLAS handle (thread and stream): a few of a size, not hundreds.
    sizes, counts = np.unique(iv.requested[cand], return_counts=True)
    cand = cand[np.isin(iv.requested[cand], sizes[counts <= 4])]
    ph_c = ph.phase[s[cand]]
    cand = cand[(ph_c == PH_FORWARD) | (ph_c == PH_BACKWARD)]
    reason[cand] = R("workspace_guess")
