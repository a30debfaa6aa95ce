"""What a recording says about each allocation request: lifetime, phase, provenance.

The batch-size judgement (:mod:`.scaling`) and the remedies (:mod:`.catalogue`)
need, per ``ALLOC`` request of a what-if :class:`~..whatif.Case`:

* its lifetime: the request that freed it (``free_at``; ``n`` = never freed);
* the training iteration it was made in, from the ``Optimizer.step``
  record_function ranges torch's optimizers always annotate (an iteration
  ends with its optimizer step); ``-1`` before the first iteration's work
  could be told apart, i.e. when there is no annotation;
* its phase: ``optimizer`` (inside ``Optimizer.step``/``zero_grad`` or made
  by ``torch/optim`` frames), ``backward`` (made on the autograd engine's
  thread: no Python frame, or C++ frames of ``torch::autograd::Engine``),
  ``forward`` (other allocations inside an iteration) or ``setup`` (before
  the first iteration began its forward);
* its provenance from the Python frames: module state (``nn.Module._apply``
  / ``.to()`` / ``.cuda()`` and parameter initialisation), the optimizer, or
  the program's own code.

Categories from :mod:`..categories` (parameter, gradient, ...) are used when
that package is present; everything here works without it.  Columns, not
objects: one numpy array per feature, indexed by request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..whatif import requests as rq

if TYPE_CHECKING:
    from ..categories import MemoryBreakdown

PHASES = ("setup", "forward", "backward", "optimizer")
SETUP, FORWARD, BACKWARD, OPTIMIZER = range(4)
# Provenance from frames.
PROV_NONE, PROV_USER, PROV_MODULE_STATE, PROV_OPTIMIZER, PROV_AUTOGRAD = range(5)
PROVENANCES = ("no frames", "program code", "module state", "optimizer", "autograd engine")

_OPT_ANNOTATIONS = ("Optimizer.step", "Optimizer.zero_grad")
_MODULE_STATE_FUNCS = {
    "_apply",
    "convert",
    "cuda",
    "to",
    "to_empty",
    "reset_parameters",
    "_load_from_state_dict",
    "load_state_dict",
    "register_buffer",
    "register_parameter",
    "_init_weights",
    "init_weights",
    "post_init",
}


@dataclass
class Evidence:
    """Per-request features of one device's request stream (ALLOC rows meaningful)."""

    free_at: np.ndarray  # int64: request index that freed it; n = never freed in the window
    iteration: np.ndarray  # int32: iteration it was made in (-1: before the first / unknown)
    phase: np.ndarray  # int8: SETUP / FORWARD / BACKWARD / OPTIMIZER
    provenance: np.ndarray  # int8: PROV_*
    site: np.ndarray  # int32: stack id of the request's event (-1: none)
    user_line: np.ndarray  # bool: the innermost Python frame is the program's own code
    n_iterations: int  # completed optimizer steps seen
    iteration_starts: np.ndarray  # int64 request index where each iteration begins
    categories: np.ndarray | None = None  # object array of category names when known
    category_reasons: np.ndarray | None = None  # object array of reason codes when known
    category_guess: np.ndarray | None = None  # bool: the category is a guess (its reason says)
    # The device's categories.MemoryBreakdown the categories came from (None without it):
    # the split by category at an event, the iterations, the leaks - the same words and
    # numbers as summary and the header.
    breakdown: "MemoryBreakdown | None" = None

    def __len__(self) -> int:
        return len(self.free_at)


