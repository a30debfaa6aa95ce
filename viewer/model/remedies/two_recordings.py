"""Two recordings of one program at two sizes of one knob: the run at any other size.

One recording fixes every request's size at its own batch (or sequence length) only;
two recordings of the same program at two values ``a`` and ``b`` of one knob fix, for
every request both make, how its size moves with the knob.  :func:`predict_pair`
matches the two request streams (:func:`match`: position by position where the two
streams have one shape, else aligned by (kind, allocation site) in order, optimizer step
by optimizer step, preferring pairs whose sizes agree), models each
matched request's size as affine in the knob through its two sizes, builds the request
stream at the asked size ``n`` from the recording nearer to it and simulates it with the
allocator model at the recorded settings (or any other).

Exact only where two recordings determine the answer: the asked size between A's and
B's, every request matched and either kept or changed by the knob's very ratio, and every
placement tried giving one peak while neither recording's own peak moves without its
placements.  Otherwise an estimate whose range is the peak over the sizes the unknowns
allow: beyond both recordings a request they kept may change (from its size to it scaled
with the knob); a fixed part besides (neither kept nor scaled) may be a step, bounded by
its sizes (and beyond them by the affine fit and its nearer size scaled); a request that
grows faster than the knob from the affine fit to the power law through its two sizes; a
request of one stream the other lacks from absent to its size scaled by the knob; library
workspaces from half the smaller to twice the larger of their sizes; and placement, by
the placements tried plus a segment (or as far as A's or B's own run moved).

No Qt, no torch: the CLI (``vramscope whatif A --with B``), the MCP tool, the Python
API and the compare window render :class:`PairPrediction`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..core.errors import SnapshotError
from ..core.members import one_of
from ..core.progress import Progress
from ..core.units import format_bytes, plural
from ..whatif import Case
from ..whatif.blocks import SYNTH_BASE
from ..whatif.requests import ALLOC, FREE, FREE_REQ
from ..whatif.run import SimResult

#: The knobs two recordings can be taken at.
KNOBS = ("batch", "seq")
KNOB_WORDS = {"batch": "batch", "seq": "sequence length"}
KNOB_PLURAL = {"batch": "batch sizes", "seq": "sequence lengths"}
#: A request whose size at ``b`` over its size at ``a`` passes ``b / a`` by more than this
#: (relative) grows faster than the knob: not affine.  Requested sizes are whole bytes
#: and small fixed parts (a bias, padding) only lower the ratio, so a tolerance of a few
#: parts per million only absorbs integer rounding.
SUPERLINEAR_TOLERANCE = 1e-6
#: The steepest growth a request is extrapolated with (a power of the knob).
MAX_POWER = 2.0
#: A request without partner is bounded as a segment of its own, rounded up to this (the
#: large pool's 2 MiB).
SEGMENT_ROUND = 2 << 20
#: The least relative width of an estimate's range, so that a range never reads as an
#: exact figure (the allocator's rounding of a request the model could not size exactly).
MIN_RANGE = 0.002


class PairError(ValueError):
    """Two recordings that cannot answer the question (one line, for the user), in words
    of no front end: ``needs`` names the parameter that would answer it (``"sizes"``: the
    two recordings' values on the knob), which each front end names its own way."""

    def __init__(self, message: str, needs: str | None = None) -> None:
        super().__init__(message)
        self.needs = needs


@dataclass
class Match:
    """How the requests of A and B were paired."""

    method: str  # "position" (one shape) or "aligned" (by kind and site, in order)
    a_index: np.ndarray  # matched ALLOC rows of A
    b_index: np.ndarray  # ... and their partners in B, in the same order
    allocs_a: int
    allocs_b: int

    @property
    def matched(self) -> int:
        return len(self.a_index)

    @property
    def complete(self) -> bool:
        return self.matched == self.allocs_a == self.allocs_b

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "matched_allocations": self.matched,
            "allocations_a": self.allocs_a,
            "allocations_b": self.allocs_b,
            "unmatched_a": self.allocs_a - self.matched,
            "unmatched_b": self.allocs_b - self.matched,
        }

    def words(self) -> str:
        if self.complete:
            how = "position by position" if self.method == "position" else "by site, in order"
            return f"all {plural(self.matched, 'allocation')} matched ({how})"
        return (
            f"{plural(self.matched, 'allocation')} matched by site, in order; "
            f"{self.allocs_a - self.matched} of A's {self.allocs_a} and "
            f"{self.allocs_b - self.matched} of B's {self.allocs_b} have no partner"
        )


def _generated(filename: str) -> bool:
    """Code written at run time (torch.compile's Inductor output, ``exec``'d strings): its
    file name and lines are a hash of the graph, new at every shape."""
    return "torchinductor" in filename or filename.startswith("<")


