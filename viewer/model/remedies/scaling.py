"""Which allocations grow with the batch: a judgement per allocation, with its reason.

Changing the batch size changes the size of the tensors that have a batch
dimension (inputs, activations and the temporaries made from them, in
forward and backward) in proportion, and leaves the model's state alone
(parameters, gradients, optimizer state, and workspaces such as cuBLAS's).
A recording made at one batch size does not label its allocations, so each
request is judged by the first rule that applies (:data:`RULES`, in order):

Fixed (the size stays):

* ``tiny``: at most 512 B, one minimum block at any batch;
* ``state_category``: the categories package (:mod:`..categories`) says
  parameter / gradient / optimizer_state (not as a guess), FSDP's gathered
  parameters or communication buffers, or a library workspace or optimizer
  temporary;
* ``optimizer``: made inside ``Optimizer.step`` / ``zero_grad`` or by
  ``torch/optim`` code, which works on parameters;
* ``module_state``: made by ``nn.Module._apply`` / ``.to()`` / ``.cuda()`` /
  parameter initialisation (parameters and buffers);
* ``tuning_scratch``: made by torch.compile's kernel benchmarking (Inductor's
  ``runtime/benchmarking.py``: the buffer it writes to flush the L2 cache between
  timed runs, the cache's size);
* ``state_size``: outside forward (or made before the first forward pass and kept to
  the end: model state made after the build), its size equals a model-state tensor's (a
  parameter, an optimizer state, anything made before the recording and
  still alive) and, in backward, it is not the gradient of a forward
  activation of the same size (freed inside the pass);
  anywhere, half of one (the bf16/fp16 copy autocast makes of
  an fp32 weight).
  Gradients and the weight-gradient temporaries of backward are judged by
  this rule, because autograd's thread leaves no Python frame to go by;
* ``kept_once``: never freed, and the only allocation its call site made
  inside library code: a workspace or lazily-created state, made once for
  the whole run;
* ``tuning_copy``: a copy autotuning makes of a kernel's argument
  (``clone_preserve_strides``) so that a kernel writing in place can run again,
  judged like the buffer it copies (the latest live allocation of its size) once
  that is judged; fixed here, scaled as ``tuning_copy_scaled``.

Scaled (the size is multiplied by the factor, rounded up to a byte):

* ``data_category``: activation or input by category (tried after ``state_size``);
* ``cut_off``: never freed only because the recording ended (its call site
  made and freed the same allocation in earlier iterations);
* ``kept_each``: never freed, and its call site made several such: outputs
  kept every iteration (a list of losses or predictions), which grow with
  the batch;
* ``input_once``: never freed, made once by a line of the program's own
  code (not torch's): a batch of inputs made once and reused every step;
* ``per_iteration``: everything else made during the run: forward and
  backward activations, inputs and their temporaries.

Phases come from :mod:`.evidence`, with one correction from the frames
(:func:`compiled_evidence`): torch.compile's backward runs AOT autograd's Python
wrapper on the autograd thread, so its allocations have Python frames (the
generated ``<hash>.py`` file's ``call``) and would read as forward; frames of the
wrapper's backward functions (or of compiled autograd) make them backward, where
the lifetime rules above apply: a state-sized buffer that outlives its pass is a
gradient, one made and freed in it with an activation's size is that activation's
gradient.

A reduction's staging buffer (made with its semaphores inside one operation) grows
with the batch only up to the blocks the GPU holds at once (:mod:`.reductions`): where
the recording's GPU is known, the point stops it there.

Two kinds of request are known only within bounds at another batch, and make a
prediction an estimate (:attr:`Judgement.doubtful`, :func:`.batch_scale.is_estimate`):
autotuning's (:attr:`Judgement.tuning`: which kernels Inductor tunes, and how often,
follows the shapes), and those judged with nothing but a default to go by
(:attr:`Judgement.guessed`: a size that is both a model-state tensor's and a
per-sample tensor's, e.g. 16 x 256 x 1024 fp32 activations and a 1024 x 4096 fp32
weight; or a large scratch buffer of one operation that nothing sizes,
:func:`unexplained_scratch`).

The judgement is columns: :attr:`Judgement.rule` per request, the rule's
reason in :data:`REASONS`.  Sizes are requested bytes; the allocator's own
rounding (512 B blocks, 2 MiB / 20 MiB segments) happens in the simulator.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np

from ..whatif import requests as rq
from . import evidence as ev
from . import reductions, workspaces

# Rule codes (int8), in the order they are tried.
(
    TINY,
    CATEGORY_FIXED,
    OPTIMIZER,
    MODULE_STATE,
    TUNING_SCRATCH,
    STATE_SIZE,
    NOT_MULTIPLE,
    KEPT_ONCE,
    TUNING_COPY_FIXED,
    CATEGORY_SCALED,
    CUT_OFF,
    KEPT_EACH,
    INPUT_ONCE,
    TUNING_COPY_SCALED,
    PER_ITERATION,
    NOT_AN_ALLOCATION,
) = range(16)
RULES = (
    "tiny",
    "state_category",
    "optimizer",
    "module_state",
    "tuning_scratch",
    "state_size",
    "not_multiple",
    "kept_once",
    "tuning_copy",
    "data_category",
    "cut_off",
    "kept_each",
    "input_once",
    "tuning_copy_scaled",
    "per_iteration",
    "-",
)
SCALED_RULES = (CATEGORY_SCALED, CUT_OFF, KEPT_EACH, INPUT_ONCE, TUNING_COPY_SCALED, PER_ITERATION)
REASONS = (
    "at most 512 B: one minimum block at any batch size",
    "model state by category (parameter, gradient, optimizer state, FSDP's gathered "
    "parameters or communication buffers, library workspace or optimizer temporary)",
    "made by the optimizer (torch/optim, Optimizer.step or zero_grad), which works on parameters",
    "parameter or buffer made by nn.Module (_apply, .to(), .cuda(), initialisation)",
    "made by torch.compile's kernel benchmarking (Inductor's autotuning): a buffer sized by "
    "the GPU (its L2 cache), not by the batch",
    "same size as a model-state tensor (or its half-precision copy): a gradient, "
    "weight-gradient temporary or autocast weight copy",
    "not a multiple of the recorded batch size, so not a per-sample tensor",
    "never freed and the only allocation of its call site: a workspace or state made once",
    "a copy torch.compile's autotuning makes of a kernel argument that stays at any batch "
    "(a live buffer of its size, judged fixed)",
    "activation or input by category (made in forward and saved for backward, or "
    "the program's input)",
    "never freed only because the recording ended; its call site made and freed it earlier",
    "never freed, made again and again by its call site: outputs kept every iteration",
    "never freed, made once by a line of the program itself (not library code): "
    "a batch of inputs reused every step",
    "a copy torch.compile's autotuning makes of a kernel argument that grows with the batch "
    "(a live buffer of its size, judged to scale)",
    "made per iteration in forward or backward: an activation, input or their temporary",
    "not an allocation",
)
STAGING_REASON = (
    "a reduction's staging buffer: grows with the batch up to the blocks the GPU holds at once"
)
STAGING_CAP_REASON = (
    "a reduction's staging buffer at the blocks the GPU holds at once: stays at a larger batch"
)
TINY_BYTES = 512
#: The error an exact batch prediction (:func:`.batch_judge.is_estimate` False: nothing
#: whose size is in doubt) is held to: what the label promises.  No sweep pair labelled
#: exact misses by more (tests/model/test_near_limit.py); the point predictions of GPT-2
#: and ViT are the real peaks to the byte at every batch (tests/model/test_remedies_truth.py).
EXACT_ERROR = Fraction(2, 100)
STATE_SIZE_MIN = 1024  # smaller model-state sizes collide too easily with activations
# The model's state and, in sharded training, what FSDP gathers of it per block and the
# buffers its collectives move it through: their sizes follow the model, not the batch.
FIXED_CATEGORIES = (
    "parameter",
    "gradient",
    "optimizer_state",
    "parameter_gathered",
    "communication",
)
# Temporaries the categories package names as library workspaces or optimizer scratch.
FIXED_REASONS = ("workspace_cublas", "workspace_guess", "temp_optimizer")
SCALED_CATEGORIES = ("activation", "input")


@dataclass
class Judgement:
    """How each request of a stream scales with the batch."""

    rule: np.ndarray  # int8 rule code per request
    size: np.ndarray  # int64 requested bytes (as recorded)
    batch: int | None  # the recorded batch size, when given
    # Bool per request: freed by the very next request of the stream (a scratch buffer
    # made and dropped inside one operation); None when not known.
    transient: np.ndarray | None = None
    # Bool per request: scaled like a per-sample tensor (its size is a whole number of
    # bytes per sample) yet made and dropped inside one operation beside a convolution's
    # weight, and no longer-lived allocation of the stream has its size: it may be a
    # library's workspace whose size only happens to be such a multiple (MobileNetV3's
    # backward-filter workspaces at batch 64: 262144 B).  Its point estimate stays
    # proportional; the estimate's range lets cuDNN pick another algorithm for it
    # (:func:`.batch_scale.estimate_range`).  None when not looked.
    maybe_workspace: np.ndarray | None = None
    # int64 per request: the bytes of a workspace that stay at any batch (its weight
    # part, :mod:`.workspaces`); None or 0: proportional.
    fixed: np.ndarray | None = None
    # int8 per request: how that part was found (:data:`.workspaces.HOW`); None: not looked.
    fixed_how: np.ndarray | None = None
    # int64 per request: a workspace's operands (:attr:`.workspaces.WorkspaceModel.operands`),
    # bytes at the recorded batch (they scale with it); None or 0: not known.
    operands: np.ndarray | None = None
    # Bool per request: judged by a coincidence of sizes alone, either way could be right:
    # its size is both a model-state tensor's (or half one) and that of an allocation judged
    # to scale (16 x 256 x 1024 fp32 activations are exactly a 1024 x 4096 fp32 weight),
    # and it is not state by its lifetime (kept from before the first iteration, or the
    # optimizer's); or a large scratch buffer that nothing sized (:func:`unexplained_scratch`).
    # None: not looked.
    guessed: np.ndarray | None = None
    # Bool per request: the large scratch buffers of :func:`unexplained_scratch` (among
    # :attr:`guessed`): the range draws their size between its two readings.  None: not
    # looked.
    scratch: np.ndarray | None = None
    # Bool per request: made by torch.compile's autotuning (see :attr:`tuning`); None:
    # not looked (the tuning rules then tell).
    tuned: np.ndarray | None = None
    # ATen's reductions' staging buffers among the requests judged to scale, with the
    # GPU's cap on them (:mod:`.reductions`); None: none, or the GPU is not known.
    staging: reductions.Staging | None = None

    @property
    def tuning(self) -> np.ndarray:
        """Bool per request: made by torch.compile's autotuning (Inductor benchmarking its
        kernels the first time each runs).  Which kernels it tunes, and how often, follows
        the shapes: the same program tuned 16, 22 and 26 times at GPT-2 batch 4, 8 and 12,
        so at another batch these requests are not the recorded ones scaled."""
        if self.tuned is not None:
            return self.tuned
        return ev.one_of(self.rule, (TUNING_SCRATCH, TUNING_COPY_FIXED, TUNING_COPY_SCALED))

    @property
    def doubtful(self) -> np.ndarray:
        """Bool per request: its size at another batch is not known from the recording, only
        bounded: a library's workspace (:attr:`uncertain_workspace`), autotuning's
        (:attr:`tuning`) or a judgement by size alone (:attr:`guessed`).  Any of them makes a
        batch prediction an estimate (:func:`.batch_scale.is_estimate`)."""
        d = self.uncertain_workspace | self.tuning
        return d | self.guessed if self.guessed is not None else d

    @cached_property
    def scales(self) -> np.ndarray:
        """Bool per request: its size is proportional to the batch (read-only: asked for
        by every rule, remedy and prediction, it is worked out once; :attr:`rule` is
        final once the judgement is made)."""
        out = ev.one_of(self.rule, SCALED_RULES)
        out.flags.writeable = False
        return out

    def reason(self, request: int) -> str:
        """The rule and why, for one request."""
        code = int(self.rule[request])
        verb = "scales" if code in SCALED_RULES else "fixed"
        return f"{verb} ({RULES[code]}): {REASONS[code]}"

    @property
    def uncertain(self) -> np.ndarray:
        """Bool per request: scaled, but not a whole number of bytes per sample of the
        recorded batch (needs it): cuDNN-like workspaces, whose size follows the algorithm
        the library picks for each shape, not the batch alone."""
        if not self.batch:
            return np.zeros(len(self.rule), bool)
        out = self.scales.copy()
        rows = np.flatnonzero(out)
        out[rows] = self.size[rows] % int(self.batch) != 0
        return out

    @property
    def uncertain_workspace(self) -> np.ndarray:
        """Bool per request: :attr:`workspace` or :attr:`maybe_workspace`, the allocations
        whose size at another batch follows the algorithm cuDNN picks there."""
        w = self.workspace
        return w | self.maybe_workspace if self.maybe_workspace is not None else w

    @property
    def workspace(self) -> np.ndarray:
        """Bool per request: a library workspace whose size at another batch is an
        estimate.  Scaled, freed by the very next request (made and dropped inside one
        operation, as cuDNN's convolution workspaces are) and not a per-sample tensor's
        size: not a whole number of bytes per sample of the recorded batch, or not a
        multiple of 512 B (cuDNN asks for odd sizes: 61051664 B at ResNet-18 batch 16 is
        a multiple of 16 but not of 512).  Measured on ResNet-18 (truth sweeps at batch
        16/32/48/64), such a workspace is a per-sample part plus a fixed part (often one
        convolution weight's size: 9 MiB for 512x512x3x3 fp32), and cuDNN switches
        algorithm between batches (98.1 MiB at 64, 24.6 MiB at 32: a quarter, not a
        half), so one recording cannot tell its size at another batch."""
        w = self.scales & (self.size > TINY_BYTES)
        if self.transient is not None:
            w &= self.transient
        # Divisibility of the few candidates only (a remainder per request is costly).
        rows = np.flatnonzero(w)
        size = self.size[rows]
        odd = size % 512 != 0
        if self.batch:
            odd |= size % int(self.batch) != 0
        w[rows] = odd
        return w

    def scaled_sizes(
        self, scale: float | Fraction, uncertain_factor: Fraction | int = 1
    ) -> np.ndarray:
        """Requested sizes with the batch scaled by ``scale``, rounded up to whole bytes.

        With the recorded batch known, ``scale`` is taken as a fraction of it,
        so a per-sample size times the new batch is exact.  A workspace with a fixed
        part (:attr:`fixed`, :mod:`.workspaces`) keeps it and scales the rest."""
        f = Fraction(scale).limit_denominator(1 << 20) if not isinstance(scale, Fraction) else scale
        out = self.size.copy()
        m = self.scales
        # ceil(size * p / q) in integers, no float rounding on large sizes.
        out[m] = -((-self.size[m] * f.numerator) // f.denominator)
        if self.fixed is not None:
            w = m & (self.fixed > 0)
            keep = np.minimum(self.fixed[w], self.size[w])
            out[w] = keep + (-((-(self.size[w] - keep) * f.numerator) // f.denominator))
        if self.staging is not None:
            out[self.staging.rows] = self.staging.point(f)
        if uncertain_factor != 1:
            u = self.uncertain
            g = Fraction(uncertain_factor) * f
            out[u] = np.maximum(-((-self.size[u] * g.numerator) // g.denominator), 1)
        return out

    def row_masks(self) -> list[tuple[str, bool, str, np.ndarray]]:
        """(rule, scales, reason, bool per request) of each line of :meth:`summary`: the
        rules, with the reductions' staging buffers (:attr:`staging`) on lines of their own
        (their size at another batch is their model's, not their rule's)."""
        is_alloc = self.rule != NOT_AN_ALLOCATION
        staged = np.zeros(len(self.rule), bool)
        capped = np.zeros(len(self.rule), bool)
        if self.staging is not None:
            staged[self.staging.rows] = True
            capped[self.staging.rows[self.staging.capped]] = True
        out = []
        for code in range(len(RULES) - 1):
            out.append(
                (
                    RULES[code],
                    code in SCALED_RULES,
                    REASONS[code],
                    (self.rule == code) & is_alloc & ~staged,
                )
            )
        out.append(("reduction_staging", True, STAGING_REASON, staged & ~capped))
        out.append(("staging_at_cap", False, STAGING_CAP_REASON, capped))
        return out

    def summary(self) -> list[dict]:
        """Per rule: how many allocations and requested bytes it judged, largest first."""
        rows: list[dict[str, Any]] = []
        for rule, scales, reason, m in self.row_masks():
            if not m.any():
                continue
            rows.append(
                {
                    "rule": rule,
                    "scales": scales,
                    "reason": reason,
                    "allocations": int(m.sum()),
                    "requested_bytes": int(self.size[m].sum()),
                }
            )
        rows.sort(key=lambda r: -r["requested_bytes"])
        return rows


def _state_by_category(evd: ev.Evidence) -> np.ndarray:
    """Model state by the categories package, where it decided it (not guessed), plus the
    temporaries it names as library workspaces or optimizer scratch."""
    assert evd.categories is not None  # callers check
    fixed = evd.category_in(*FIXED_CATEGORIES)
    if evd.category_guess is not None:
        fixed &= ~evd.category_guess
    if evd.category_reasons is not None:
        fixed |= evd.reason_in(*FIXED_REASONS)
    return fixed


# torch.compile: what Inductor's frames say that the evidence's phases cannot.  A compiled
# backward runs AOT autograd's Python wrapper on the autograd thread, so its allocations
# have Python frames (the generated ``<hash>.py`` ``call``) and read as forward; the
# wrapper's backward functions tell them apart.
_AOT_DIR = "/torch/_functorch/_aot_autograd/"
_AOT_BACKWARD = {
    "_backward_impl",
    "call_compiled_backward",
    "backward",
    "_backward_prologue",
    "_backward_epilogue",
}
_COMPILED_AUTOGRAD = "/torch/_dynamo/compiled_autograd.py"
_INDUCTOR = "/torch/_inductor/"
# Autotuning, once per compiled shape: the benchmark's own buffers (the cache flush that
# Triton's do_bench-like timing writes between runs: the L2's size), and the copies it
# makes of a kernel's arguments so that a kernel writing in place can run again.
_BENCHMARK_FILES = ("runtime/benchmarking.py", "/testing.py")
_ARG_COPY_FUNCS = {
    "clone_preserve_strides",
    "maybe_clone_args",
    "clone_args",
    "copy_args_to_cpu_if_needed",
    "benchmark_example_value",
    "generate_example_value",
}
NO_TUNING, BENCHMARK_SCRATCH, ARG_COPY = range(3)
# Steps every copy walks back together over freed candidates before the rest go one by one.
_WALK_STEPS = 32
# What runs Inductor's generated code (its file sits in a ``torchinductor_<user>`` cache).
_GENERATED_CALLER = "/torch/_inductor/output_code.py"


def _compiled_site(snap, stack: int) -> tuple[bool, int, bool]:
    """(made in a compiled backward, tuning kind, made by compiled code) of one stack."""
    backward = False
    compiled = False
    tuning = NO_TUNING
    first_inductor = True
    for f in snap.stacks.frame_ids(stack).tolist():
        fn = snap.frames.filename_of(f).replace("\\", "/")
        name = snap.frames.name_of(f)
        if _INDUCTOR in fn and first_inductor:
            # The innermost Inductor frame says what made it; outer ones are the
            # generated code and its launcher, which make every buffer.
            first_inductor = False
            if fn.endswith(_BENCHMARK_FILES):
                tuning = BENCHMARK_SCRATCH
            elif name in _ARG_COPY_FUNCS:
                tuning = ARG_COPY
        elif name in _ARG_COPY_FUNCS and _INDUCTOR in fn and tuning == NO_TUNING:
            tuning = ARG_COPY
        if (_AOT_DIR in fn and name in _AOT_BACKWARD) or fn.endswith(_COMPILED_AUTOGRAD):
            backward = True
        if "torchinductor_" in fn or fn.endswith(_GENERATED_CALLER):
            compiled = True
    return backward, tuning, compiled


def compiled_evidence(case, evd: ev.Evidence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(phase, tuning, compiled) per request: the evidence's phase with torch.compile's
    backward told apart (:data:`_AOT_BACKWARD`), what Inductor's autotuning made
    (:data:`NO_TUNING` / :data:`BENCHMARK_SCRATCH` / :data:`ARG_COPY`), and whether
    Inductor's generated code made it."""
    snap = case.snap
    phase = evd.phase.copy()
    n = len(phase)
    tuning = np.zeros(n, np.int8)
    compiled = np.zeros(n, bool)
    site = evd.site
    stacks, top = ev.stack_table(site)
    if not len(stacks):
        return phase, tuning, compiled
    got = [_compiled_site(snap, int(st)) for st in stacks.tolist()]
    # Each answer spread from a table by stack id (none for "no stack"), and only where
    # some stack has it: an eager program's have none.
    back = np.zeros(top + 1, bool)
    back[stacks] = [g[0] for g in got]
    kind = np.zeros(top + 1, np.int8)
    kind[stacks] = [g[1] for g in got]
    gen = np.zeros(top + 1, bool)
    gen[stacks] = [g[2] for g in got]
    if back.any():
        phase[back[site] & (phase == ev.FORWARD)] = ev.BACKWARD
    if kind.any():
        tuning = kind[site]
    if gen.any():
        compiled = gen[site]
    return phase, tuning, compiled


def _copied_from(reqs, free_at: np.ndarray, copies: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """Per copy (request index), the latest ``sources`` allocation of its size still alive
    when the copy was made (what autotuning copied); -1 where none is."""
    out = np.full(len(copies), -1, np.int64)
    src = np.flatnonzero(sources)
    if not len(copies) or not len(src):
        return out
    size = np.asarray(reqs.size, np.int64)
    n = len(size) + 1
    # Sources ordered by (size, index) under one int64 key (size's rank, then index), so a
    # copy's candidates are one run of it, latest last, found by one sorted search.
    sizes = np.unique(size[src])
    key = np.searchsorted(sizes, size[src]) * n + src
    order = np.argsort(key, kind="stable")
    key, src = key[order], src[order]
    rank = np.searchsorted(sizes, size[copies])
    has = sizes[np.minimum(rank, len(sizes) - 1)] == size[copies]
    first = np.searchsorted(key, rank * n)  # the copy's size's first candidate
    pos = np.searchsorted(key, rank * n + copies) - 1  # its latest candidate made before it
    # Walk back from there, all copies at once; each step drops those that found theirs.
    todo = np.flatnonzero(has & (pos >= first))
    for _ in range(_WALK_STEPS):
        if not len(todo):
            return out
        j = src[pos[todo]]
        alive = free_at[j] > copies[todo]
        out[todo[alive]] = j[alive]
        todo = todo[~alive]
        pos[todo] -= 1
        todo = todo[pos[todo] >= first[todo]]
    # The few with a long run of freed candidates: one by one, each step cheaper than a
    # pass over the arrays.
    for k in todo.tolist():
        i = int(copies[k])
        for p in range(int(pos[k]), int(first[k]) - 1, -1):
            j = int(src[p])
            if free_at[j] > i:
                out[k] = j
                break
    return out


def _before_first_forward(reqs, evd: ev.Evidence) -> np.ndarray:
    """Per request: made before the recording's first forward pass (the categories'
    phases; none without them), kept to the end.  Model state the program makes after
    building the model (part of it cast to fp32, as peft's k-bit preparation does) reads
    as forward to the evidence's own phases, which end the set-up at the last module
    state made."""
    from ..categories.iterations import PH_FORWARD

    bd = evd.breakdown
    first = bd.phases.first_of(PH_FORWARD) if bd is not None and bd.n_events else None
    if first is None:
        return np.zeros(len(reqs), bool)
    return (reqs.event < first) & (evd.free_at == len(reqs)) & (reqs.kind == rq.ALLOC)


def state_sizes(case, evd: ev.Evidence, by_category: np.ndarray | None = None) -> np.ndarray:
    """Sorted requested sizes of model-state tensors: made by nn.Module, kept
    optimizer allocations, and blocks alive before the recording that it never frees.
    ``by_category``: :func:`_state_by_category` of ``evd`` when the caller has it."""
    reqs = case.requests
    n = len(reqs)
    made = (evd.provenance == ev.PROV_MODULE_STATE) | (
        (evd.phase == ev.OPTIMIZER) & (evd.free_at == n)
    )
    if evd.categories is not None:
        made |= by_category if by_category is not None else _state_by_category(evd)
    sizes = [_size_index(reqs, evd).distinct(made & (reqs.kind == rq.ALLOC))]
    init = reqs.initial
    if init.n_blocks:
        freed = set((-reqs.ref[reqs.ref <= -2] - 2).tolist())
        keep = np.array([j not in freed for j in range(init.n_blocks)], bool)
        live = keep & (init.blk_state == 0)
        sizes.append(init.blk_requested[live])
    s = np.unique(np.concatenate(sizes).astype(np.int64))
    return s[s >= STATE_SIZE_MIN]


def _size_index(reqs, evd: ev.Evidence) -> ev.SizeIndex:
    """The evidence's index of the requests' sizes when it is of ``reqs`` (it is made
    beside the categories), else one made now."""
    if evd.sizes is not None and evd.sizes.size is reqs.size:
        return evd.sizes
    return ev.SizeIndex(reqs.size.astype(np.int64))


def cut_off(reqs, evd: ev.Evidence, never: np.ndarray) -> np.ndarray:
    """Never-freed allocations that were alive only because the recording ended.

    Those made in the last, unfinished iteration (when iterations are
    known), and those whose call site made and freed allocations before
    them but none after (the previous step's outputs, still referenced when
    the recording stopped).  A workspace made first at a site that goes on
    making and freeing outputs has freed allocations after it: kept."""
    n = len(reqs)
    alloc = reqs.kind == rq.ALLOC
    freed = np.flatnonzero(alloc & (evd.free_at < n))
    # Stack ids (-1: none) shifted to index a table: the last freed allocation per site
    # (-1: the site freed none).  Made and freed before i and none after: the last before i.
    site = evd.site.astype(np.int64) + 1
    last_freed = np.full(int(site.max(initial=0)) + 1, -1, np.int64)
    np.maximum.at(last_freed, site[freed], freed)
    rows = np.flatnonzero(never)
    last = last_freed[site[rows]]
    out = np.zeros(n, bool)
    out[rows] = (last >= 0) & (last < rows)
    if evd.n_iterations:
        out |= never & (evd.iteration >= evd.n_iterations)
    return out


def judge(case, batch: int | None = None, evd: ev.Evidence | None = None) -> Judgement:
    """Judge every request of ``case`` (a what-if Case); ``batch``: the recorded batch size."""
    evd = evd if evd is not None else ev.gather(case)
    phase, tuning, compiled = compiled_evidence(case, evd)
    if (phase != evd.phase).any():
        evd = dataclasses.replace(evd, phase=phase)
    reqs = case.requests
    n = len(reqs)
    size = reqs.size.astype(np.int64)
    sizes = _size_index(reqs, evd)
    rule = np.full(n, NOT_AN_ALLOCATION, np.int8)
    todo = (reqs.kind == rq.ALLOC) | (reqs.kind == rq.OOM)

    def assign(mask: np.ndarray | None, code: int) -> None:
        """Judge by ``code`` the requests of ``mask`` (None: all) not judged yet."""
        m = todo & mask if mask is not None else todo.copy()
        np.copyto(rule, code, where=m)
        todo[...] = todo & ~m

    assign(size <= TINY_BYTES, TINY)
    assign(tuning == BENCHMARK_SCRATCH, TUNING_SCRATCH)
    # A copy of a kernel argument is judged like the buffer it copies, once that is judged;
    # one with no live buffer of its size goes through the rules like any other.
    copies = np.flatnonzero(todo & (tuning == ARG_COPY))
    src = _copied_from(reqs, evd.free_at, copies, (reqs.kind == rq.ALLOC) & (tuning == 0))
    copies, src = copies[src >= 0], src[src >= 0]
    todo[copies] = False
    by_category = _state_by_category(evd) if evd.categories is not None else None
    if by_category is not None:
        # Guessed state falls through to the size rule: a guessed "gradient" that
        # has no parameter's size is an activation's gradient, and scales.
        assign(by_category, CATEGORY_FIXED)
    assign(evd.phase == ev.OPTIMIZER, OPTIMIZER)
    assign(evd.provenance == ev.PROV_MODULE_STATE, MODULE_STATE)
    states = state_sizes(case, evd, by_category)
    if len(states):
        # Before the categories' activations: autocast's weight copies are saved for
        # backward (an activation by lifetime) yet are half a parameter's size.
        # A parameter's exact size in forward is an activation that happens to match
        # (GPT-2 at batch 4: 4 x 256 x 384 fp32 = the position table, 1.5 MiB); what
        # forward makes of the weights is autocast's half-size copies.
        exact = sizes.isin(states) & ((evd.phase != ev.FORWARD) | _before_first_forward(reqs, evd))
        # In backward, a parameter-sized allocation that is freed inside the pass and has
        # the size of something forward made is that activation's gradient (GPT-2 at batch
        # 4: 4 x 256 x 384 fp32 = the position table); a gradient outlives the pass, and a
        # tied weight's summed gradients have no forward twin.
        n = len(reqs)
        in_pass = (evd.phase == ev.BACKWARD) & (evd.free_at < n)
        rows = np.flatnonzero(in_pass)
        in_pass[rows] = evd.phase[evd.free_at[rows]] == ev.BACKWARD  # freed in backward
        made_forward = sizes.distinct((reqs.kind == rq.ALLOC) & (evd.phase == ev.FORWARD))
        twin = in_pass & sizes.isin(made_forward)
        if evd.categories is not None:
            twin &= ~evd.category_in("gradient")
        exact &= ~twin
        assign(exact | sizes.isin(states, 2), STATE_SIZE)
    if evd.categories is not None:
        assign(evd.category_in(*SCALED_CATEGORIES), CATEGORY_SCALED)
    # No rule from divisibility by the batch: cuDNN convolution workspaces are not
    # multiples of it, yet grow with it (measured: 116.4 MiB at batch 32, 58.2 MiB at 16).
    never = (evd.free_at == n) & (reqs.kind == rq.ALLOC)
    if never.any():
        assign(never & cut_off(reqs, evd, never), CUT_OFF)
        kept = todo & never
        site = evd.site.astype(np.int64)
        uniq, inv = np.unique(site[kept], return_inverse=True)
        per_site = np.bincount(inv, minlength=len(uniq))
        count = np.zeros(n, np.int64)
        count[kept] = per_site[inv]
        assign(kept & (count >= 2), KEPT_EACH)
        assign(kept & evd.user_line & (evd.phase == ev.FORWARD), INPUT_ONCE)
        assign(kept, KEPT_ONCE)
    assign(None, PER_ITERATION)
    if len(copies):
        rule[copies] = np.where(
            ev.one_of(rule[src], SCALED_RULES), TUNING_COPY_SCALED, TUNING_COPY_FIXED
        )
    allocs = np.flatnonzero(reqs.kind == rq.ALLOC)
    transient = np.zeros(n, bool)
    transient[allocs] = evd.free_at[allocs] == allocs + 1
    j = Judgement(rule=rule, size=size, batch=batch, transient=transient)
    kept_sizes = sizes.distinct((reqs.kind == rq.ALLOC) & ~transient)
    scales, workspace = j.scales, j.workspace
    scratch = transient & scales & ~workspace & (size > TINY_BYTES) & ~sizes.isin(kept_sizes)
    judged_fixed = ev.one_of(rule, (STATE_SIZE, CATEGORY_FIXED, MODULE_STATE))
    model = workspaces.fixed_parts(case, evd, workspace, scales, judged_fixed, batch, scratch)
    j.fixed, j.fixed_how, j.operands = model.fixed, model.how, model.operands
    j.staging = reductions.staging(case, evd.free_at, scales & (size > TINY_BYTES) & ~workspace)
    j.maybe_workspace = model.maybe
    j.scratch = unexplained_scratch(reqs, evd, j, sizes)
    j.guessed = (
        _guessed(reqs, evd, j, states, compiled, sizes)
        | j.scratch
        | _half_by_size_alone(reqs, evd, j, states, sizes)
    )
    j.tuned = (tuning != NO_TUNING) & (reqs.kind == rq.ALLOC) & (size > TINY_BYTES)
    return j


def half_copies_seen(reqs, evd: ev.Evidence, sizes: ev.SizeIndex | None = None) -> bool:
    """Whether forward makes half-size copies of the weights (autocast's bf16 / fp16 casts
    of fp32 parameters): of at least half the distinct even parameter sizes, so that
    activations that happen to have such a size do not count.  True without categories
    (nothing to tell them by) or with fewer than two such sizes.  ``sizes``: the
    :class:`.evidence.SizeIndex` of ``reqs.size`` when the caller has it."""
    if evd.categories is None:
        return True
    sizes = sizes if sizes is not None else _size_index(reqs, evd)
    alloc = reqs.kind == rq.ALLOC
    params = alloc & evd.category_in("parameter")
    param_sizes = sizes.distinct(params)
    halves = param_sizes[param_sizes % 2 == 0] // 2
    halves = halves[halves >= STATE_SIZE_MIN]
    if len(halves) < 2:
        return True
    fwd = alloc & (evd.phase == ev.FORWARD) & ~params
    return int(np.isin(halves, sizes.distinct(fwd)).sum()) >= len(halves) / 2


def _half_by_size_alone(
    reqs, evd: ev.Evidence, j: Judgement, states: np.ndarray, sizes: ev.SizeIndex
) -> np.ndarray:
    """Bool per request: made in forward and kept at any batch as autocast's half-size copy
    of a weight (:data:`STATE_SIZE`, half a model-state size) in a recording whose forward
    does not make such copies (:func:`half_copies_seen`): an activation may have that size
    by chance (Llama's fp32 attention scores at batch 8, 16 MiB, half its 32 MiB embedding;
    kept at batch 4, the exact-labelled point was 3.8 % above the real peak, scaled it is
    the real peak), so the size alone judged it."""
    n = len(reqs)
    if not len(states) or half_copies_seen(reqs, evd, sizes):
        return np.zeros(n, bool)
    half = sizes.isin(states, 2) & ~sizes.isin(states)
    return half & (j.rule == STATE_SIZE) & (evd.phase == ev.FORWARD) & (reqs.kind == rq.ALLOC)


def live_peak(reqs, evd: ev.Evidence) -> int:
    """The recording's peak of requested bytes alive at once (blocks from before it
    included): the evidence's, made beside the categories, when it is of ``reqs``."""
    if evd.live_peak_bytes is not None and evd.sizes is not None and evd.sizes.size is reqs.size:
        return evd.live_peak_bytes
    return ev.live_peak_of(reqs, evd.free_at)


def unexplained_scratch(
    reqs, evd: ev.Evidence, j: Judgement, sizes: ev.SizeIndex | None = None
) -> np.ndarray:
    """Bool per request: a scratch buffer whose size at another batch the recording cannot
    tell and that is large enough to break an exact label.

    Scaled by the last rule alone (:data:`PER_ITERATION`: nothing in the recording says it
    holds per-sample data), made and dropped inside one operation (freed before the next
    allocation above :data:`TINY_BYTES`), of a size that no allocation outliving its
    operation and none made in forward has (a library's scratch, whose size the library
    chooses: BERT's masked-LM backward asks for 125 MiB at batch 4 and 132.8 MiB at both 8
    and 12 at one such point, where scaling it put the predicted peak 15 % off while every
    other request matched to the byte; that one is a reduction's staging buffer, sized at
    the point by :mod:`.reductions` where the GPU is known), and larger than
    :data:`EXACT_ERROR` of the recording's peak of live bytes.  Such buffers are alive one
    at a time, so one smaller than that, read either way, moves the peak by less than an
    exact label allows (GPT-2's backward scratch of 12 and 24 MiB: the same peak to the byte
    either way).  Judged both ways by the estimate's range (:attr:`Judgement.guessed`).
    ``sizes``: the :class:`.evidence.SizeIndex` of ``j.size`` when the caller has it."""
    n = len(reqs)
    size = j.size
    big = (reqs.kind == rq.ALLOC) & (size > TINY_BYTES)
    idx = np.flatnonzero(big)
    if not len(idx):
        return np.zeros(n, bool)
    sizes = sizes if sizes is not None else ev.SizeIndex(size)
    # Freed before the next such allocation (the stream's end after the last one).
    one_op = np.zeros(n, bool)
    one_op[idx] = evd.free_at[idx] < np.append(idx[1:], n)
    explained = sizes.distinct(big & (~one_op | (evd.phase == ev.FORWARD)))
    out = one_op & (j.rule == PER_ITERATION) & ~sizes.isin(explained)
    if out.any():
        out &= size > int(live_peak(reqs, evd) * EXACT_ERROR)
    return out


def _guessed(
    reqs,
    evd: ev.Evidence,
    j: Judgement,
    states: np.ndarray,
    compiled: np.ndarray,
    sizes: ev.SizeIndex,
) -> np.ndarray:
    """:attr:`Judgement.guessed`: allocations of Inductor's generated code (``compiled``)
    whose size is both a model-state tensor's (or half one: autocast's copies) and that of
    an allocation judged to scale, and that are not state by lifetime (parameters and
    buffers made before the first iteration and kept, the optimizer's state, library
    workspaces); and its temporaries judged fixed by :data:`STATE_SIZE`: made and freed in
    one pass, where fused kernels leave no forward activation of the same size to tell an
    activation's gradient by (ViT-S at batch 32: attention-backward scratch of
    32 x 6 x 197 fp32, a parameter's size, where forward saved a padded 32 x 6 x 200)."""
    n = len(reqs)
    alloc = reqs.kind == rq.ALLOC
    size = j.size
    # Both kinds are made by generated code: none without it (an eager program).
    if not len(states) or not compiled.any():
        return np.zeros(n, bool)
    freed_in = evd.phase[np.minimum(evd.free_at, n - 1)]
    temp = alloc & compiled & (j.rule == STATE_SIZE) & (evd.free_at < n) & (freed_in == evd.phase)
    scaled = sizes.distinct(alloc & j.scales & (size > TINY_BYTES))
    both = scaled[np.isin(scaled, states) | np.isin(scaled * 2, states)]
    if not len(both):
        return temp
    # Eager code keeps its module frames and autograd's activation gradients have their
    # activation's size, so there the phase and the forward twin decide; only in generated
    # code is a shared size all there is to go by.
    out = alloc & compiled & sizes.isin(both)
    out &= ~ev.one_of(
        j.rule,
        (TINY, OPTIMIZER, MODULE_STATE, TUNING_SCRATCH, TUNING_COPY_FIXED, TUNING_COPY_SCALED),
    )
    out &= evd.phase != ev.OPTIMIZER
    out &= ~((evd.free_at == n) & (evd.phase == ev.SETUP))
    if evd.categories is not None:
        sure = evd.category_in("parameter", "optimizer_state")
        if evd.category_guess is not None:
            sure &= ~evd.category_guess
        if evd.category_reasons is not None:
            sure |= evd.reason_in(*FIXED_REASONS)
        out &= ~sure
    return out | temp
