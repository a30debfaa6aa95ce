"""Phases of every event (forward, backward, optimizer step, other) and the
training (or evaluation) iterations of one device's trace.

Evidence comes from three places, strongest first:

1. ``record_function`` annotations: ``Optimizer.step#…`` and
   ``Optimizer.zero_grad#…`` ranges (torch's optimizers always emit them)
   mapped onto events by time;
2. the stacks of allocations (:mod:`.stack_kinds`): a module's forward call,
   autograd's backward (its Python entry points, its C++ engine, or a stack
   without any Python frame: autograd's device thread), the optimizer, module
   construction and ``.to()``;
3. where a file has neither frames nor annotations inside an iteration: the
   curve itself (the forward ends at the iteration's highest point: activations
   pile up in forward and are released in backward).  Phases found that way are
   marked as guessed.

A requested free recorded with its block's own allocation stack says nothing of the
moment it happened: torch records that stack when it takes none at frees (history
with ``context="alloc"``, which vramscope's capture uses where a stack taken at a
free would break backward; or a free where it could take none), and the forward's
frames of an activation freed in backward would otherwise read as a forward.

Events without evidence (frees, the user's own code) take the phase of the
evidence around them: the same phase on both sides wins, a gap between a
forward and its backward is forward (the loss), any other gap is ``other``.

An iteration ends where its optimizer step ends (several forward/backward
passes before one step are one iteration: gradient accumulation); without any
optimizer step the backward passes delimit them, without backward the forward
passes (evaluation, inference).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.snapshot import Action, Snapshot
from ..core.units import plural
from ..replay import DeviceReplay
from . import native_passes as native
from . import stack_kinds as sk
from .runs import PhaseRuns

PH_OTHER = 0
PH_FORWARD = 1
PH_BACKWARD = 2
PH_OPTIMIZER = 3
PHASE_NAMES = ("other", "forward", "backward", "optimizer")

_STRONG_PHASE = {
    sk.EV_FORWARD: PH_FORWARD,
    sk.EV_BACKWARD: PH_BACKWARD,
    sk.EV_OPTIMIZER: PH_OPTIMIZER,
    sk.EV_PARAM_INIT: PH_OTHER,
    sk.EV_ZERO_GRAD: PH_OTHER,
}


@dataclass(frozen=True)
class Iteration:
    """One iteration: events ``start..end`` (inclusive) of the device's trace."""

    index: int
    start: int
    end: int
    peak_bytes: int  # highest requested bytes inside it
    peak_event: int
    peak_phase: str
    kind: str  # "train" (has a backward), "eval" (forward only), "generate" (one
    # generation request: its prefill and decode steps, see .generation)
    complete: bool  # False: the recording stopped inside it (e.g. at an OOM)
    phases_guessed: bool  # forward/backward split from the curve, not from evidence
    decode_steps: int = 0  # "generate": the forward passes after the prefill

    def to_dict(self) -> dict:
        out = {
            "index": self.index,
            "start_event": self.start,
            "end_event": self.end,
            "peak_bytes": self.peak_bytes,
            "peak_event": self.peak_event,
            "peak_phase": self.peak_phase,
            "kind": self.kind,
            "complete": self.complete,
            "phases_guessed": self.phases_guessed,
        }
        if self.kind == "generate":
            out["decode_steps"] = self.decode_steps
        return out


def describe_iterations(its: list[dict]) -> str:
    """'6 iterations' / '3 generation requests (prefill + 511 decode steps each)' /
    '2 generation requests (prefill + 95 and 127 decode steps) and 1 iteration', from
    :meth:`Iteration.to_dict` entries."""
    gen = [it for it in its if it.get("kind") == "generate"]
    rest = len(its) - len(gen)
    parts = []
    if gen:
        steps = [int(it.get("decode_steps", 0)) for it in gen]
        if len(set(steps)) == 1:
            each = plural(steps[0], "decode step") + (" each" if len(steps) > 1 else "")
        elif len(steps) <= 4:
            each = ", ".join(f"{s:,}" for s in steps[:-1]) + f" and {steps[-1]:,} decode steps"
        else:
            each = f"{min(steps):,} to {max(steps):,} decode steps"
        parts.append(f"{plural(len(gen), 'generation request')} (prefill + {each})")
    if rest or not gen:
        parts.append(plural(rest, "iteration"))
    return " and ".join(parts)