def _site_keys(case: Case, rows: np.ndarray) -> list[int]:
    """Per request in ``rows`` of ``case``: an id of (kind, call stack) comparable across
    recordings (every frame's file, line and function as strings, since frame ids differ;
    generated code by its function alone).  The whole stack, not the allocation site
    alone: one site makes many requests of other sizes (a layer's every tensor), which
    an alignment of sites alone pairs with the wrong ones where one recording made a
    request more."""
    snap = case.snap
    trace = snap.trace
    dev_rows = np.flatnonzero(trace.device == case.device)
    stacks = trace.stack[dev_rows[case.requests.event[rows]]]
    frames = snap.frames
    texts: dict[int, str] = {}

    def frame_text(f: int) -> str:
        t = texts.get(f)
        if t is None:
            name = frames.strings[frames.filename[f]]
            func = frames.strings[frames.name[f]]
            t = texts[f] = (
                f"<generated>:{func}" if _generated(name) else f"{name}:{frames.line[f]}:{func}"
            )
        return t

    out: list[int] = []
    cache: dict[int, int] = {}
    for k, st in zip(case.requests.kind[rows].tolist(), stacks.tolist()):
        key = cache.get(st)
        if key is None:
            ids = snap.stacks.frame_ids(st) if 0 <= st < len(snap.stacks) else ()
            key = cache[st] = hash(tuple(frame_text(int(f)) for f in ids))
        out.append(hash((int(k), key)))
    return out


def match(a: Case, b: Case) -> Match:
    """Pair the allocations of ``a`` and ``b``: position by position where the two
    streams have one shape (the same kinds, streams, pools and frees in the same order,
    the same site at every allocation), else aligned step by step (between the optimizer
    steps both recorded as many of) on (kind, site) tokens, pairing allocations only:
    the alignment that pairs the most tokens, a pair whose sizes agree (kept, or changed
    by the knob's ratio) counting twice (:func:`_weighted_pairs`); a step too long for
    that, by :mod:`difflib`'s matching blocks."""
    ra, rb = a.requests, b.requests
    alloc_a = np.flatnonzero(ra.kind == ALLOC)
    alloc_b = np.flatnonzero(rb.kind == ALLOC)
    same_shape = (
        len(ra) == len(rb)
        and np.array_equal(ra.kind, rb.kind)
        and np.array_equal(ra.ref, rb.ref)
        and np.array_equal(ra.pool, rb.pool)
        and np.array_equal(
            np.unique(ra.stream, return_inverse=True)[1],
            np.unique(rb.stream, return_inverse=True)[1],
        )
    )
    ka, kb = _site_keys(a, alloc_a), _site_keys(b, alloc_b)
    if same_shape and ka == kb:
        return Match("position", alloc_a, alloc_b, len(alloc_a), len(alloc_b))
    size_a = ra.size[alloc_a].astype(np.int64)
    size_b = rb.size[alloc_b].astype(np.int64)
    # Step by step where both ran as many optimizer steps: an iteration's requests repeat
    # the previous one's, and a whole-stream alignment of two streams that differ by a
    # few requests per step (a library workspace one size needs and the other not) may
    # pair one recording's step with the other's next, leaving most requests unpaired.
    cuts_a, cuts_b = _step_cuts(a, alloc_a), _step_cuts(b, alloc_b)
    if len(cuts_a) != len(cuts_b):
        cuts_a, cuts_b = [], []
    bounds_a = [0, *cuts_a, len(alloc_a)]
    bounds_b = [0, *cuts_b, len(alloc_b)]
    segments = list(zip(bounds_a, bounds_a[1:], bounds_b, bounds_b[1:]))
    # Allocations alone: the frees follow their blocks, and half the tokens align twice
    # as fast.
    blocks = [
        [
            (t, i1 + lo_a, i2 + lo_a, j1 + lo_b, j2 + lo_b)
            for t, i1, i2, j1, j2 in difflib.SequenceMatcher(
                None, ka[lo_a:hi_a], kb[lo_b:hi_b], autojunk=False
            ).get_opcodes()
        ]
        for lo_a, hi_a, lo_b, hi_b in segments
    ]
    # The knob's ratio from the requests the matching blocks pair (most of them).
    plain = [(i1, j1, i2 - i1) for ops in blocks for tag, i1, i2, j1, _ in ops if tag == "equal"]
    first_a = np.concatenate([np.arange(i, i + n) for i, _, n in plain] or [np.zeros(0, int)])
    first_b = np.concatenate([np.arange(j, j + n) for _, j, n in plain] or [np.zeros(0, int)])
    ratio = infer_ratio(size_a[first_a], size_b[first_b])[0]
    keys_a, keys_b = np.asarray(ka, np.int64), np.asarray(kb, np.int64)
    ia: list[int] = []
    ib: list[int] = []
    rows = 0  # of A's allocations aligned by _weighted_pairs so far
    for (lo_a, hi_a, lo_b, hi_b), ops in zip(segments, blocks):
        # A step the matching blocks pair whole needs nothing more (most steps of a long
        # recording); a step with gaps, if the budget allows, the best alignment.
        gaps = any(tag != "equal" for tag, *_ in ops)
        if (
            gaps
            and (hi_a - lo_a) * (hi_b - lo_b) <= WEIGHTED_CELLS
            and rows + hi_a - lo_a <= WEIGHTED_ROWS
        ):
            rows += hi_a - lo_a
            wa, wb = _weighted_pairs(
                keys_a[lo_a:hi_a], keys_b[lo_b:hi_b], size_a[lo_a:hi_a], size_b[lo_b:hi_b], ratio
            )
            ia += (wa + lo_a).tolist()
            ib += (wb + lo_b).tolist()
        else:
            pa, pb = _block_pairs(ka, kb, size_a, size_b, ratio, ops)
            ia += pa
            ib += pb
    return Match(
        "aligned",
        alloc_a[np.asarray(ia, np.int64)],
        alloc_b[np.asarray(ib, np.int64)],
        len(alloc_a),
        len(alloc_b),
    )