def _frame_provenance(snap, stack: int, cache: dict[int, int]) -> int:
    got = cache.get(stack)
    if got is not None:
        return got
    prov = PROV_NONE
    py_seen = False
    for f in snap.stacks.frame_ids(stack).tolist():
        fn = snap.frames.filename_of(f).replace("\\", "/")
        name = snap.frames.name_of(f)
        if not fn.endswith(".py"):
            if "autograd::Engine" in name or "AccumulateGrad" in name:
                prov = PROV_AUTOGRAD
                break
            continue
        py_seen = True
        if "/torch/optim/" in fn or fn.startswith("torch/optim/"):
            prov = PROV_OPTIMIZER
            break
        # A module's state: made by its .to()/_apply/init functions, or by its
        # constructor (a model built on the GPU: ``with torch.device("cuda")``).
        if (
            (name in _MODULE_STATE_FUNCS and ("/torch/nn/" in fn or "modeling_utils" in fn))
            or fn.endswith("torch/nn/init.py")
            or (name == "__init__" and "/torch/nn/modules/" in fn)
        ):
            prov = PROV_MODULE_STATE
            break
    if prov == PROV_NONE and py_seen:
        prov = PROV_USER
    cache[stack] = prov
    return prov


# Where a Python file is not the program's own code: installed packages, torch, the
# standard library, and interpreter pseudo-files ("<string>", "<frozen ...>").
LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "/torch/", "/lib/python3", "<")


def is_program_file(filename: str) -> bool:
    """A Python file of the program itself (see :data:`LIBRARY_MARKS`)."""
    fn = filename.replace("\\", "/")
    return fn.endswith(".py") and not any(m in fn for m in LIBRARY_MARKS)


def user_frame(snap, stack: int, cache: dict[int, str | None] | None = None) -> str | None:
    """``file.py:LINE`` of the innermost frame of the program's own code in ``stack``
    (``cache``: answers by stack id, for callers that ask about many)."""
    if cache is not None and stack in cache:
        return cache[stack]
    got = None
    if stack >= 0:
        for f in snap.stacks.frame_ids(stack).tolist():
            fn = snap.frames.filename_of(f)
            if is_program_file(fn):
                got = f"{fn.replace(chr(92), '/')}:{int(snap.frames.line[f])}"
                break
    if cache is not None:
        cache[stack] = got
    return got


def _user_innermost(snap, stack: int, cache: dict[int, bool]) -> bool:
    """The innermost Python frame of ``stack`` is outside torch, packages and the stdlib."""
    got = cache.get(stack)
    if got is None:
        got = False
        for f in snap.stacks.frame_ids(stack).tolist():
            fn = snap.frames.filename_of(f).replace("\\", "/")
            if fn.endswith(".py"):
                got = is_program_file(fn)
                break
        cache[stack] = got
    return got


def _optimizer_ranges(snap, device: int) -> list[tuple[int, int, bool]]:
    """(start, end, is_step) times of the optimizer's record_function ranges."""
    ann = snap.annotations
    out: list[tuple[int, int, bool]] = []
    open_at: dict[str, int] = {}
    for dev, start, name, t in zip(
        ann.device.tolist(), ann.is_start.tolist(), ann.name.tolist(), ann.time_us.tolist()
    ):
        if dev != device:
            continue
        text = snap.string(name)
        if not text.startswith(_OPT_ANNOTATIONS):
            continue
        if start:
            open_at[text] = t
        elif text in open_at:
            out.append((open_at.pop(text), t, text.startswith("Optimizer.step")))
    out.sort()
    return out


def categories_of(
    case, progress=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, "MemoryBreakdown"] | None:
    """Per request: the category, reason code and whether it is a guess, as
    :mod:`..categories` decides for its allocation (``""`` for requests that are not
    allocations), and the MemoryBreakdown they come from; None when that package is
    absent."""
    try:
        from ..categories import CATEGORY_NAMES, REASONS, MemoryBreakdown
        from ..replay.timeline import build_timeline
    except ImportError:  # the categories package is not there: rules without it
        return None
    snap = case.snap
    timeline = build_timeline(snap, progress, keyframes=False)
    bd = MemoryBreakdown.build(snap, timeline, case.device, progress)
    iv = bd.intervals
    names = np.array(CATEGORY_NAMES + ("",), dtype=object)
    codes = np.array([r.code for r in REASONS] + [""], dtype=object)
    guess = np.array([r.guess for r in REASONS] + [True], bool)
    reqs = case.requests
    cat = np.full(len(reqs), len(CATEGORY_NAMES), np.int64)
    why = np.full(len(reqs), len(REASONS), np.int64)
    ok = iv.event >= 0
    ev_sorted = np.argsort(iv.event[ok], kind="stable")
    events = iv.event[ok][ev_sorted]
    ids = np.flatnonzero(ok)[ev_sorted]
    alloc = np.flatnonzero(reqs.kind == rq.ALLOC)
    pos = np.searchsorted(events, reqs.event[alloc])
    pos = np.minimum(pos, max(len(events) - 1, 0))
    hit = (
        (len(events) > 0) & (events[pos] == reqs.event[alloc])
        if len(events)
        else np.zeros(len(alloc), bool)
    )
    cat[alloc[hit]] = bd.category[ids[pos[hit]]]
    why[alloc[hit]] = bd.reason[ids[pos[hit]]]
    return names[cat], codes[why], guess[why], bd


