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

from ..replay.timeline import Intervals
from . import native_passes as native
from . import stack_kinds as sk
from .iterations import PH_BACKWARD, PH_FORWARD, PH_OPTIMIZER, PH_OTHER, IterationOf, Phases
from .lean import column_at
from .reasons import ACTIVATION, GRADIENT, PARAMETER, REASONS, reason_id

R = reason_id
_REASON_CATEGORY = np.array([r.category for r in REASONS], np.int8)


def _run_ends(phase: np.ndarray) -> np.ndarray:
    """The exclusive ends of the runs of equal phases (found once: a pass over every event)."""
    return np.append(np.flatnonzero(phase[1:] != phase[:-1]) + 1, len(phase))


def _run_end_at(phase: np.ndarray, at: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
    """For events ``at``: the exclusive end of the run of equal phases that holds each
    (``ends``: :func:`_run_ends` of ``phase`` when the caller has it)."""
    n = len(phase)
    if n == 0:
        return np.zeros(len(at), np.int64)
    if ends is None:
        ends = _run_ends(phase)
    return ends[np.searchsorted(ends, at, "right")]


def _next_at(positions: np.ndarray, at: np.ndarray, n: int) -> np.ndarray:
    """For events ``at``: the first of the sorted ``positions`` >= at (``n`` if none)."""
    ext = np.append(positions, n)
    return ext[np.searchsorted(positions, at, "left")]


class _Group:
    """The allocations of one group (a phase, or before recording) and their columns; rules
    are applied in order, each to those no earlier rule decided (work per group, not per
    rule over every allocation)."""

    def __init__(self, ids: np.ndarray, reason: np.ndarray) -> None:
        self.ids = ids
        self.reason = reason
        self.open = np.ones(len(ids), bool)

    def put(self, mask, code: str) -> None:
        sel = self.open & mask if not isinstance(mask, bool) else self.open.copy()
        self.reason[self.ids[sel]] = R(code)
        self.open &= ~sel


def classify(iv: Intervals, ph: Phases, n_events: int) -> tuple[np.ndarray, np.ndarray]:
    """(category int8, reason int8) per interval."""
    m = len(iv)
    n = n_events
    reason = np.full(m, -1, np.int16)
    if m == 0:
        return np.zeros(0, np.int8), np.zeros(0, np.int8)
    s = iv.start
    e = iv.end
    kinds_ext = np.append(ph.stack_kinds, np.int32(0))  # stack -1 -> no kinds
    made = s >= 0
    if n == 0:
        reason[:] = R("unknown_pre_recording")
        reason8 = reason.astype(np.int8)
        return _REASON_CATEGORY[reason8], reason8
    # -- before recording ----------------------------------------------------------------
    g = _Group(np.flatnonzero(~made), reason)
    if len(g.ids):
        k, eg = kinds_ext[iv.stack[g.ids]], e[g.ids]
        # The snapshot kept the stack that made it (the ring buffer wrapped; the blocks
        # remember): the stack decides as for any allocation.
        g.put((k & sk.K_APPLY) != 0, "param_module_apply")
        g.put(
            ((k & sk.K_MODULE_INIT) != 0) & ((k & (sk.K_OPTIM | sk.K_BACKWARD)) == 0),
            "param_module_init",
        )
        g.put(((k & sk.K_OPT_INIT) != 0) & (eg >= n), "opt_init_group")
        # Freed in the first backward (a ring buffer that starts inside an iteration):
        # that iteration's activations.
        end = np.minimum(eg, n - 1)
        g.put(
            (eg < n) & (ph.phase[end] == PH_BACKWARD) & (ph.iteration[end] <= 0),
            "pre_act_freed_in_backward",
        )
        # Freed by zero_grad (annotated, or a free whose stack is in zero_grad): the
        # previous iteration's gradients.
        in_zero = (eg < n) & (ph.evidence[end] == sk.EV_ZERO_GRAD)
        if ph.zero_grad:
            z = np.array(ph.zero_grad, np.int64).reshape(-1, 2)
            j = np.searchsorted(z[:, 0], eg, "right") - 1
            in_zero |= (eg < n) & (j >= 0) & (eg < z[np.maximum(j, 0), 1] + 1)
        g.put(in_zero, "pre_grad_freed_in_zero_grad")
        g.put(True, "unknown_pre_recording")

    if not _window_native(iv, ph, n, reason, kinds_ext):
        _window(iv, ph, n, reason, kinds_ext, made)
    _refine_by_sizes(iv, reason, ph)
    _workspaces(iv, reason, ph, n)
    reason8 = reason.astype(np.int8)
    return _REASON_CATEGORY[reason8], reason8


def _window(
    iv: Intervals, ph: Phases, n: int, reason: np.ndarray, kinds_ext: np.ndarray, made: np.ndarray
) -> None:
    """The reasons of the allocations made in the window (numpy; the reference of
    catcore.classify_window): library workspaces, then per phase they were made in."""
    s = iv.start
    e = iv.end
    phase = np.where(made, ph.phase[np.maximum(s, 0)], np.int8(-1))
    iters = ph.iterations

    # Library workspaces, named by their C++ frames.
    ws = np.flatnonzero(made & ((kinds_ext[iv.stack] & sk.K_WORKSPACE) != 0))
    reason[ws] = R("workspace_cublas")
    decided = reason >= 0

    def group(ph_code: int) -> _Group:
        grp = _Group(np.flatnonzero((phase == ph_code) & ~decided), reason)
        return grp

    runs = ph.phase_runs()
    phase_run_ends = runs.end

    def run_end(ids: np.ndarray) -> np.ndarray:
        return _run_end_at(ph.phase, s[ids], phase_run_ends)

    # -- optimizer step --------------------------------------------------------------------
    g = group(PH_OPTIMIZER)
    if len(g.ids):
        k, eg = kinds_ext[iv.stack[g.ids]], e[g.ids]
        # Alive after the step, or at the end of a recording that stops right after it.
        kept = (eg > run_end(g.ids)) | (eg >= n)
        g.put(((k & sk.K_OPT_INIT) != 0) & kept, "opt_init_group")
        g.put(kept, "opt_survives_step")
        g.put(True, "temp_optimizer")

    # -- backward --------------------------------------------------------------------------
    g = group(PH_BACKWARD)
    if len(g.ids):
        k, eg = kinds_ext[iv.stack[g.ids]], e[g.ids]
        survives = eg > run_end(g.ids)
        if iters:
            # Alive at the end, from an iteration that ended before the recording did: the
            # backward's run may reach the end only through the recording's closing frees
            # (which carry no evidence), yet the pass was over.  Not so inside an iteration
            # the recording stopped in (an OOM in backward): there it may be a temporary.
            it_end = np.array([it.end for it in iters], np.int64)
            own = ph.iteration[s[g.ids]]
            survives |= (eg >= n) & (own >= 0) & (it_end[np.maximum(own, 0)] < n - 1)
        g.put(survives & ((k & sk.K_ACCUMULATE_GRAD) != 0), "grad_accumulate")
        g.put(survives & ph.guessed[s[g.ids]], "grad_survives_backward_guess")
        g.put(survives, "grad_survives_backward")
        g.put(True, "temp_backward")

    # -- forward ---------------------------------------------------------------------------
    b_starts = runs.of(PH_BACKWARD)[0]
    g = group(PH_FORWARD)
    if len(g.ids):
        sg, eg, k = s[g.ids], e[g.ids], kinds_ext[iv.stack[g.ids]]
        _param_rules(g, ph.evidence[sg], k)
        next_b = _next_at(b_starts, sg + 1, n)
        has_b = next_b < n
        saved = has_b & (eg > next_b)
        g.put(saved & ph.guessed[sg], "act_saved_guess")
        if iters:
            it_end = np.array([it.end for it in iters], np.int64)
            own = ph.iteration[sg]
            g.put(saved & (own >= 0) & (eg > it_end[np.maximum(own, 0)] + 1), "act_kept")
        g.put(saved, "act_saved")
        # No backward follows (evaluation, or a forward cut short by an OOM): its output.
        no_b = np.flatnonzero(g.open & ~has_b)
        out = np.zeros(len(g.ids), bool)
        out[no_b] = (eg[no_b] > run_end(g.ids[no_b])) | (eg[no_b] >= n)
        g.put(out, "act_output_no_backward")
        g.put(True, "temp_forward")

    # -- other -------------------------------------------------------------------------------
    g = group(PH_OTHER)
    if len(g.ids):
        sg, eg, k = s[g.ids], e[g.ids], kinds_ext[iv.stack[g.ids]]
        evg = ph.evidence[sg]
        _param_rules(g, evg, k)
        # Inputs: made outside any pass, alive into the next forward, freed by the end of
        # the iteration after that one (parameters made without a telling stack live on).
        if native.available():  # no positions of every forward event
            next_f = native.next_equal(ph.evidence, sk.EV_FORWARD, sg + 1)
        else:
            next_f = _next_at(np.flatnonzero(ph.evidence == sk.EV_FORWARD), sg + 1, n)
        if iters:
            ends = np.array([it.end for it in iters] + [n], np.int64)
            it_of_f = ph.iteration[np.minimum(next_f, n - 1)]
            limit = ends[np.minimum(np.maximum(it_of_f, 0) + 1, len(iters))] + 1
        else:
            limit = np.full(len(sg), n + 1, np.int64)
        into = (next_f < n) & (eg > next_f) & (eg <= limit)
        g.put(into & (evg == sk.EV_USER), "input_user_code")
        g.put(into & (evg == sk.EV_NONE), "input_lifetime")
        g.put(eg <= run_end(g.ids), "temp_other")
        if iters:
            first = iters[0].start
            g.put((sg < first) & (eg > first), "unknown_setup")  # refined by sizes below
            g.put(True, "unknown_other")
        else:
            g.put(True, "unknown_no_iterations")


# The rules of catcore.classify_window, in the order of its R_* ids.
WINDOW_REASONS = (
    "workspace_cublas",
    "opt_init_group",
    "opt_survives_step",
    "temp_optimizer",
    "grad_accumulate",
    "grad_survives_backward_guess",
    "grad_survives_backward",
    "temp_backward",
    "param_module_apply",
    "param_module_init",
    "act_saved_guess",
    "act_kept",
    "act_saved",
    "act_output_no_backward",
    "temp_forward",
    "input_user_code",
    "input_lifetime",
    "temp_other",
    "unknown_setup",
    "unknown_other",
    "unknown_no_iterations",
)


def _window_native(
    iv: Intervals, ph: Phases, n: int, reason: np.ndarray, kinds_ext: np.ndarray
) -> bool:
    """:func:`_window` in one C pass over the allocations (no per-allocation masks, index
    arrays or gathers); False where it does not apply (not built, allocations not in event
    order, phases without their runs' iteration spans) and nothing was written."""
    if not native.available() or not isinstance(ph.iteration, IterationOf):
        return False
    runs = ph.phase_runs()
    it = ph.iteration
    return native.classify_window(
        iv.start,
        iv.end,
        iv.stack,
        kinds_ext,
        ph.phase,
        ph.evidence,
        ph.guessed,
        runs.end,
        runs.of(PH_BACKWARD)[0],
        it.lo,
        np.array([x.end for x in ph.iterations], np.int64),
        np.array([R(c) for c in WINDOW_REASONS], np.int16),
        reason,
        (n, it.end, sk.K_WORKSPACE, sk.K_OPT_INIT, sk.K_ACCUMULATE_GRAD, sk.K_APPLY),
    )


def _param_rules(g: _Group, ev: np.ndarray, kinds: np.ndarray) -> None:
    """Made by a module's ``_apply`` (``.to()``/``.cuda()``) or its construction."""
    param = ev == sk.EV_PARAM_INIT
    g.put(param & ((kinds & sk.K_APPLY) != 0), "param_module_apply")
    g.put(param, "param_module_init")


# Per-(iteration, gradient size) counts in one dense bincount up to this many cells.
_DENSE_COUNTS = 1 << 22


def _refine_by_sizes(iv: Intervals, reason: np.ndarray, ph: Phases) -> None:
    """Sizes of gradients name what nothing else can: a module's block without a
    gradient of its size is a buffer; blocks from before recording (or from setup without
    a telling stack) of a gradient's exact size are parameters and optimizer state."""
    cat = _REASON_CATEGORY[reason]
    grads = np.flatnonzero(cat == GRADIENT)
    grads = grads[iv.start[grads] >= 0]  # made in the window
    if not len(grads):
        return
    req = iv.requested
    req_g = req[grads]
    if native.available():  # a few distinct sizes: hashed, not sorted
        grad_sizes, size_of = native.unique_inverse(req_g)
    else:
        grad_sizes, size_of = np.unique(req_g, return_inverse=True)
        size_of = size_of.reshape(-1)
    params = np.flatnonzero(cat == PARAMETER)
    buffer = params[~np.isin(req[params], grad_sizes)]
    reason[buffer] = R("param_buffer")

    # Gradients per size in one iteration (the most any iteration made, the gradients
    # made outside every iteration counting as one more).
    if ph.iterations:
        it = ph.iteration[np.maximum(iv.start[grads], 0)].astype(np.int64)
        n_sizes = len(grad_sizes)
        if (len(ph.iterations) + 1) * n_sizes <= _DENSE_COUNTS:
            counts = np.bincount(
                (it + 1) * n_sizes + size_of, minlength=(len(ph.iterations) + 1) * n_sizes
            )
            per_size = counts.reshape(-1, n_sizes).max(axis=0).astype(np.int64)
        else:
            uk, counts = np.unique(it * (1 << 40) + size_of, return_counts=True)
            per_size = np.zeros(n_sizes, np.int64)
            np.maximum.at(per_size, uk % (1 << 40), counts)
    else:
        per_size = np.bincount(size_of, minlength=len(grad_sizes)).astype(np.int64)
    first = ph.iterations[0].start if ph.iterations else 0
    # Parameters and optimizer state are never freed: only blocks alive to the end.
    n_end = int(iv.end.max()) if len(iv) else 0
    # Set-up is also what the program made before its first forward pass inside the first
    # iteration (which starts with the recording): a part of the model cast to fp32 after
    # it was built (``param.data = param.data.float()``, peft's preparation for k-bit
    # training) has no module's stack.
    first_fwd = ph.first_of(PH_FORWARD) or 0
    unknown_long = np.flatnonzero(
        (reason == R("unknown_pre_recording"))
        | (reason == R("unknown_setup"))
        | ((reason == R("unknown_other")) & (iv.start >= 0) & (iv.start < first_fwd))
    )  # few
    end_u = iv.end[unknown_long]
    unknown_long = unknown_long[(end_u > first) & (end_u >= n_end)]
    if not len(unknown_long):
        return
    sizes = req[unknown_long]
    pos = np.searchsorted(grad_sizes, sizes)
    pos_c = np.minimum(pos, len(grad_sizes) - 1)
    match = grad_sizes[pos_c] == sizes
    cand = unknown_long[match]
    if not len(cand):
        return
    order = np.lexsort((column_at(iv, "addr", cand), req[cand]))
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
    a workspace's size and of no parameter's (a guess).  Alive to the end includes freed
    in the recording's closing frees, after its last allocation: a program's teardown
    (Lightning's clears cuBLAS's workspaces when it ends) frees what lived all along."""
    if not ph.iterations or n == 0:
        return
    first = ph.iterations[0]
    s = iv.start
    teardown = int(s.max()) if len(s) else n
    # Made in the first iteration, or before recording (a ring buffer), never freed.
    cand = np.flatnonzero(iv.end > teardown)  # alive at the end: few
    cand = cand[s[cand] <= first.end]
    cat_c = _REASON_CATEGORY[reason[cand]]
    pre_c = s[cand] < 0
    cand = cand[
        np.isin(iv.requested[cand], WORKSPACE_SIZES)
        & (
            (((cat_c == GRADIENT) | (cat_c == ACTIVATION)) & (s[cand] >= first.start))
            | (pre_c & (reason[cand] == R("unknown_pre_recording")))
        )
    ]
    if not len(cand):
        return
    params = iv.requested[_REASON_CATEGORY[reason] == PARAMETER]
    cand = cand[~np.isin(iv.requested[cand], params)]
    # One workspace per cuBLAS handle (thread and stream): a few of a size, not hundreds.
    sizes, counts = np.unique(iv.requested[cand], return_counts=True)
    cand = cand[np.isin(iv.requested[cand], sizes[counts <= 4])]
    ph_c = ph.phase[np.maximum(s[cand], 0)]
    cand = cand[(ph_c == PH_FORWARD) | (ph_c == PH_BACKWARD) | (s[cand] < 0)]
    reason[cand] = R("workspace_guess")