#: The largest step (A's allocations times B's) aligned by :func:`_weighted_pairs`: its
#: table of moves is one byte per cell (a step of 6,000 allocations in each: 36 MB).
WEIGHTED_CELLS = 40_000_000
#: The most allocations of A aligned that way in all (a row of numpy work each, ~30 us):
#: beyond it the remaining steps keep difflib's pairs.
WEIGHTED_ROWS = 100_000


def _weighted_pairs(ka, kb, sa, sb, ratio) -> tuple[np.ndarray, np.ndarray]:
    """The alignment of token columns ``ka`` and ``kb`` (positions of each, in order)
    with the highest score, pairing only equal tokens: 2 for a pair whose sizes ``sa``,
    ``sb`` agree (kept, or changed by ``ratio``), 1 for another; a token left unpaired
    costs nothing.  Row by row in numpy: a cell's best from the left is a running max."""
    n, m = len(ka), len(kb)
    if not n or not m:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    NEVER = -(1 << 30)
    prev = np.zeros(m + 1, np.int64)
    move = np.empty((n, m), np.int8)  # 0 pair (diagonal), 1 skip A's, 2 skip B's
    for i in range(n):
        agree = sb == sa[i]
        if ratio is not None:
            agree |= sb * ratio.denominator == sa[i] * ratio.numerator
        score = np.where(kb == ka[i], np.where(agree, 2, 1), NEVER)
        diag = prev[:-1] + score
        up = prev[1:]
        best = np.maximum(diag, up)
        row = np.maximum.accumulate(np.concatenate(([0], best)))
        step = np.where(diag >= up, 0, 1).astype(np.int8)
        step[row[1:] > best] = 2
        move[i] = step
        prev = row
    pa: list[int] = []
    pb: list[int] = []
    i, j = n - 1, m - 1
    while i >= 0 and j >= 0:
        d = move[i, j]
        if d == 0:
            if ka[i] == kb[j]:
                pa.append(i)
                pb.append(j)
            i -= 1
            j -= 1
        elif d == 1:
            i -= 1
        else:
            j -= 1
    return np.asarray(pa[::-1], np.int64), np.asarray(pb[::-1], np.int64)


def _block_pairs(ka, kb, size_a, size_b, ratio, ops) -> tuple[list[int], list[int]]:
    """The pairs of one step from :mod:`difflib`'s opcodes ``ops``: its matching blocks,
    a gap ahead of a block slid to where the sizes agree (:func:`_slide`)."""
    ia: list[int] = []
    ib: list[int] = []
    k = 0
    while k < len(ops):
        tag, i1, i2, j1, j2 = ops[k]
        nxt = ops[k + 1] if k + 1 < len(ops) else None
        if tag in ("insert", "delete") and nxt is not None and nxt[0] == "equal":
            # A request more on one side, ahead of a run both made: where in the run it
            # sits is ambiguous when the run repeats itself (a layer's requests, then the
            # same layer's again); the sizes decide.
            pa, pb = _slide(
                ka, kb, size_a, size_b, ratio, i1, j1, i2 - i1, j2 - j1, nxt[2] - nxt[1]
            )
            ia.extend(pa)
            ib.extend(pb)
            k += 2
            continue
        if tag == "equal":
            ia.extend(range(i1, i2))
            ib.extend(range(j1, j2))
        k += 1
    return ia, ib


