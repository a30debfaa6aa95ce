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

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core.members import one_of, unique_sorted
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


class SizeIndex:
    """The distinct requested sizes of a stream and each request's place among them: the
    batch judgement (:mod:`.scaling`) tests sizes against sets of sizes a dozen times,
    each then a test of the few distinct sizes spread to the millions of requests by
    index."""

    def __init__(self, size: np.ndarray) -> None:
        self.size = size  # the sizes indexed
        # np.unique(size), from one sort: faster on millions of integers than its hashing.
        self.values = unique_sorted(np.sort(size))
        self.index = np.searchsorted(self.values, size)

    def isin(self, sizes: np.ndarray, times: int = 1) -> np.ndarray:
        """Bool per request: its size times ``times`` is one of ``sizes``
        (``np.isin(size * times, sizes)``)."""
        return np.isin(self.values * times, sizes)[self.index]

    def distinct(self, mask: np.ndarray) -> np.ndarray:
        """The distinct sizes of the requests of ``mask``, sorted (``np.unique(size[mask])``)."""
        present = np.zeros(len(self.values), bool)
        present[self.index[mask]] = True
        return self.values[present]


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
    # ``categories`` and ``category_reasons`` as indices into a table of their values: a
    # test of membership is then a lookup per request, where comparing millions of
    # strings costs a Python comparison each (None: only the strings are known).
    category_codes: "Coded | None" = None
    reason_codes: "Coded | None" = None
    # The requests' sizes indexed (None: not indexed): a pure function of the stream, made
    # here beside the categories rather than in the judgement after them.
    sizes: "SizeIndex | None" = None
    # The peak of requested bytes alive at once (:func:`live_peak_of`), made beside the
    # categories too (None: not made).
    live_peak_bytes: int | None = None

    def __len__(self) -> int:
        return len(self.free_at)

    def category_in(self, *names: str) -> np.ndarray:
        """Bool per request: its category is one of ``names`` (all False without
        categories): ``np.isin(self.categories, names)``."""
        if self.category_codes is not None:
            return self.category_codes.isin(names)
        if self.categories is None:
            return np.zeros(len(self), bool)
        return np.isin(self.categories, names)

    def reason_in(self, *codes: str) -> np.ndarray:
        """Bool per request: its category's reason code is one of ``codes`` (all False
        without them): ``np.isin(self.category_reasons, codes)``."""
        if self.reason_codes is not None:
            return self.reason_codes.isin(codes)
        if self.category_reasons is None:
            return np.zeros(len(self), bool)
        return np.isin(self.category_reasons, codes)


def stack_table(site: np.ndarray) -> tuple[np.ndarray, int]:
    """(the distinct stack ids of ``site`` in order, the size of a table by stack id):
    a table ``t`` of that size plus one holds an answer per stack, ``t[site]`` spreads
    them to the requests, and its last entry answers for "no stack" (-1).  Stack ids are
    small integers: no sort of the requests is needed."""
    top = int(site.max()) + 1 if len(site) else 0
    present = np.zeros(top + 1, bool)
    present[site] = True
    return np.flatnonzero(present[:top]), top


@dataclass(frozen=True)
class Coded:
    """Per-request labels as integers: ``index`` into ``values``."""

    index: np.ndarray
    values: tuple[str, ...]

    def isin(self, wanted) -> np.ndarray:
        """Bool per request: its label is one of ``wanted``."""
        return one_of(self.index, [k for k, v in enumerate(self.values) if v in wanted])

    def labels(self) -> np.ndarray:
        """The labels themselves (an object array of strings)."""
        # np.take: about twice as fast as [] with an int8 index on millions of rows.
        return np.take(np.array(self.values, dtype=object), self.index)


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


def _optimizer_request_spans(case, t: np.ndarray) -> list[tuple[int, int, bool]]:
    """(first request, request after the last, is a step) of each optimizer
    record_function range of ``case``, by the requests' times ``t``: one sorted search for
    all their ends (a long recording has a range per step, thousands)."""
    ranges = _optimizer_ranges(case.snap, case.device)
    lo = np.searchsorted(t, np.array([r[0] for r in ranges], np.int64), side="left").tolist()
    hi = np.searchsorted(t, np.array([r[1] for r in ranges], np.int64), side="right").tolist()
    return [(a, b, r[2]) for a, b, r in zip(lo, hi, ranges)]


