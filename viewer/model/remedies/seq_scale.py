"""Sequence-length what-if: the recorded run re-simulated with the sequence scaled.

A language model's tensors grow three ways with its sequence (context) length ``T``:

* not at all: parameters, gradients, optimizer state, library workspaces sized by the
  model (everything :mod:`.scaling` judges fixed for the batch);
* linearly: what has a token axis, i.e. what grows with the batch too (inputs,
  activations, logits, their gradients and temporaries; sdpa's flash and
  memory-efficient kernels keep attention linear: an output and a log-sum-exp per token);
* with the square: attention scores ``B x H x T x T`` where the attention is computed
  eagerly (``eager_attention_forward``: the scores, their scaled, masked, softmaxed and
  dropped-out copies, and their gradients in backward), sdpa's math fallback (a float
  bias such as T5's relative positions: the same scores inside
  ``scaled_dot_product_attention``) and the ``T x T`` masks and position biases.

A recording has sizes, not shapes, so the square is judged from the frames and the
order of the requests (:data:`SPECS`, one small rule each, tried in order), never from
divisibility (at ``T = 256`` a GPT-2 layer's ``B x 6 x T x T`` scores are exactly the
``B x T x 4D`` MLP activation).  Backward runs on autograd's thread without Python
frames: a backward allocation with the size of a forward square is a square (its
gradient) unless a linear forward tensor has that size too, then it is in doubt.

The judgement (:class:`SeqJudgement`) is a :class:`~.scaling.Judgement` whose sizes scale
with ``f`` or ``f**2`` (:meth:`SeqJudgement.scaled_sizes`), so the batch what-if's
simulation and the doubt draws of :mod:`.batch_ranges` (library workspaces, autotuning,
size coincidences) carry over unchanged.  A sequence prediction is always an
**estimate**: kernels and their workspaces are chosen per shape, and the allocator packs
other sizes otherwise; :func:`estimate_range` gives its range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..core import parallel
from ..core.units import format_bytes as fb
from ..whatif import Case, Prediction, native_sim
from ..whatif import requests as rq
from ..whatif.run import SimResult
from . import evidence as ev
from . import scaling
from .batch_ranges import doubt_draws, exact_scale
from .batch_scale import MAX_SCALE, ScaledCase

FIXED, LINEAR, SQUARE = 0, 1, 2
POWER_WORDS = ("fixed", "linear", "square")

# Functions that compute attention eagerly (transformers' ``eager_attention_forward`` in
# every model, older GPT-2's ``_attn``): their scores are materialised.
EAGER_FUNCS = ("eager_attention_forward", "_attn", "_upcast_and_reordered_attn")
# Functions that call ``scaled_dot_product_attention``: flash and memory-efficient
# kernels keep them linear, the math fallback (a float mask on fp32) does not.
SDPA_FUNCS = ("sdpa_attention_forward", "scaled_dot_product_attention")
# torch.nn.MultiheadAttention's function: sdpa without weights, the scores materialised
# with ``need_weights=True`` (its default), so judged like sdpa's math fallback.
TORCH_ATTENTION = ("multi_head_attention_forward",)
# Functions that build ``T x T`` masks or position biases (transformers' masking utils,
# T5's relative position bias); a padding mask ``B x 1 x 1 x T`` they also build is linear,
# so their squares are in doubt.
MASK_FUNCS = (
    "causal_mask_function",
    "sdpa_mask",
    "eager_mask",
    "create_causal_mask",
    "_preprocess_mask_arguments",
    "_prepare_4d_causal_attention_mask",
    "_prepare_4d_causal_attention_mask_for_sdpa",
    "_prepare_4d_attention_mask",
    "_prepare_4d_attention_mask_for_sdpa",
    "_expand_mask",
    "_make_causal_mask",
    "compute_bias",
    "_relative_position_bucket",
)
# Frames that say the program runs attention over a sequence at all.
SEQUENCE_MARKS = (*EAGER_FUNCS, *SDPA_FUNCS, *TORCH_ATTENTION, "flash_attn_func")

# Fixed-for-the-batch rules that judge by a size alone: an attention frame outranks them.
OVERRIDABLE = (scaling.STATE_SIZE, scaling.NOT_MULTIPLE)
MIN_SQUARE = 1024  # smaller requests are masks' scalars and shapes, not scores


@dataclass(frozen=True)
class SquareSpec:
    """One rule that finds allocations growing with the square of the sequence:
    ``find(runs)`` returns (square, in doubt) masks over the requests."""

    name: str
    reason: str
    find: Callable[[Runs], tuple[np.ndarray, np.ndarray]]


@dataclass
class Runs:
    """The forward requests grouped into runs of consecutive allocations whose innermost
    frame outside torch is one function (one call of it): ``fn`` per request (the
    function's name, "" where none), ``run`` per request (-1 outside any run)."""

    size: np.ndarray
    alloc: np.ndarray
    fn: np.ndarray  # object
    run: np.ndarray  # int64
    phase: np.ndarray

    def of(self, names: tuple[str, ...]) -> list[np.ndarray]:
        """Request indices of every run of one of the functions ``names``."""
        hit = self.alloc & np.isin(self.fn, names) & (self.run >= 0)
        if not hit.any():
            return []
        ids = self.run[hit]
        idx = np.flatnonzero(hit)
        return [idx[ids == r] for r in np.unique(ids)]


def _eager_scores(runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    # The last tensor an eager attention call makes is its output (``attn @ v``, then
    # transposed): linear; what it made before at another size is the scores and their
    # copies (scaled, masked, softmaxed in fp32, cast back, dropped out).
    sq = np.zeros(len(runs.size), bool)
    for idx in runs.of(EAGER_FUNCS):
        out = runs.size[idx[-1]]
        sq[idx[(runs.size[idx] != out) & (runs.size[idx] >= MIN_SQUARE)]] = True
    return sq, np.zeros_like(sq)


def _sdpa_math(runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    # sdpa's math fallback runs the eager computation inside one call: scores larger than
    # the call's output, made at least twice (scores, softmax).  Flash and efficient
    # kernels make an output, a log-sum-exp and seeds, no size twice beyond the output's.
    sq = np.zeros(len(runs.size), bool)
    doubt = np.zeros(len(runs.size), bool)
    for idx in runs.of((*SDPA_FUNCS, *TORCH_ATTENTION)):
        s = runs.size[idx]
        big = s[s > scaling.TINY_BYTES]
        if not len(big):
            continue
        # The call's most common large size (ties: the larger) is its q/k/v and output.
        sizes, counts = np.unique(big, return_counts=True)
        out = sizes[len(counts) - 1 - int(np.argmax(counts[::-1]))]
        rep = sizes[(counts >= 2) & (sizes >= 2 * out) & (sizes >= MIN_SQUARE)]
        m = np.isin(s, rep)
        sq[idx[m]] = True
        doubt[idx[m]] = True  # a kernel's workspace could look the same
    return sq, doubt


def _masks(runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    sq = np.zeros(len(runs.size), bool)
    for idx in runs.of(MASK_FUNCS):
        sq[idx[runs.size[idx] >= MIN_SQUARE]] = True
    return sq, sq.copy()


#: The rules that find squares, tried in order (one registered spec each).
SPECS: tuple[SquareSpec, ...] = (
    SquareSpec(
        "eager_scores",
        "attention scores of eager attention (and their softmax, mask, dropout)",
        _eager_scores,
    ),
    SquareSpec(
        "sdpa_math",
        "scores of sdpa's math fallback (a float bias or mask: materialised like eager)",
        _sdpa_math,
    ),
    SquareSpec("masks", "a T x T attention mask or position bias", _masks),
    SquareSpec(
        "square_gradient",
        "made in backward with the size of a forward square: its gradient",
        lambda runs: (np.zeros(len(runs.size), bool),) * 2,  # filled in judge()
    ),
)
SPEC_NAMES = tuple(s.name for s in SPECS)


@dataclass
class SeqJudgement(scaling.Judgement):
    """How each request scales with the sequence: :attr:`power` 0 (fixed), 1 (linear) or
    2 (square), on top of the batch :class:`~.scaling.Judgement` whose fixed/scaled rules
    it keeps; :attr:`square_rule` names the :data:`SPECS` rule that found a square (-1:
    none); :attr:`square_doubt`: a square that could be linear (drawn both ways in the
    estimate's range)."""

    power: np.ndarray | None = None
    square_rule: np.ndarray | None = None
    square_doubt: np.ndarray | None = None
    seq: int | None = None
    is_sequence_model: bool = False
    attention: str | None = None  # "eager", "sdpa", "eager and sdpa" or None

    @property
    def scales(self) -> np.ndarray:
        assert self.power is not None
        return self.power > 0

    def scaled_sizes(
        self, scale: float | Fraction, uncertain_factor: Fraction | int = 1
    ) -> np.ndarray:
        """Requested sizes with the sequence scaled by ``scale``: linear ones times it, the
        squares times its square, rounded up to whole bytes."""
        f = exact_scale(scale)
        out = super().scaled_sizes(f)
        assert self.power is not None
        q = self.power == SQUARE
        f2 = f * f
        out[q] = -((-self.size[q] * f2.numerator) // f2.denominator)
        return out

    def with_power(self, power: np.ndarray) -> SeqJudgement:
        """The same judgement with other powers (a draw of the doubtful squares)."""
        return dataclasses.replace(self, power=power)

    def summary(self) -> list[dict]:
        """Per power and rule: how many allocations and requested bytes, largest first."""
        assert self.power is not None and self.square_rule is not None
        alloc = self.rule != scaling.NOT_AN_ALLOCATION
        rows = []
        for p in (SQUARE, LINEAR, FIXED):
            for code in range(-1, len(SPECS)):
                m = alloc & (self.power == p) & (self.square_rule == code)
                if not m.any():
                    continue
                if p == SQUARE:
                    reason = SPECS[code].reason
                    name = SPECS[code].name
                elif p == LINEAR:
                    name, reason = "token_axis", "grows with the batch, so with the tokens too"
                else:
                    name, reason = "model_state", "fixed at any batch: model state, workspaces"
                rows.append(
                    {
                        "rule": name,
                        "grows": POWER_WORDS[p],
                        "reason": reason,
                        "allocations": int(m.sum()),
                        "requested_bytes": int(self.size[m].sum()),
                    }
                )
        return rows


def _inner_functions(snap, sites: np.ndarray) -> dict[int, str]:
    """The innermost frame's function outside torch (or torch's own attention,
    :data:`TORCH_ATTENTION`), per stack id."""
    out: dict[int, str] = {}
    for st in np.unique(sites[sites >= 0]).tolist():
        name = ""
        ids = snap.stacks.frame_ids(int(st)).tolist()
        # Torch's attention only where it made the tensor itself (its in-projection's
        # frame is a function of its own, whose outputs are linear).
        if ids and snap.frames.name_of(ids[0]) in TORCH_ATTENTION:
            out[int(st)] = snap.frames.name_of(ids[0])
            continue
        for f in ids:
            fn = snap.frames.filename_of(f).replace("\\", "/")
            if ("/torch/" in fn and "/site-packages/torch/" in fn) or fn.startswith("<"):
                continue
            name = snap.frames.name_of(f)
            break
        out[int(st)] = name
    return out


def _marks(snap, sites: np.ndarray) -> set[str]:
    """The attention functions any stack of the stream names."""
    seen: set[str] = set()
    for st in np.unique(sites[sites >= 0]).tolist():
        for f in snap.stacks.frame_ids(int(st)).tolist():
            name = snap.frames.name_of(f)
            if name in SEQUENCE_MARKS:
                seen.add(name)
    return seen


def judge(case: Case, seq: int | None = None, evd: ev.Evidence | None = None) -> SeqJudgement:
    """Judge every request of ``case`` for the sequence axis; ``seq``: the recorded length."""
    evd = evd if evd is not None else ev.gather(case)
    base = scaling.judge(case, None, evd)
    reqs = case.requests
    n = len(reqs)
    alloc = reqs.kind == rq.ALLOC
    size = base.size
    site = evd.site.astype(np.int64)
    names = _inner_functions(case.snap, site)
    # Per request through its stack's index (one lookup per stack, not per request).
    uniq, inv = np.unique(site, return_inverse=True)
    per_stack = np.array([names.get(int(u), "") if u >= 0 else "" for u in uniq.tolist()], object)
    fn = per_stack[inv] if len(site) else np.zeros(0, object)
    # Runs: consecutive forward allocations with one innermost function.
    fwd = alloc & (evd.phase == ev.FORWARD) & (fn != "")
    run = np.full(n, -1, np.int64)
    idx = np.flatnonzero(fwd)
    if len(idx):
        a = idx[:-1]
        b = idx[1:]
        new = np.ones(len(idx), bool)
        new[1:] = fn[b] != fn[a]
        run[idx] = np.cumsum(new) - 1
    runs = Runs(size, alloc, fn, run, evd.phase)
    power = np.where(base.scales, LINEAR, FIXED).astype(np.int8)
    square_rule = np.full(n, -1, np.int8)
    doubt = np.zeros(n, bool)
    # Frames outrank a size coincidence: scores of B x H x T x T may have a weight's size
    # (Llama at T = 256: 16 MiB, a 1024 x 4096 fp32 MLP weight).
    open_ = base.scales | np.isin(base.rule, OVERRIDABLE)
    for code, spec in enumerate(SPECS):
        sq, dbt = spec.find(runs)
        new = sq & (square_rule < 0) & open_ & (evd.phase == ev.FORWARD)
        square_rule[new] = code
        doubt |= dbt & new
    forward_sq = square_rule >= 0
    # Backward: a square's gradient has its size; a size that a linear forward tensor has
    # too could be either.
    sq_sizes = np.unique(size[forward_sq])
    lin_sizes = np.unique(size[alloc & (evd.phase == ev.FORWARD) & base.scales & ~forward_sq])
    back = alloc & (evd.phase == ev.BACKWARD) & base.scales & np.isin(size, sq_sizes)
    g = SPEC_NAMES.index("square_gradient")
    square_rule[back & (square_rule < 0)] = g
    doubt |= back & np.isin(size, lin_sizes)
    power[square_rule >= 0] = SQUARE
    marks = _marks(case.snap, site)
    eager = bool(marks & set(EAGER_FUNCS))
    sdpa = bool(marks & set(SDPA_FUNCS))
    attention = (
        "eager and sdpa" if eager and sdpa else "eager" if eager else "sdpa" if sdpa else None
    )
    if attention is None and marks & set(TORCH_ATTENTION):
        attention = "torch.nn.MultiheadAttention"
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(scaling.Judgement)}
    return SeqJudgement(
        **fields,
        power=power,
        square_rule=square_rule,
        square_doubt=doubt & (power == SQUARE),
        seq=seq,
        is_sequence_model=bool(marks),
        attention=attention,
    )


def scaled_case(case: Case, judgement: SeqJudgement, scale) -> ScaledCase:
    """``case`` with the sequence multiplied by ``scale`` (0.5 = half)."""
    f = exact_scale(scale)
    if f <= 0:
        raise ValueError(f"the sequence scale must be positive, not {scale}")
    return ScaledCase(case, judgement.scaled_sizes(f), f, judgement)


#: The refusal for a recording without a sequence axis, in the words every front end uses.
NO_SEQUENCE = (
    "no sequence axis: no attention over a sequence in its frames "
    "(eager_attention_forward, scaled_dot_product_attention, ...): a sequence length "
    "what-if is for language and other sequence models"
)


#: What a sequence prediction's range spans, in words (CLI, advise and the GUI say it so).
RANGE_WHAT = (
    "other kernels and workspaces may be picked at another length, masks may be per token "
    "rather than T x T, and the allocator may pack the other sizes with up to a fifth more "
    "overhead (reserved over allocated at the peak) than the recording or the simulation"
)


@dataclass
class SeqEstimate:
    """The range of a sequence prediction's peak reserved bytes."""

    low: int
    high: int
    draws: int
    ooms: int
    square_doubt: int
    doubtful: int

    def to_dict(self) -> dict:
        return {
            "estimate": True,
            "low_bytes": self.low,
            "high_bytes": self.high,
            "draws": self.draws,
            "draws_out_of_memory": self.ooms,
            "square_in_doubt_allocations": self.square_doubt,
            "workspace_allocations": self.doubtful,
            "in_doubt": f"{self.square_doubt} square-or-linear and {self.doubtful} "
            "workspace, autotuning or size-judged allocations",
            "why_range": RANGE_WHAT,
        }


def _draw_sizes(case: Case, j: SeqJudgement, f: Fraction) -> list[np.ndarray]:
    """Every request's size per draw: the point; the doubtful squares linear; the batch
    judgement's doubt draws (workspaces, autotuning, size coincidences) at this length."""
    out = [j.scaled_sizes(f)]
    assert j.square_doubt is not None and j.power is not None
    if j.square_doubt.any():
        p = j.power.copy()
        p[j.square_doubt] = LINEAR
        out.append(j.with_power(p).scaled_sizes(f))
    d = doubt_draws(j, f, 8)
    if d is not None:
        out.extend(d.sizes(i) for i in range(len(d)))
    return out


def _overhead(case: Case) -> Fraction:
    """The recording's own reserved over allocated at its peak (>= 1)."""
    r = case.simulate("recorded")
    if not r.peak_allocated:
        return Fraction(1)
    return max(Fraction(1), Fraction(int(r.peak_reserved), int(r.peak_allocated)))


@dataclass
class SeqPrediction(Prediction):
    """One setting's run at another sequence length, with its estimate's range."""

    estimate: SeqEstimate | None = None


def predict_at(
    case: Case, judgement: SeqJudgement, scale, label: str, conf=None, limit=None
) -> SeqPrediction:
    """The run at sequence ``scale`` under the setting ``conf`` (a config) and ``limit``
    (None: the case's), labelled ``label``: its point and range (:func:`estimate_range`)."""
    cfg = case.config_of(conf)
    lim = case.limit if limit is None else limit
    est, result = estimate_range(case, judgement, scale, cfg, lim)
    return SeqPrediction(label, cfg, lim, result, program_changed=True, estimate=est)


SEGMENT = 2 << 20  # reserved memory comes in segments of at least 2 MiB
#: How much more than the recording's (or the simulation's) overhead the allocator may take
#: at another length: the requests' sizes change, so which blocks share segments does too.
#: Chosen on the zoo's tuning families (tests/bench/zoo_seq.md): the real peak reached up
#: to 1.18 x the predicted peak allocated times the larger overhead (BERT with
#: checkpointing from 512 to 128 tokens, whose requested bytes the model had right).
PACKING = Fraction(1, 5)


def estimate_range(
    case: Case, judgement: SeqJudgement, scale, conf=None, limit=None, quick: bool = False
) -> tuple[SeqEstimate, SimResult]:
    """The range of peak reserved at ``scale`` and the point's run: every draw simulated
    under ``conf`` and ``limit``; low: the least peak of the draws or the point's peak
    allocated (reserved holds at least it); high: the highest peak or the point's peak
    allocated with the larger of the recording's and the simulation's overhead, plus
    :data:`PACKING`, whichever is more.  ``quick``: the point and the doubtful squares'
    draw only (a search's steps; its answer is checked with every draw)."""
    f = exact_scale(scale)
    sizes = _draw_sizes(case, judgement, f)
    if quick:
        sizes = sizes[
            : 2 if judgement.square_doubt is not None and judgement.square_doubt.any() else 1
        ]

    def run(s: np.ndarray) -> SimResult:
        return ScaledCase(case, s, f, judgement).simulate(conf, limit)

    results = parallel.pmap(
        run,
        sizes,
        work=parallel.simulation_work(len(case.requests), native_sim.use_native()),
    )
    peaks = [r.peak_reserved_until_oom for r in results]
    point = results[0]
    alloc = int(point.peak_allocated)
    over = max(_overhead(case), Fraction(int(point.peak_reserved), max(alloc, 1))) * (1 + PACKING)
    low = min(min(peaks), -(-alloc // SEGMENT) * SEGMENT)
    high = max(max(peaks), int(-(-alloc * over.numerator // over.denominator)))
    if high <= low:
        high = low + SEGMENT  # never a range of zero width
    assert judgement.square_doubt is not None
    est = SeqEstimate(
        low,
        high,
        len(sizes),
        sum(1 for r in results if r.first_oom is not None),
        int(judgement.square_doubt.sum()),
        int(judgement.doubtful.sum()),
    )
    return est, point


def largest_fitting_seq(
    case: Case,
    judgement: SeqJudgement,
    limit: int,
    recorded_seq: int | None = None,
    conf=None,
    precision: float = 0.01,
) -> tuple[Fraction | None, int | None, SeqEstimate | None]:
    """The largest sequence scale whose estimate's HIGH end stays under ``limit`` (the
    safe side): whole lengths with ``recorded_seq`` known, else to ``precision``.
    Returns (scale, length, its estimate); (None, None, None) when none fits."""
    seen: dict[Fraction, SeqEstimate] = {}
    full: dict[Fraction, SeqEstimate] = {}

    def ok(f: Fraction) -> bool:
        if f not in seen:
            est, _ = estimate_range(case, judgement, f, conf, None, quick=True)
            seen[f] = est
        if seen[f].high > limit:
            return False
        # Every draw at the steps that pass the quick look: the answer is the full range's.
        if f not in full:
            full[f], _ = estimate_range(case, judgement, f, conf, None)
            seen[f] = full[f]
        return full[f].high <= limit

    if recorded_seq:
        t = int(recorded_seq)
        lo, hi = 0, None
        k = t
        if ok(Fraction(k, t)):
            lo = k
            while hi is None and k * 2 <= MAX_SCALE * t:
                k *= 2
                if ok(Fraction(k, t)):
                    lo = k
                else:
                    hi = k
        else:
            hi = k
        if hi is None:
            hi = lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(Fraction(mid, t)):
                lo = mid
            else:
                hi = mid
        if lo == 0:
            return None, None, None
        return Fraction(lo, t), lo, seen[Fraction(lo, t)]
    lo_f, hi_f = Fraction(0), Fraction(1)
    if ok(Fraction(1)):
        lo_f = Fraction(1)
        hi_f = Fraction(2)
        while ok(hi_f) and hi_f <= MAX_SCALE:
            lo_f, hi_f = hi_f, hi_f * 2
    while hi_f > 0 and (hi_f - lo_f) / hi_f > precision:
        half = ((lo_f + hi_f) / 2).limit_denominator(1 << 16)
        if ok(half):
            lo_f = half
        else:
            hi_f = half
        if hi_f < Fraction(1, 1024):
            break
    if lo_f == 0:
        return None, None, None
    return lo_f, None, seen[lo_f]


@dataclass
class LongestSeq:
    """advise's longest sequence that fits: the largest length (or scale) whose estimate's
    high end stays under the limit."""

    limit: int
    scale: Fraction | None  # None: not even the shortest tried fits
    seq: int | None  # with the recorded length known
    recorded_seq: int | None
    estimate: SeqEstimate | None
    attention: str | None

    def to_dict(self) -> dict:
        return {
            "seq": self.seq,
            "scale": float(self.scale) if self.scale is not None else None,
            "recorded_seq": self.recorded_seq,
            "memory_limit_bytes": self.limit,
            "is_estimate": True,
            "peak_reserved_estimate": self.estimate.to_dict() if self.estimate else None,
            "attention": self.attention,
            "words": self.words(),
        }

    def words(self) -> str:
        """One line, beside the largest batch."""
        if self.scale is None or self.estimate is None:
            return (
                "longest sequence that fits: none (the memory that does not shrink with the "
                "sequence is over the limit)"
            )
        at = (
            f"{self.seq} (recorded {self.recorded_seq}; scale {float(self.scale):.3g}; "
            if self.seq is not None
            else f"scale {float(self.scale):.3g} of the recorded length ("
        )
        return (
            f"longest sequence that fits: {at}an estimate: predicted "
            f"{fb(self.estimate.low)} - {fb(self.estimate.high)}, its high end under the "
            f"{fb(self.limit)} limit; attention: {self.attention or 'not seen in the frames'})"
        )


def names_attention(snap) -> bool:
    """Whether any frame of the snapshot is an attention function (:data:`SEQUENCE_MARKS`):
    a look at the frame table alone, before any judgement."""
    frames = snap.frames
    return any(frames.name_of(i) in SEQUENCE_MARKS for i in range(len(frames.name)))


def longest_seq(
    case: Case, limit: int | None, seq: int | None = None, conf=None
) -> LongestSeq | None:
    """The longest sequence that fits ``limit`` for a recording judged a sequence model
    (None for any other, or without a limit)."""
    if limit is None or not names_attention(case.snap):
        return None
    j = judge(case, seq)
    if not j.is_sequence_model:
        return None
    f, n, est = largest_fitting_seq(case, j, limit, seq, conf)
    return LongestSeq(limit, f, n, seq, est, j.attention)