class IterationOf:
    """Iteration index of every event (-1 outside any iteration), without a column per
    event: the iterations are contiguous spans, so an event's is one binary search.
    Index it like the int32 column it stands for (``it[events]``); ``np.asarray(it)``
    makes that column (40 MB at 10M events, which the classification never needs)."""

    def __init__(self, lo: np.ndarray, end: int, n: int) -> None:
        self.lo = lo  # first event of each iteration (sorted); they run up to ``end``
        self.end = end
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx):
        if isinstance(idx, (slice, tuple)) or np.asarray(idx).dtype == bool:
            return np.asarray(self)[idx]
        ev = np.asarray(idx, np.int64)
        ev = np.where(ev < 0, ev + self.n, ev)
        i = np.searchsorted(self.lo, ev, "right") - 1
        out = np.where((i >= 0) & (ev < self.end), i, -1).astype(np.int32)
        return out if out.ndim else np.int32(out)

    def column(self) -> np.ndarray:
        """The int32 column (made once, on first use: views that draw iteration bands)."""
        col = self.__dict__.get("_column")
        if col is None:
            col = np.full(self.n, -1, np.int32)
            for i, a in enumerate(self.lo.tolist()):
                b = int(self.lo[i + 1]) if i + 1 < len(self.lo) else self.end
                col[a:b] = i
            self._column = col
        return col

    def __array__(self, dtype=None, copy=None):
        col = self.column()
        return col if dtype is None else col.astype(dtype)

    # Comparisons give the column's (``phases.iteration == i``: a mask per event).
    def __eq__(self, other):
        return self.column() == other

    def __ne__(self, other):
        return self.column() != other

    def __lt__(self, other):
        return self.column() < other

    def __le__(self, other):
        return self.column() <= other

    def __gt__(self, other):
        return self.column() > other

    def __ge__(self, other):
        return self.column() >= other

    __hash__ = None  # type: ignore[assignment]  # compares like a column: unhashable

    def __getattr__(self, name: str):
        # Anything else an int32 column has (astype, max, ...): the column's.
        if name.startswith("__") or name == "_column":
            raise AttributeError(name)
        return getattr(self.column(), name)


@dataclass
class Phases:
    """Per event of one device: evidence, phase and iteration (columns)."""

    evidence: np.ndarray  # int8 EV_* of the event's own stack (allocs only)
    phase: np.ndarray  # int8 PH_*
    guessed: np.ndarray  # bool: phase from the curve or from a Python-less stack
    iteration: "IterationOf"  # per event: iteration index, -1 outside any (int32 when
    # indexed; np.asarray() makes the column)
    iterations: list[Iteration]
    stack_kinds: np.ndarray  # int32 kind bits per stack (shared with classify)
    annotated: bool  # optimizer steps came from record_function annotations
    zero_grad: list | None = None  # event ranges [lo, hi) of annotated zero_grad calls
    runs: "PhaseRuns | None" = None  # the runs of equal phases (made from ``phase``)

    def phase_runs(self) -> "PhaseRuns":
        """The runs of equal phases of ``phase`` (kept)."""
        if self.runs is None:
            self.runs = PhaseRuns(self.phase)
        return self.runs

    def first_of(self, phase: int) -> int | None:
        """The first event of ``phase`` (None: the recording has none)."""
        starts = self.phase_runs().of(phase)[0]
        return int(starts[0]) if len(starts) else None