def optimizer_step_ends(case) -> list[int]:
    """Per optimizer step of ``case`` (its record_function annotations): the index of the
    request after its last; empty without annotations (or without times)."""
    reqs = case.requests
    if not len(reqs) or not len(reqs.time_us):
        return []
    spans = _optimizer_request_spans(case, reqs.time_us[reqs.event])
    return [b for _, b, is_step in spans if is_step]


def categories_of(
    case, progress=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, "MemoryBreakdown"] | None:
    """Per request: the category, reason code and whether it is a guess, as
    :mod:`..categories` decides for its allocation (``""`` for requests that are not
    allocations), and the MemoryBreakdown they come from; None when that package is
    absent."""
    got = _coded_categories(case, progress)
    if got is None:
        return None
    cat, why, guess, bd = got
    return cat.labels(), why.labels(), guess, bd


def _coded_categories(
    case, progress=None
) -> tuple[Coded, Coded, np.ndarray, "MemoryBreakdown"] | None:
    """:func:`categories_of` with the category and the reason code as :class:`Coded`."""
    try:
        from ..categories import CATEGORY_NAMES, REASONS, MemoryBreakdown
        from ..categories.breakdown import replay_and_prepare
    except ImportError:  # the categories package is not there: rules without it
        return None
    snap = case.snap
    # The breakdown's first part made beside the replay, as summary makes it.
    timeline, prepared = replay_and_prepare(snap, progress=progress)
    part = prepared.result() if prepared is not None else None
    bd = MemoryBreakdown.build(snap, timeline, case.device, progress, prepared=part)
    iv = bd.intervals
    names = CATEGORY_NAMES + ("",)
    codes = tuple(r.code for r in REASONS) + ("",)
    guess = np.array([r.guess for r in REASONS] + [True], bool)
    reqs = case.requests
    # Small integers: both tables have fewer than 128 entries.
    cat = np.full(len(reqs), len(CATEGORY_NAMES), np.int8)
    why = np.full(len(reqs), len(REASONS), np.int8)
    # Each allocation's interval: the first one made at its event, by a table indexed by
    # event (events are dense small integers; its last entry: no interval).
    ok = np.flatnonzero(iv.event >= 0)
    events = iv.event[ok]
    top = int(events.max()) + 1 if len(events) else 0
    none = len(iv.event)
    first = np.full(top + 1, none, np.int64)
    np.minimum.at(first, events, ok)
    alloc = np.flatnonzero(reqs.kind == rq.ALLOC)
    at = reqs.event[alloc]
    got = first[np.where((at >= 0) & (at < top), at, top)]
    hit = got < none
    cat[alloc[hit]] = bd.category[got[hit]]
    why[alloc[hit]] = bd.reason[got[hit]]
    return Coded(cat, names), Coded(why, codes), guess[why], bd


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
    cat_codes = why_codes = None
    if isinstance(categories, str) and categories == AUTO:
        # The categories (a replay of the trace and its breakdown: native code and numpy,
        # which let another thread run) are worked out beside the evidence of the frames.
        with ThreadPoolExecutor(1, thread_name_prefix="vramscope-categories") as pool:
            pending = pool.submit(_coded_categories, case)
            own = _own_columns(case)
            got = pending.result()
        if got is not None:
            cat_codes, why_codes, category_guess, breakdown = got
            categories, category_reasons = cat_codes.labels(), why_codes.labels()
        else:
            categories = category_reasons = category_guess = breakdown = None
    else:
        own = _own_columns(case)
    free_at, site, in_opt, prov = own.free_at, own.site, own.in_opt, own.provenance
    step_end_req, step_spans = own.step_end_req, own.step_spans
    reqs = case.requests
    snap = case.snap
    n = len(reqs)
    kinds = reqs.kind
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
        iteration=own.iteration,
        phase=phase,
        provenance=prov,
        site=site,
        user_line=own.user_line,
        n_iterations=len(step_end_req),
        iteration_starts=np.array(own.starts, np.int64),
        categories=categories,
        category_reasons=category_reasons,
        category_guess=category_guess,
        breakdown=breakdown,
        category_codes=cat_codes,
        reason_codes=why_codes,
        sizes=own.sizes,
        live_peak_bytes=own.live_peak,
    )