AUTO = "auto"


def gather(
    case,
    categories=AUTO,
    category_reasons: np.ndarray | None = None,
    category_guess: np.ndarray | None = None,
    breakdown: "MemoryBreakdown | None" = None,
) -> Evidence:
    """The :class:`Evidence` of ``case`` (a :class:`~..whatif.Case`).

    ``categories``: per-request category names (``"parameter"``,
    ``"activation"``, ...); ``"auto"``: from :mod:`..categories` when that
    package is present (:func:`categories_of`); None: without categories.
    """
    if isinstance(categories, str) and categories == AUTO:
        got = categories_of(case)
        categories, category_reasons, category_guess, breakdown = (
            got if got is not None else (None,) * 4
        )
    reqs = case.requests
    snap = case.snap
    n = len(reqs)
    kinds = reqs.kind
    # Lifetimes: the first FREE / FREE_REQ of each allocation.
    free_at = np.full(n, n, np.int64)
    frees = np.flatnonzero(((kinds == rq.FREE) | (kinds == rq.FREE_REQ)) & (reqs.ref >= 0))
    # A block is freed once; later rows win on duplicates only if earlier were absent.
    free_at[reqs.ref[frees][::-1]] = frees[::-1]
    # Stack of each request's event.
    rows = np.flatnonzero(snap.trace.device == case.device)
    ev = reqs.event
    site = np.full(n, -1, np.int32)
    ok = (ev >= 0) & (ev < len(rows))
    site[ok] = snap.trace.stack[rows[ev[ok]]]
    # Time of each request, to place it against the annotations.
    t = reqs.time_us[ev] if len(reqs.time_us) else np.full(n, -1, np.int64)
    ranges = _optimizer_ranges(snap, case.device)
    in_opt = np.zeros(n, bool)
    step_end_req: list[int] = []
    step_spans: list[tuple[int, int]] = []
    for start, end, is_step in ranges:
        lo = np.searchsorted(t, start, side="left")
        hi = np.searchsorted(t, end, side="right")
        in_opt[lo:hi] = True
        if is_step:
            step_end_req.append(int(hi))
            step_spans.append((int(lo), int(hi)))
    # Iterations: the work after one optimizer step up to the end of the next.
    iteration = np.full(n, -1, np.int32)
    starts: list[int] = []
    if step_end_req:
        bounds = [0] + step_end_req
        for j in range(len(step_end_req)):
            iteration[bounds[j] : bounds[j + 1]] = j
            starts.append(bounds[j])
        if bounds[-1] < n:
            iteration[bounds[-1] :] = len(step_end_req)
            starts.append(bounds[-1])
    # Provenance and the program's own frame are properties of a stack: judged once per
    # distinct stack (thousands) and spread to the requests (millions) by index.
    stacks, per_request = np.unique(site, return_inverse=True)
    cache: dict[int, int] = {}
    ucache: dict[int, bool] = {}
    prov = np.array(
        [_frame_provenance(snap, s, cache) if s >= 0 else PROV_NONE for s in stacks.tolist()],
        np.int8,
    )[per_request]
    user = np.array(
        [_user_innermost(snap, s, ucache) if s >= 0 else False for s in stacks.tolist()], bool
    )[per_request]
    called_back = _called_back(snap, site, breakdown)
    if called_back is not None:
        # The step ran the program's closure (``optimizer.step(closure)``, Lightning): its
        # forward, loss and backward are the program's, and the optimizer's own work is what
        # the step does after the closure's last request.
        prov[called_back & (prov == PROV_OPTIMIZER)] = PROV_USER
        work = called_back | (prov == PROV_NONE) | (prov == PROV_AUTOGRAD)
        for a, b in step_spans:
            if called_back[a:b].any():
                in_opt[a : a + int(np.flatnonzero(work[a:b])[-1]) + 1] = False
    phase = np.full(n, FORWARD, np.int8)
    phase[(prov == PROV_NONE) | (prov == PROV_AUTOGRAD)] = BACKWARD
    phase[in_opt | (prov == PROV_OPTIMIZER)] = OPTIMIZER
    # Setup: everything before the first allocation of program code that is
    # followed by a backward (model building, .to(device), data loading).
    alloc_rows = kinds == rq.ALLOC
    first_bwd = np.flatnonzero(alloc_rows & (phase == BACKWARD) & (prov == PROV_NONE))
    if len(first_bwd):
        before = np.flatnonzero(
            alloc_rows[: first_bwd[0]] & (prov[: first_bwd[0]] == PROV_MODULE_STATE)
        )
        if len(before):
            phase[: before[-1] + 1][phase[: before[-1] + 1] == FORWARD] = SETUP
    phase[prov == PROV_MODULE_STATE] = SETUP
    return Evidence(
        free_at=free_at,
        iteration=iteration,
        phase=phase,
        provenance=prov,
        site=site,
        user_line=user,
        n_iterations=len(step_end_req),
        iteration_starts=np.array(starts, np.int64),
        categories=categories,
        category_reasons=category_reasons,
        category_guess=category_guess,
        breakdown=breakdown,
    )