def _annotation_ranges(
    snap: Snapshot, device: int, time_us: np.ndarray, prefix: str, time_min: int | None = None
) -> list[tuple[int, int]]:
    """Event ranges ``[lo, hi)`` of the record_function ranges whose name starts with
    ``prefix`` (matched START to END in order), on ``device`` (or every device when the
    file does not say).  ``time_min``: ``time_us.min()`` when the caller has it."""
    ann = snap.annotations
    if not len(ann) or not len(time_us):
        return []
    if (time_us.min() if time_min is None else time_min) < 0:
        return []
    strings = snap.strings
    names, inverse = np.unique(ann.name, return_inverse=True)  # a few distinct names
    hit = np.fromiter(
        (i >= 0 and strings[i].startswith(prefix) for i in names.tolist()), bool, count=len(names)
    )
    wanted = hit[inverse.reshape(-1)]
    rows = np.flatnonzero(wanted & ((ann.device == device) | (ann.device < 0)))
    t0s, t1s = [], []
    open_at = None
    for start, t in zip(ann.is_start[rows].tolist(), ann.time_us[rows].tolist()):
        if start:
            open_at = t
        elif open_at is not None:
            t0s.append(open_at)
            t1s.append(t)
            open_at = None
    t0 = np.array(t0s, np.int64)
    t1 = np.array(t1s, np.int64)
    inside = (t1 >= time_us[0]) & (t0 <= time_us[-1])  # ring buffers keep older ones
    lo = np.searchsorted(time_us, t0[inside], "left")
    hi = np.searchsorted(time_us, t1[inside], "right")
    return list(zip(lo.tolist(), hi.tolist()))


def _set_ranges(arr: np.ndarray, ranges: list[tuple[int, int]], value) -> None:
    for lo, hi in ranges:
        arr[lo:hi] = value


def stack_codes(snap: Snapshot, kinds: np.ndarray) -> np.ndarray | None:
    """One int8 per stack: its evidence, and its guess in bit 4; a last entry 0 for stack
    -1 (None: the file has no stacks)."""
    has_py = sk.stack_has_python(snap)
    ev_stack = sk.stack_evidence(kinds, has_py)
    guessed_stack = ev_stack == sk.EV_NO_PYTHON
    if has_py.any():
        ev_stack[guessed_stack] = sk.EV_BACKWARD  # autograd's device thread (a guess)
    else:
        ev_stack[guessed_stack] = sk.EV_NONE  # no Python anywhere: a stack says nothing
        guessed_stack[:] = False
    if not len(ev_stack):
        return None
    return np.append(ev_stack.astype(np.int8) | (guessed_stack.astype(np.int8) << 4), np.int8(0))


def moment_stacks(rep: DeviceReplay) -> np.ndarray:
    """Per event, the stack that tells of its moment: the recorded one, except -1 for a
    requested free recorded with its allocation's stack (see the module's docstring)."""
    stack = rep.stack
    frees = np.flatnonzero(rep.action == Action.FREE_REQUESTED)
    if not len(frees):
        return stack
    made = rep.alloc_of[frees]
    same = (made >= 0) & (stack[np.maximum(made, 0)] == stack[frees])
    if not same.any():
        return stack
    out = stack.copy()
    out[frees[same]] = -1
    return out