def _step_cuts(case: Case, allocs: np.ndarray) -> list[int]:
    """Positions in ``allocs`` (the ALLOC rows of ``case``) where each optimizer step of the
    recording ends (its annotations; none without them)."""
    from .evidence import optimizer_step_ends

    ends = optimizer_step_ends(case)
    return np.searchsorted(allocs, np.asarray(ends, np.int64)).tolist() if ends else []


def _slide(ka, kb, size_a, size_b, ratio, i0, j0, gap_a, gap_b, run):
    """The pairs of a gap (``gap_a`` requests of A or ``gap_b`` of B with no partner) and
    the ``run`` equal requests after it, with the gap slid as far into the run as the
    tokens allow, at the place where most pairs keep their size or change it by the
    knob's ``ratio``."""
    # Pairs with the gap at offset s into the run: k < s pairs (i0 + k, j0 + k), then
    # (i0 + gap_a + k, j0 + gap_b + k) for k >= s.
    limit = 0
    while limit < run and ka[i0 + limit] == kb[j0 + limit]:
        limit += 1

    def good(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        sa, sb = size_a[i], size_b[j]
        ok = sa == sb
        if ratio is not None:
            ok |= sb * ratio.denominator == sa * ratio.numerator
        return ok

    k = np.arange(run)
    early = good(i0 + k[:limit], j0 + k[:limit]).astype(np.int64)
    late = good(i0 + gap_a + k, j0 + gap_b + k).astype(np.int64)
    # score(s) = early[:s].sum() + late[s:].sum(), s = 0..limit
    score = (
        np.concatenate([[0], np.cumsum(early)])
        + np.concatenate([late[::-1].cumsum()[::-1], [0]])[: limit + 1]
    )
    s = int(np.argmax(score))
    pa = list(range(i0, i0 + s)) + list(range(i0 + gap_a + s, i0 + gap_a + run))
    pb = list(range(j0, j0 + s)) + list(range(j0 + gap_b + s, j0 + gap_b + run))
    return pa, pb


def infer_ratio(sa: np.ndarray, sb: np.ndarray) -> tuple[Fraction | None, int, int]:
    """The knob's ratio b/a read from matched sizes: the most common ratio among the
    requests that changed (per-sample activations change exactly by it), with how many
    changed and how many agree; (None, changed, 0) when none changed."""
    changed = sa != sb
    n = int(changed.sum())
    if not n:
        return None, 0, 0
    counts = Counter(
        Fraction(int(y), int(x)).limit_denominator(64)
        for x, y in zip(sa[changed].tolist(), sb[changed].tolist())
        if x > 0
    )
    if not counts:
        return None, n, 0
    ratio, agree = counts.most_common(1)[0]
    return ratio, n, agree


@dataclass
class PairPrediction:
    """The run at knob value ``n`` (or scale ``scale`` of A's) predicted from A and B."""

    knob: str
    size_a: int | None
    size_b: int | None
    target: Fraction  # n, or the scale relative to A when the sizes are not known
    relative: bool  # target is a scale of A (sizes not given)
    ratio: Fraction  # b / a (given, or inferred)
    ratio_inferred: bool
    ratio_agree: int  # matched changing requests whose ratio is ``ratio``
    ratio_changed: int
    match: Match
    base: str  # "A" or "B": the recording whose stream was resized
    affine: int  # matched requests sized affinely (constant ones included)
    superlinear: int  # matched requests growing faster than the knob
    scratch: int  # matched library scratch whose two sizes are not one line
    conf: str
    result: SimResult
    low: int | None = None  # the estimate's range (None: exact)
    high: int | None = None
    placement_moves: bool = False  # the peak moves with where segments are placed
    placement_spread: int = 0  # how far A's or B's own peak moves without its placements
    fixed_part: int = 0  # matched requests neither kept nor scaled by the knob's ratio
    kept_beyond: int = 0  # requests A and B kept, at a size beyond both
    between: bool = True  # the asked size lies between A's and B's (or is one of them)
    case: Case | None = field(default=None, repr=False)  # the resized stream's case

    @property
    def is_estimate(self) -> bool:
        return self.low is not None

    @property
    def peak(self) -> int:
        return self.result.peak_reserved_until_oom

    def label(self) -> str:
        """``batch 12 (from A=4, B=8)`` or ``batch x1.5 of A (B/A = 2, inferred)``."""
        word = KNOB_WORDS[self.knob]
        if self.relative:
            how = "inferred" if self.ratio_inferred else "given"
            text = f"{word} x{float(self.target):g} of A (B/A = {_frac(self.ratio)}, {how})"
        else:
            text = f"{word} {_frac(self.target)} (from A={self.size_a}, B={self.size_b})"
        if self.conf != "recorded":
            text += f" {self.conf or '(defaults)'}"
        return text + (" (estimate)" if self.is_estimate else "")

    def why(self) -> list[str]:
        """Why an estimate is one, in words (empty when exact)."""
        out = []
        if not self.match.complete:
            out.append(
                f"{self.match.allocs_a + self.match.allocs_b - 2 * self.match.matched} "
                "allocations have no partner in the other recording (each bounded by its "
                "recorded size and that size scaled with the knob, or absent)"
            )
        word = KNOB_WORDS[self.knob]
        if self.superlinear:
            like = " (like attention scores along the sequence: quadratic)"
            out.append(
                f"{plural(self.superlinear, 'allocation')} grow faster than the {word}"
                f"{like if self.knob == 'seq' else ''}, sized from the affine fit to the "
                "power law through their two sizes"
            )
        if self.fixed_part:
            out.append(
                f"{plural(self.fixed_part, 'allocation')} change size but not by the "
                f"{word}'s ratio (a step, like a tile or algorithm picked per shape, is not "
                "a line), bounded by their two sizes"
                + ("" if self.between else ", the affine fit and the nearer scaled")
            )
        if self.kept_beyond:
            out.append(
                f"{plural(self.kept_beyond, 'allocation')} have one size in A and in B; the "
                "two cannot show whether they change beyond both (sized from that size to it "
                f"scaled with the {word})"
            )
        if self.scratch:
            out.append(
                f"{self.scratch} library workspaces (freed by the next request) change "
                "size other than with the knob (the library picks an algorithm per "
                "shape), sized from half the smaller to twice the larger of their sizes"
            )
        if self.placement_moves:
            out.append(
                "where the driver places new segments is not recorded at this size, and "
                "the peak moves with it (simulated with A's, B's, no recorded placements and "
                "those in the opposite address order"
                + (
                    f"; A's or B's own run moves by {format_bytes(self.placement_spread)} "
                    "without its placements)"
                    if self.placement_spread
                    else ")"
                )
            )
        if out:
            out.append(
                "placement at this size is not recorded: a segment "
                f"({format_bytes(SEGMENT_ROUND)}) more or less"
            )
        return out

    def fields(self) -> dict[str, Any]:
        """The row's own keys beside the what-if row's (:meth:`..whatif.Prediction.to_dict`)."""
        est = None
        if self.is_estimate:
            est = {
                "estimate": True,
                "low_bytes": self.low,
                "high_bytes": self.high,
                "why_range": "; ".join(self.why()),
            }
        return {
            "conf": self.conf,
            "knob": self.knob,
            "knob_a": self.size_a,
            "knob_b": self.size_b,
            self.knob: None if self.relative else _num(self.target),
            f"{self.knob}_scale": _num(self.target) if self.relative else None,
            "ratio_b_over_a": _num(self.ratio),
            "ratio_inferred": self.ratio_inferred,
            "ratio_agreeing_allocations": self.ratio_agree if self.ratio_inferred else None,
            "resized_from": self.base,
            "matching": self.match.to_dict(),
            "affine_allocations": self.affine,
            "superlinear_allocations": self.superlinear,
            "workspace_allocations": self.scratch,
            "peak_reserved_is_estimate": self.is_estimate,
            "peak_reserved_estimate": est,
        }


def _frac(f: Fraction) -> str:
    return str(f.numerator) if f.denominator == 1 else f"{float(f):g}"


def _num(f: Fraction) -> int | float:
    return f.numerator if f.denominator == 1 else float(f)


class PairCase(Case):
    """A :class:`~..whatif.Case` over the request stream resized to another knob value:
    ``base``'s stream with ``requests``; its :attr:`recorded_peak` (the baseline of "vs
    recorded") is recording A's."""

    def __init__(self, base: Case, requests, a: Case) -> None:
        super().__init__(
            base.snap,
            base.device,
            requests,
            base.recorded,
            base.limit,
            base.limit_source,
            base.bounds,
            base.gpu_bytes,
        )
        self.window = base.window
        self.a = a

    @property
    def recorded_peak(self) -> int:
        return self.a.recorded_peak


def _placed(reqs, where):
    """``reqs`` with the recorded segment events of ``where`` (None: none)."""
    if where is None:
        e = np.zeros(0, np.int64)
        return dataclasses.replace(
            reqs, seg_tag=e, seg_action=e.astype(reqs.seg_action.dtype), seg_addr=e, seg_size=e
        )
    return dataclasses.replace(
        reqs,
        seg_tag=where.seg_tag,
        seg_action=where.seg_action,
        seg_addr=where.seg_addr,
        seg_size=where.seg_size,
    )


#: A placement: the segments a run without recorded placements made, in the opposite
#: address order.
REVERSED = object()


def _reversed(reqs, bare: SimResult):
    """``reqs`` with ``bare``'s own segment events (a run of ``reqs`` without recorded
    placements) as its placements, the new segments' addresses mirrored: each below the
    ones before it instead of above.  Mirrored above every address the bare run gave, so
    that a segment the model must still place itself (from :data:`SYNTH_BASE` up) never
    lands on one of them; the recording's own segments keep theirs."""
    if not bare.events:
        return _placed(reqs, None)
    tag, act, addr, size = (np.asarray(col, np.int64) for col in zip(*bare.events))
    new = addr >= SYNTH_BASE
    if new.any():
        hi = int((addr[new] + size[new]).max())
        addr = addr.copy()
        addr[new] = hi + SEGMENT_ROUND + (hi - addr[new] - size[new])
    return dataclasses.replace(
        reqs,
        seg_tag=tag,
        seg_action=act.astype(reqs.seg_action.dtype),
        seg_addr=addr,
        seg_size=size,
    )


def check_pair(a: Case, b: Case) -> None:
    """:class:`PairError` for two recordings that cannot be one program's."""
    ra, rb = a.requests, b.requests
    na, nb = int((ra.kind == ALLOC).sum()), int((rb.kind == ALLOC).sum())
    if not na or not nb:
        raise PairError("a recording has no allocations to match")


def predict_pair(
    a: Case,
    b: Case,
    knob: str = "batch",
    target: float | Fraction | None = None,
    sizes: tuple[int, int] | None = None,
    scale: float | Fraction | None = None,
    conf: str = "recorded",
    limit: int | None = None,
    progress: Progress | None = None,
    matched: Match | None = None,
) -> PairPrediction:
    """The run at ``target`` (with the knob's values of A and B, ``sizes``) or at ``scale``
    times A's value (with the ratio B/A inferred from the matched sizes when ``sizes`` is
    None), simulated under ``conf`` and ``limit`` (None: A's recorded limit).

    :class:`PairError` for a question the two recordings cannot answer (one line)."""
    if knob not in KNOBS:
        raise PairError(f"unknown knob {knob!r} (one of {', '.join(KNOBS)})")
    progress = progress or Progress()
    progress.update("match", 0.0)
    check_pair(a, b)
    m = matched if matched is not None else match(a, b)
    if not m.matched:
        raise PairError("no allocation of A matches one of B: not the same program?")
    sa = a.requests.size[m.a_index].astype(np.int64)
    sb = b.requests.size[m.b_index].astype(np.int64)
    progress.update("match", 1.0)
    inferred_ratio, changed, agree = infer_ratio(sa, sb)
    if sizes is not None:
        ka, kb = (int(sizes[0]), int(sizes[1]))
        if ka <= 0 or kb <= 0 or ka == kb:
            raise PairError(f"the two sizes must be positive and differ, not {ka},{kb}")
        ratio = Fraction(kb, ka)
        if target is None:
            if scale is None:
                raise PairError("give the size to predict")
            n = Fraction(scale).limit_denominator(1 << 20) * ka
        else:
            n = Fraction(target).limit_denominator(1 << 20)
        t = (n - ka) / (kb - ka)
        relative, inferred, tgt = False, False, n
        near_b = abs(n - kb) < abs(n - ka)
        size_a: int | None = ka
        size_b: int | None = kb
        over_a = n / ka  # n over A's value
        base_value = Fraction(kb if near_b else ka)
        base_value_other = Fraction(ka if near_b else kb)
    else:
        if target is not None:
            raise PairError(
                f"the {KNOB_WORDS[knob]} to predict needs the two recordings' "
                f"{KNOB_PLURAL[knob]}; or ask a scale relative to A",
                needs="sizes",
            )
        if scale is None:
            raise PairError("give the size to predict")
        if inferred_ratio is None:
            raise PairError(
                "no matched allocation changed size between A and B: the ratio of their "
                f"{KNOB_PLURAL[knob]} cannot be read from them; give the two recordings' "
                f"{KNOB_PLURAL[knob]}",
                needs="sizes",
            )
        if inferred_ratio == 1:
            raise PairError("A and B were recorded at the same size")
        ratio = inferred_ratio
        f = Fraction(scale).limit_denominator(1 << 20)
        t = (f - 1) / (ratio - 1)
        relative, inferred, tgt = True, True, f
        size_a = size_b = None
        near_b = abs(f - ratio) < abs(f - 1)
        over_a = f
        base_value = ratio if near_b else Fraction(1)
        base_value_other = Fraction(1) if near_b else ratio
    # Affine through the two sizes; super-linear ones (B/A above the knob's ratio)
    # between the affine fit and the power law through the two sizes.
    grow = sb.astype(np.float64) * ratio.denominator > sa.astype(np.float64) * ratio.numerator * (
        1 + SUPERLINEAR_TOLERANCE
    )
    grow &= sa > 0
    diff = sb - sa
    affine = sa + (diff * t.numerator) // t.denominator
    affine = np.maximum(affine, 0)
    point = affine.copy()
    low = affine.copy()
    high = affine.copy()
    if grow.any():
        # The power law through the two sizes, its exponent at most 2: nothing a
        # training step allocates grows faster than the square of a knob (attention
        # scores along the sequence); a steeper pair is two different requests matched.
        p = np.minimum(np.log(sb[grow] / sa[grow]) / math.log(float(ratio)), MAX_POWER)
        power = np.round(sa[grow] * np.power(float(over_a), p)).astype(np.int64)
        # Along the batch a request is per-sample or not: the affine fit is the point;
        # along the sequence the power law (quadratic scores) is.
        if knob == "seq":
            point[grow] = power
        low[grow] = np.minimum(power, affine[grow])
        high[grow] = np.maximum(power, affine[grow])
    base_case = b if near_b else a
    base_index = m.b_index if near_b else m.a_index
    base_size = base_case.requests.size.astype(np.int64)
    # Scratch a library sizes per shape (cuDNN's workspaces: made and freed by the very
    # next request) that neither keeps its size nor changes by the knob's ratio: its
    # two sizes are two algorithm choices, not a line; at n it may be half the smaller
    # to twice the larger.
    rq = base_case.requests
    freed_next = np.zeros(len(rq), bool)
    nxt = np.flatnonzero(
        one_of(rq.kind[1:], (FREE, FREE_REQ)) & (rq.ref[1:] == np.arange(len(rq) - 1))
    )
    freed_next[nxt] = True
    constant = sa == sb
    proportional = constant | (sb * ratio.denominator == sa * ratio.numerator)
    # What two sizes determine: a request that keeps its size between A and B keeps it
    # between them (sizes move one way with the knob), and one that changes by the knob's
    # very ratio is per-sample.  A fixed part besides (sizes neither kept nor scaled) may
    # be a step (an algorithm or tile picked per shape) rather than a line: between A and
    # B it lies between its two sizes, beyond them anywhere from its nearer size to the
    # affine fit or that size scaled with the knob.  Beyond A and B a request the two
    # kept constant may still change (a step neither recording reached): from its size to
    # that size scaled with the knob.
    k_base = tgt / base_value  # n over the base's own value on the knob
    beyond = t < 0 or t > 1
    near_size = (sb if near_b else sa).astype(np.int64)
    near_scaled = (near_size * k_base.numerator) // k_base.denominator
    fixed_part = ~proportional & ~grow
    if fixed_part.any():
        cands = [affine[fixed_part], sa[fixed_part], sb[fixed_part]]
        if beyond:
            cands = [affine[fixed_part], near_size[fixed_part], near_scaled[fixed_part]]
        low[fixed_part] = np.minimum.reduce(cands)
        high[fixed_part] = np.maximum.reduce(cands)
    kept_beyond = constant & ~grow if beyond else np.zeros_like(constant)
    if kept_beyond.any():
        low[kept_beyond] = np.minimum(near_size[kept_beyond], near_scaled[kept_beyond])
        high[kept_beyond] = np.maximum(near_size[kept_beyond], near_scaled[kept_beyond])
    scratch = freed_next[base_index] & ~proportional
    if scratch.any():
        both = np.stack([sa[scratch], sb[scratch], low[scratch], high[scratch]])
        low[scratch] = np.maximum(both.min(axis=0) // 2, 1)
        high[scratch] = both.max(axis=0) * 2
    # The base stream's own value on the knob, as a multiple of n: unmatched requests
    # keep their size (low) or scale with the knob (high).
    new = base_size.copy()
    lo_sizes = base_size.copy()
    hi_sizes = base_size.copy()
    new[base_index] = point
    lo_sizes[base_index] = low
    hi_sizes[base_index] = high
    alloc = base_case.requests.kind == ALLOC
    unmatched = alloc.copy()
    unmatched[base_index] = False
    if unmatched.any():
        scaled = (base_size[unmatched] * k_base.numerator) // k_base.denominator
        # At n the request may not be made at all (another algorithm, another graph):
        # the low end runs it at the allocator's least, as good as absent.
        lo_sizes[unmatched] = 1
        hi_sizes[unmatched] = np.maximum(scaled, base_size[unmatched])
    fixed_part &= ~scratch
    estimate = bool(
        grow.any() or unmatched.any() or scratch.any() or fixed_part.any() or kept_beyond.any()
    )
    other = a if near_b else b
    cfg = base_case.config_of(conf)
    lim = limit if limit is not None else base_case.limit
    # Where the driver places a new segment moves best-fit's ties (the lower address
    # wins): at n it is not recorded.  The base's placements, the other recording's
    # (same shape only: they are tagged by request), none at all (each new segment above
    # the last) and that run's segments in the opposite order (each below the last: the
    # other end of best fit's ties); a peak that moves between them is not known to the
    # byte.
    placements: list[Any] = [base_case.requests]
    if m.method == "position":
        placements.append(other.requests)
    placements += [None, REVERSED]

    def run(sz: np.ndarray, where: Any) -> SimResult:
        reqs = dataclasses.replace(base_case.requests, size=sz)
        if where is REVERSED:
            bare = PairCase(base_case, _placed(reqs, None), a).simulate(cfg, lim)
            reqs = _reversed(reqs, bare)
        elif where is not base_case.requests:
            reqs = _placed(reqs, where)
        return PairCase(base_case, reqs, a).simulate(cfg, lim)

    progress.update("simulate", 0.0)
    result = run(new, placements[0])
    case = PairCase(base_case, dataclasses.replace(base_case.requests, size=new), a)
    peaks = [result.peak_reserved_until_oom]
    steps = len(placements) * (3 if estimate else 1)
    for j, where in enumerate(placements[1:]):
        progress.update("simulate", (j + 1) / steps)
        peaks.append(run(new, where).peak_reserved_until_oom)
    # What the recordings show of placement: each one's run under its own recorded
    # placements and under none; where that moves the peak at A's or B's size, the
    # driver's placement matters to this program and may move it as far at n.
    placement_spread = 0
    for rec in (a, b):
        own = PairCase(rec, rec.requests, a).simulate(cfg, lim).peak_reserved_until_oom
        bare = PairCase(rec, _placed(rec.requests, None), a).simulate(cfg, lim)
        placement_spread = max(placement_spread, abs(own - bare.peak_reserved_until_oom))
    placement_moves = len(set(peaks)) > 1 or placement_spread > 0
    if estimate:
        for j, (sz, where) in enumerate(
            (sz, where) for sz in (lo_sizes, hi_sizes) for where in placements
        ):
            progress.update("simulate", (len(placements) + j) / steps)
            peaks.append(run(sz, where).peak_reserved_until_oom)
    # Requests of the other recording with no partner in the base stream: absent from
    # the simulated stream, so the range's top adds them, each as a segment of its own
    # at its size scaled to n, as if all were alive at the peak.
    other_index = m.a_index if near_b else m.b_index
    other_alloc = other.requests.kind == ALLOC
    other_alloc[other_index] = False
    missing = 0
    if other_alloc.any():
        k_other = tgt / (base_value_other)
        sz = other.requests.size[other_alloc].astype(np.int64)
        sz = np.maximum(sz, (sz * k_other.numerator) // k_other.denominator)
        missing = int((-(-sz // SEGMENT_ROUND) * SEGMENT_ROUND).sum())
        estimate = True
    lo = hi = None
    if estimate or placement_moves:
        # Placement at n is not recorded: the placements tried are a sample of it, and
        # another can cost (or save) a segment more; so the range reaches a segment's
        # granularity beyond the peaks simulated (and never reads as one figure).
        estimate = True
        lo, hi = min(peaks), max(peaks) + missing
        pad = max(int(max(hi, 1) * MIN_RANGE / 2), SEGMENT_ROUND, placement_spread)
        lo, hi = max(lo - pad, 0), hi + pad
    progress.update("simulate", 1.0)
    return PairPrediction(
        knob=knob,
        size_a=size_a,
        size_b=size_b,
        target=tgt,
        relative=relative,
        ratio=ratio,
        ratio_inferred=inferred,
        ratio_agree=agree,
        ratio_changed=changed,
        match=m,
        base="B" if near_b else "A",
        affine=int((~grow & ~scratch).sum()),
        superlinear=int(grow.sum()),
        scratch=int(scratch.sum()),
        conf=conf,
        result=result,
        low=lo,
        high=hi,
        placement_moves=placement_moves,
        placement_spread=placement_spread,
        fixed_part=int(fixed_part.sum()),
        kept_beyond=int(kept_beyond.sum()),
        between=not beyond,
        case=case,
    )


__all__ = [
    "KNOBS",
    "Match",
    "PairError",
    "PairPrediction",
    "SnapshotError",
    "infer_ratio",
    "match",
    "predict_pair",
]