@dataclass
class _Own:
    """What :func:`gather` reads of the requests, the annotations and the frames."""

    free_at: np.ndarray
    site: np.ndarray
    in_opt: np.ndarray  # bool per request: inside an optimizer's range
    step_end_req: list[int]  # per step: the request after its last
    step_spans: list[tuple[int, int]]  # per step: its requests [lo, hi)
    starts: list[int]  # per iteration: its first request
    iteration: np.ndarray
    provenance: np.ndarray
    user_line: np.ndarray
    sizes: SizeIndex
    live_peak: int


def _own_columns(case) -> _Own:
    """What :func:`gather` reads of the requests, the annotations and the frames, without
    the categories."""
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
    # One device's trace is the whole trace: its events index the stacks directly.
    stack = snap.trace.stack if len(rows) == len(snap.trace.stack) else snap.trace.stack[rows]
    ok = (ev >= 0) & (ev < len(rows))
    if ok.all():
        site = stack[ev].astype(np.int32, copy=False)
    else:
        site = np.full(n, -1, np.int32)
        site[ok] = stack[ev[ok]]
    # Time of each request, to place it against the annotations.
    t = reqs.time_us[ev] if len(reqs.time_us) else np.full(n, -1, np.int64)
    in_opt = np.zeros(n, bool)
    step_end_req: list[int] = []
    step_spans: list[tuple[int, int]] = []
    for a, b, is_step in _optimizer_request_spans(case, t):
        in_opt[a:b] = True
        if is_step:
            step_end_req.append(b)
            step_spans.append((a, b))
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
    at = site.astype(np.intp)  # converted once for the lookups below
    stacks, top = stack_table(at)
    cache: dict[int, int] = {}
    ucache: dict[int, bool] = {}
    prov_of = np.full(top + 1, PROV_NONE, np.int8)
    prov_of[stacks] = [_frame_provenance(snap, s, cache) for s in stacks.tolist()]
    user_of = np.zeros(top + 1, bool)
    user_of[stacks] = [_user_innermost(snap, s, ucache) for s in stacks.tolist()]
    prov = prov_of[at]
    user = user_of[at]
    return _Own(
        free_at=free_at,
        site=site,
        in_opt=in_opt,
        step_end_req=step_end_req,
        step_spans=step_spans,
        starts=starts,
        iteration=iteration,
        provenance=prov,
        user_line=user,
        sizes=SizeIndex(reqs.size.astype(np.int64, copy=False)),
        live_peak=live_peak_of(reqs, free_at),
    )


def live_peak_of(reqs, free_at: np.ndarray) -> int:
    """The peak of requested bytes alive at once in the stream ``reqs`` whose allocations
    are freed at ``free_at`` (:attr:`Evidence.free_at`), blocks from before it included."""
    n = len(reqs)
    alloc = np.flatnonzero(reqs.kind == rq.ALLOC)
    size = reqs.size[alloc].astype(np.int64)
    delta = np.zeros(n + 1, np.int64)
    delta[alloc] = size
    # A free row frees one allocation, so the rows freeing them are distinct (plain
    # assignments); those never freed all end at n.
    freed = np.minimum(free_at[alloc], n)
    gone = freed < n
    delta[freed[gone]] -= size[gone]
    delta[n] -= size[~gone].sum()
    init = reqs.initial
    before = int(init.blk_requested[init.blk_state == 0].sum()) if init.n_blocks else 0
    return before + max(int(np.cumsum(delta).max()), 0)


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
    if not closure.any():  # most programs: no per-request pass
        return None
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