def event_evidence(
    snap: Snapshot, rep: DeviceReplay, kinds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(evidence per event, guessed per event): the evidence of each alloc's or requested
    free's stack (:func:`moment_stacks`)."""
    n = len(rep)
    code = stack_codes(snap, kinds)
    if code is None:
        return np.zeros(n, np.int8), np.zeros(n, bool)
    # Allocations and the frees a program asked for both carry the stack of the moment
    # (``del x`` in the user's code, a free inside autograd's thread), unless the free
    # only repeats its allocation's.
    # One gather per event, zeroed where the action carries no evidence. Few
    # full-length temporaries: at 10M events each is a fresh, page-faulted mapping.
    got = code[moment_stacks(rep)]
    act_lut = np.zeros(256, np.int8)
    act_lut[[Action.ALLOC, Action.FREE_REQUESTED]] = 1
    np.multiply(got, act_lut[rep.action.view(np.uint8)], out=got)
    guessed = got >= 16
    np.bitwise_and(got, 15, out=got)
    return got, guessed


_USER_CODE = 9  # the run code of the user's own code (not a phase)


def _rule(pp: np.ndarray, qp: np.ndarray) -> np.ndarray:
    """Phase of events after the user's own code ran, between strong phases ``pp`` (before)
    and ``qp`` (after): other, except between a forward and its backward (the loss:
    forward) and inside a backward or a step (it stays there)."""
    out = np.full(len(pp), PH_OTHER, np.int8)
    fb = (pp == PH_FORWARD) & (qp == PH_BACKWARD)
    out[fb] = PH_FORWARD
    same = (pp == qp) & (pp != PH_FORWARD) & (pp >= 0)
    out[same] = pp[same]
    return out


def fill_phases(ev: np.ndarray, forced: np.ndarray) -> np.ndarray:
    """Phase per event from the strong evidence around it.

    ``forced`` (int8, -1 = none) overrides the evidence (annotation ranges).  Rules: a
    phase goes on (its last frees) until the user's own code runs outside it; after the
    user's code, events are ``other`` - except between a forward and its backward (the
    loss: forward) and inside a backward or a step.  Work is done on *runs*: consecutive
    evidence of one kind (a forward is one run, however many events it has), a few per
    iteration; the events get their run's value with one ``repeat``."""
    n = len(ev)
    if n == 0:
        return np.zeros(0, np.int8)
    lut = np.full(256, -1, np.int8)
    for e, p in _STRONG_PHASE.items():
        lut[e] = p
    lut[sk.EV_USER] = _USER_CODE
    code = lut[ev.view(np.uint8)]
    np.copyto(code, forced, where=forced >= 0)
    phase = np.full(n, PH_OTHER, np.int8)
    run_at, rc = _key_runs(code)  # where each run of equal evidence starts, its code
    if not len(run_at):
        return phase
    r = len(rc)
    strong = rc != _USER_CODE
    ri = np.arange(r, dtype=np.int64)
    prev_s = np.where(strong, ri, -1)
    np.maximum.accumulate(prev_s, out=prev_s)
    nxt = np.where(strong, ri, r)[::-1]
    next_s = np.minimum.accumulate(nxt)[::-1]
    ext = np.append(rc, np.int8(-1))
    value = rc.copy()  # a strong run, and the gap after it, keep their phase
    user = ~strong
    value[user] = _rule(ext[prev_s[user]], ext[next_s[user]])
    lengths = np.diff(run_at, append=n)
    phase[run_at[0] :] = np.repeat(value, lengths)
    return phase


_CHUNK = 1 << 20


def _key_runs(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(event where each run of equal codes >= 0 starts, the run's code), events with code
    -1 skipped (they join the run before them).  In chunks of events: the positions of all
    events with evidence (int64, most of the trace) are never held at once - at 10M events
    that array alone was 50 MB of fresh memory."""
    at, codes = [], []
    last = np.int8(-1)
    for c0 in range(0, len(code), _CHUNK):
        key = np.flatnonzero(code[c0 : c0 + _CHUNK] >= 0)
        if not len(key):
            continue
        kc = code[c0 : c0 + _CHUNK][key]
        change = np.flatnonzero(np.concatenate(([kc[0] != last], kc[1:] != kc[:-1])))
        at.append(key[change] + c0)
        codes.append(kc[change])
        last = kc[-1]
    if not at:
        return np.zeros(0, np.int64), np.zeros(0, np.int8)
    return np.concatenate(at), np.concatenate(codes)


def _split_by_curve(
    phase: np.ndarray, guessed: np.ndarray, requested, spans: list[tuple[int, int]], runs: PhaseRuns
) -> bool:
    """Inside each span without forward/backward evidence, the forward ends at the highest
    point of the curve (activations pile up, then backward releases them): a guess.
    True when a phase changed (``runs`` are then out of date)."""
    if not spans:
        return False
    lo = np.array([a for a, _ in spans], np.int64)
    hi = np.maximum(np.array([b for _, b in spans], np.int64), lo)
    # Runs of forward/backward (a few per iteration), not every such event.
    w_start, w_end = runs.of(PH_FORWARD, PH_BACKWARD)
    last = np.searchsorted(w_start, hi) - 1  # the last such run starting before hi
    overlaps = (
        (last >= 0) & (w_end[np.maximum(last, 0)] > lo) if len(w_start) else np.zeros(len(lo), bool)
    )
    bare = np.flatnonzero((hi - lo >= 2) & ~overlaps)
    if len(bare):
        requested = _curve_array(requested)
    for i in bare.tolist():  # only spans without evidence: files without frames
        a, b = int(lo[i]), int(hi[i])
        seg = phase[a:b]
        top = a + int(np.argmax(requested[a:b]))
        free = seg == PH_OTHER
        fwd = np.zeros(b - a, bool)
        fwd[: top - a + 1] = True
        seg[free & fwd] = PH_FORWARD
        seg[free & ~fwd] = PH_BACKWARD
        guessed[a:b] |= free
    return bool(len(bare))


def _curve_array(requested) -> np.ndarray:
    """The requested bytes after each event, from an array or a ``RequestedCurve``."""
    return requested if isinstance(requested, np.ndarray) else requested.array()


def _span_peaks(requested, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(maximum, first event reaching it) of the requested curve in each span [lo, hi)."""
    if not isinstance(requested, np.ndarray):
        return requested.span_peaks(lo, hi)  # breakdown.RequestedCurve: in chunks
    top = np.empty(len(lo), np.int64)
    peak = np.empty(len(lo), np.int64)
    for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        k = a + int(np.argmax(requested[a:b]))  # argmax: the first event at the maximum
        peak[i] = k
        top[i] = requested[k]
    return top, peak


def _after_closures(
    snap: Snapshot, rep: DeviceReplay, kinds: np.ndarray, steps: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The annotated steps' ranges, each cut to what follows its closure: a step that
    called back into the program (``optimizer.step(closure)``) ran a forward and a backward
    inside its annotation, which keep the phases their stacks give; the optimizer's own
    work is what the step does after the closure's last forward or backward event.  Before
    the closure nothing is forced (the stacks decide)."""
    closure = (kinds & sk.K_CLOSURE) != 0
    if not steps or not closure.any():
        return steps
    code = stack_codes(snap, kinds)
    if code is None:
        return steps
    telling = np.zeros(len(code), bool)  # the last entry: stack -1
    telling[:-1] = closure
    work = ((code & 15) == sk.EV_FORWARD) | ((code & 15) == sk.EV_BACKWARD)
    act_lut = np.zeros(256, bool)
    act_lut[[Action.ALLOC, Action.FREE_REQUESTED]] = True
    out = []
    for lo, hi in steps:
        st = rep.stack[lo:hi]
        acts = act_lut[rep.action[lo:hi].view(np.uint8)]
        if not (telling[st] & acts).any():
            out.append((lo, hi))
            continue
        last = lo + int(np.flatnonzero((telling[st] | work[st]) & acts)[-1])
        out.append((last + 1, max(hi, last + 1)))
    return out


def find_phases(
    snap: Snapshot, rep: DeviceReplay, kinds: np.ndarray | None = None, requested=None
) -> Phases:
    """Evidence, phases and iterations of one device's trace (``requested``: the requested
    bytes after each event - an array, or a ``breakdown.RequestedCurve`` that makes only what
    is read - default ``rep.requested``)."""
    if kinds is None:
        kinds = sk.stack_kinds(snap)
    if requested is None:
        requested = rep.requested
    n = len(rep)
    t_min = int(rep.time_us.min()) if n and len(snap.annotations) else None  # one pass
    steps = _annotation_ranges(snap, rep.device, rep.time_us, "Optimizer.step", t_min)
    zero = _annotation_ranges(snap, rep.device, rep.time_us, "Optimizer.zero_grad", t_min)
    steps = _after_closures(snap, rep, kinds, steps)
    code = stack_codes(snap, kinds) if native.available() else None
    if code is not None:
        # One C pass: evidence, guess and phase of every event (no temporaries of n).
        ev, guessed, phase, known = native.phases(
            rep.action,
            moment_stacks(rep),
            code,
            [(lo, hi, PH_OTHER) for lo, hi in zero] + [(lo, hi, PH_OPTIMIZER) for lo, hi in steps],
        )
    else:
        ev, guessed = event_evidence(snap, rep, kinds)
        forced = np.full(n, -1, np.int8)
        _set_ranges(forced, zero, PH_OTHER)
        _set_ranges(forced, steps, PH_OPTIMIZER)
        phase = fill_phases(ev, forced)
        known = None
    runs = PhaseRuns(phase, known)

    # Anchors: where iterations end.
    o_starts, o_ends = runs.of(PH_OPTIMIZER)
    anchors = list(zip(o_starts.tolist(), o_ends.tolist()))
    for lo, hi in steps:  # steps that allocated nothing and freed nothing: empty ranges
        if (
            hi <= lo
            and not (lo < n and phase[lo] == PH_OPTIMIZER)
            and not (lo > 0 and phase[lo - 1] == PH_OPTIMIZER)
        ):
            anchors.append((lo, lo))
    anchors.sort()
    if anchors:
        # Without frames, split each span between steps at its highest point (guess).
        bounds = [0] + [hi for _, hi in anchors]
        spans = [(b, lo) for b, (lo, _) in zip(bounds, anchors)]
        if _split_by_curve(phase, guessed, requested, spans, runs):
            runs = PhaseRuns(phase)
    else:
        for ph in (PH_BACKWARD, PH_FORWARD):
            s, e = runs.of(ph)
            if len(s):
                anchors = list(zip(s.tolist(), e.tolist()))
                break
    iterations, iteration = _iterations(ev, phase, runs, requested, anchors, n)
    return Phases(
        zero_grad=zero,
        evidence=ev,
        phase=phase,
        guessed=guessed,
        iteration=iteration,
        iterations=iterations,
        stack_kinds=kinds,
        annotated=bool(steps),
        runs=runs,
    )


def _iterations(ev, phase, runs: PhaseRuns, requested, anchors, n):
    iteration = IterationOf(np.zeros(0, np.int64), 0, n)
    out: list[Iteration] = []
    if not anchors or n == 0:
        return out, iteration
    work_s, work_e = runs.of(PH_FORWARD, PH_BACKWARD)
    head = max(anchors[0][1], anchors[0][0] + 1)
    first = int(work_s[0]) if len(work_s) and work_s[0] < head else anchors[0][0]
    # The first iteration starts after the last module construction / .to() before it.
    setup = np.flatnonzero(ev[:first] == sk.EV_PARAM_INIT)
    start = int(setup[-1]) + 1 if len(setup) else 0
    spans = []
    for lo, hi in anchors:
        end = max(hi, lo + 1, start + 1)
        spans.append((start, min(end, n), True))
        start = min(end, n)
    # The recording stopped inside an iteration.
    if start < n and len(work_e) and work_e[-1] > start:
        spans.append((start, n, False))
    spans = [(lo, hi, c) for lo, hi, c in spans if hi > lo]
    if not spans:
        return out, iteration
    lo = np.array([sp[0] for sp in spans], np.int64)
    hi = np.array([sp[1] for sp in spans], np.int64)

    # Spans are contiguous (each starts where the one before ends): per span, from the
    # runs of phases and one pass over the evidence - no mask of every event.
    end = int(hi[-1])
    n_bwd = runs.any_in(lo, hi, PH_BACKWARD)
    if native.available():
        n_ev_fwd = native.spans_any(ev, sk.EV_FORWARD, lo, end)
    else:
        n_ev_fwd = np.logical_or.reduceat(ev[:end] == sk.EV_FORWARD, lo)
    # Per span, slices and argmax: no per-event int32/int64 temporaries (np.repeat of the
    # span ids or of their maxima), which at 10M events are 40-80 MB of fresh memory
    # each - page faults that cost more than the arithmetic.
    iteration = IterationOf(lo, end, n)
    top, peak = _span_peaks(requested, lo, hi)  # each span's peak: the first event at it
    peak_phase = phase[peak].tolist()
    # Python lists for the loop over the iterations (thousands at 10M events).
    for i, ((a, b, complete), k, t, bwd, fwd) in enumerate(
        zip(spans, peak.tolist(), top.tolist(), n_bwd.tolist(), n_ev_fwd.tolist())
    ):
        if a == 0 and not runs.any_in(np.array([a]), np.array([b]), PH_FORWARD)[0]:
            complete = False  # the recording started inside it (a ring buffer)
        kind = "train" if bwd else "eval"
        if not complete and out:  # cut short (an OOM): it was going to be like the others
            kind = out[-1].kind
        out.append(
            Iteration(
                index=i,
                start=a,
                end=b - 1,
                peak_bytes=t,
                peak_event=k,
                peak_phase=PHASE_NAMES[peak_phase[i]],
                kind=kind,
                complete=complete,
                phases_guessed=not fwd,
            )
        )
    return out, iteration