def _called_back(snap, site: np.ndarray, breakdown: "MemoryBreakdown | None") -> np.ndarray | None:
    """Per request: made where the optimizer's step called back into the program (the
    categories' rule, :func:`..categories.stack_kinds.closure_stacks`); None when no request
    was (or the categories package is absent)."""
    try:
        from ..categories import stack_kinds as sk
    except ImportError:
        return None
    kinds = breakdown.phases.stack_kinds if breakdown is not None else sk.stack_kinds(snap)
    closure = np.append((kinds & sk.K_CLOSURE) != 0, False)  # the last entry: no stack
    got = closure[np.where(site < len(kinds), site, -1)]
    return got if got.any() else None


def uses_checkpoint(snap) -> bool:
    """The program ran blocks under ``torch.utils.checkpoint``: a recorded call stack has a
    frame of that module (both the reentrant and the non-reentrant variants run the
    wrapped block from it)."""
    names = snap.frames
    files = {names.filename_of(f).replace("\\", "/") for f in range(len(names.line))}
    return any(f.endswith("torch/utils/checkpoint.py") for f in files)


def kept_across_iterations(evd: Evidence, n: int) -> np.ndarray:
    """Per request: its block outlives the whole iteration after the one it was made in
    (a gradient zeroed in place: made in the first backward, reused by every later one;
    with ``zero_grad(set_to_none=True)`` it is freed at the next iteration's latest).
    Also True where that cannot be told: made before iterations are known, or in the
    recording's last one, which has no next."""
    starts = evd.iteration_starts
    it = evd.iteration.astype(np.int64)
    if not len(starts):
        return np.ones(len(it), bool)
    unknown = (it < 0) | (it + 1 >= len(starts))
    # The end of the next iteration: the start of the one after it, or the recording's end.
    after_next = np.clip(it + 2, 0, len(starts))
    end = np.append(starts, n)[after_next]
    return unknown | (evd.free_at >= end)
