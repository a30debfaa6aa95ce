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

from ..replay import DeviceReplay
from ..snapshot import Action, Snapshot
from . import stack_kinds as sk

PH_OTHER = 0
PH_FORWARD = 1
PH_BACKWARD = 2
PH_OPTIMIZER = 3
PHASE_NAMES = ("other", "forward", "backward", "optimizer")

_STRONG_PHASE = {sk.EV_FORWARD: PH_FORWARD, sk.EV_BACKWARD: PH_BACKWARD,
                 sk.EV_OPTIMIZER: PH_OPTIMIZER, sk.EV_PARAM_INIT: PH_OTHER,
                 sk.EV_ZERO_GRAD: PH_OTHER}


@dataclass(frozen=True)
class Iteration:
    """One iteration: events ``start..end`` (inclusive) of the device's trace."""

    index: int
    start: int
    end: int
    peak_bytes: int  # highest requested bytes inside it
    peak_event: int
    peak_phase: str
    kind: str  # "train" (has a backward), "eval" (forward only)
    complete: bool  # False: the recording stopped inside it (e.g. at an OOM)
    phases_guessed: bool  # forward/backward split from the curve, not from evidence

    def to_dict(self) -> dict:
        return {"index": self.index, "start_event": self.start, "end_event": self.end,
                "peak_bytes": self.peak_bytes, "peak_event": self.peak_event,
                "peak_phase": self.peak_phase, "kind": self.kind,
                "complete": self.complete, "phases_guessed": self.phases_guessed}


@dataclass
class Phases:
    """Per event of one device: evidence, phase and iteration (columns)."""

    evidence: np.ndarray  # int8 EV_* of the event's own stack (allocs only)
    phase: np.ndarray  # int8 PH_*
    guessed: np.ndarray  # bool: phase from the curve or from a Python-less stack
    iteration: np.ndarray  # int32 iteration index, -1 outside any iteration
    iterations: list[Iteration]
    stack_kinds: np.ndarray  # int32 kind bits per stack (shared with classify)
    annotated: bool  # optimizer steps came from record_function annotations


def _annotation_ranges(snap: Snapshot, device: int, time_us: np.ndarray,
                       prefix: str) -> list[tuple[int, int]]:
    """Event ranges ``[lo, hi)`` of the record_function ranges whose name starts with
    ``prefix`` (matched START to END in order), on ``device`` (or every device when the
    file does not say)."""
    ann = snap.annotations
    if not len(ann) or not len(time_us) or time_us.min() < 0:
        return []
    strings = snap.strings
    wanted = np.fromiter((strings[i].startswith(prefix) if i >= 0 else False
                          for i in ann.name.tolist()), bool, count=len(ann))
    rows = np.flatnonzero(wanted & ((ann.device == device) | (ann.device < 0)))
    out = []
    open_at = None
    for r in rows.tolist():
        if ann.is_start[r]:
            open_at = int(ann.time_us[r])
        elif open_at is not None:
            t0, t1 = open_at, int(ann.time_us[r])
            open_at = None
            if t1 < time_us[0] or t0 > time_us[-1]:
                continue  # outside the recorded window (ring buffers keep older annotations)
            lo = int(np.searchsorted(time_us, t0, "left"))
            hi = int(np.searchsorted(time_us, t1, "right"))
            out.append((lo, hi))
    return out


def _mark(n: int, ranges: list[tuple[int, int]]) -> np.ndarray:
    """Boolean per event: inside any of ``ranges``."""
    d = np.zeros(n + 1, np.int32)
    for lo, hi in ranges:
        if hi > lo:
            d[lo] += 1
            d[hi] -= 1
    return np.cumsum(d[:n]) > 0


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends exclusive) of the runs of True in ``mask``."""
    m = np.concatenate(([False], mask, [False])).view(np.int8)
    d = np.diff(m)
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def event_evidence(snap: Snapshot, rep: DeviceReplay, kinds: np.ndarray) -> tuple[np.ndarray,
                                                                                  np.ndarray]:
    """(evidence per event, guessed per event): the evidence of each alloc's stack."""
    has_py = sk.stack_has_python(snap)
    ev_stack = sk.stack_evidence(kinds, has_py)
    guessed_stack = ev_stack == sk.EV_NO_PYTHON
    if has_py.any():
        ev_stack[guessed_stack] = sk.EV_BACKWARD  # autograd's device thread (a guess)
    else:
        ev_stack[guessed_stack] = sk.EV_NONE  # no Python anywhere: a stack says nothing
        guessed_stack[:] = False
    n = len(rep)
    ev = np.zeros(n, np.int8)
    guessed = np.zeros(n, bool)
    alloc = rep.action == Action.ALLOC
    st = rep.stack
    has = alloc & (st >= 0)
    if len(ev_stack):
        idx = np.flatnonzero(has)
        ev[idx] = ev_stack[st[idx]]
        guessed[idx] = guessed_stack[st[idx]]
    return ev, guessed


def fill_phases(ev: np.ndarray, forced: np.ndarray) -> np.ndarray:
    """Phase per event from the strong evidence around it (vectorised forward/backward fill).

    ``forced`` (int8, -1 = none) overrides the evidence (annotation ranges)."""
    n = len(ev)
    strong_phase = np.full(n, -1, np.int8)
    for e, p in _STRONG_PHASE.items():
        strong_phase[ev == e] = p
    has_forced = forced >= 0
    strong_phase[has_forced] = forced[has_forced]
    strong = strong_phase >= 0
    idx = np.arange(n, dtype=np.int64)
    prev_i = np.maximum.accumulate(np.where(strong, idx, -1)) if n else idx
    nxt = np.where(strong, idx, n)
    next_i = np.minimum.accumulate(nxt[::-1])[::-1] if n else idx
    ext = np.append(strong_phase, np.int8(-1))  # index n / -1: no evidence there
    pp = ext[prev_i]
    qp = ext[next_i]
    phase = np.where(pp == qp, pp, np.int8(PH_OTHER)).astype(np.int8)
    phase[(pp == PH_FORWARD) & (qp == PH_BACKWARD)] = PH_FORWARD  # the loss, between them
    # The user's own code between two forwards (the next batch of an evaluation loop)
    # separates them.
    phase[(ev == sk.EV_USER) & (pp == PH_FORWARD) & (qp == PH_FORWARD)] = PH_OTHER
    phase[phase < 0] = PH_OTHER
    phase[strong] = strong_phase[strong]
    return phase


def _split_by_curve(phase: np.ndarray, guessed: np.ndarray, requested: np.ndarray,
                    spans: list[tuple[int, int]]) -> None:
    """Inside each span without forward/backward evidence, the forward ends at the highest
    point of the curve (activations pile up, then backward releases them): a guess."""
    for lo, hi in spans:
        if hi - lo < 2:
            continue
        seg = phase[lo:hi]
        if (seg == PH_FORWARD).any() or (seg == PH_BACKWARD).any():
            continue
        top = lo + int(np.argmax(requested[lo:hi]))
        free = seg == PH_OTHER
        fwd = np.zeros(hi - lo, bool)
        fwd[:top - lo + 1] = True
        seg[free & fwd] = PH_FORWARD
        seg[free & ~fwd] = PH_BACKWARD
        guessed[lo:hi] |= free


def find_phases(snap: Snapshot, rep: DeviceReplay, kinds: np.ndarray | None = None,
                requested: np.ndarray | None = None) -> Phases:
    """Evidence, phases and iterations of one device's trace (``requested``: the requested
    bytes after each event, default ``rep.requested``)."""
    if kinds is None:
        kinds = sk.stack_kinds(snap)
    if requested is None:
        requested = rep.requested
    n = len(rep)
    ev, guessed = event_evidence(snap, rep, kinds)
    forced = np.full(n, -1, np.int8)
    steps = _annotation_ranges(snap, rep.device, rep.time_us, "Optimizer.step")
    zero = _annotation_ranges(snap, rep.device, rep.time_us, "Optimizer.zero_grad")
    forced[_mark(n, zero)] = PH_OTHER
    forced[_mark(n, steps)] = PH_OPTIMIZER
    phase = fill_phases(ev, forced)

    # Anchors: where iterations end.
    o_starts, o_ends = _runs(phase == PH_OPTIMIZER)
    anchors = list(zip(o_starts.tolist(), o_ends.tolist()))
    covered = _mark(n, anchors)
    for lo, hi in steps:  # steps that allocated nothing and freed nothing: empty ranges
        if hi <= lo and not (lo < n and covered[lo]) and not (lo > 0 and covered[lo - 1]):
            anchors.append((lo, lo))
    anchors.sort()
    if anchors:
        # Without frames, split each span between steps at its highest point (guess).
        bounds = [0] + [hi for _, hi in anchors]
        spans = [(b, lo) for b, (lo, _) in zip(bounds, anchors)]
        _split_by_curve(phase, guessed, requested, spans)
    else:
        for ph in (PH_BACKWARD, PH_FORWARD):
            s, e = _runs(phase == ph)
            if len(s):
                anchors = list(zip(s.tolist(), e.tolist()))
                break
    iterations, iteration = _iterations(ev, phase, guessed, requested, anchors, n)
    return Phases(evidence=ev, phase=phase, guessed=guessed, iteration=iteration,
                  iterations=iterations, stack_kinds=kinds, annotated=bool(steps))


def _iterations(ev, phase, guessed, requested, anchors, n):
    iteration = np.full(n, -1, np.int32)
    out: list[Iteration] = []
    if not anchors or n == 0:
        return out, iteration
    work = (phase == PH_FORWARD) | (phase == PH_BACKWARD)
    first_work = np.flatnonzero(work[:max(anchors[0][1], anchors[0][0] + 1)])
    first = int(first_work[0]) if len(first_work) else anchors[0][0]
    # The first iteration starts after the last module construction / .to() before it.
    setup = np.flatnonzero(ev[:first] == sk.EV_PARAM_INIT)
    start = int(setup[-1]) + 1 if len(setup) else 0
    spans = []
    for lo, hi in anchors:
        end = max(hi, lo + 1, start + 1)
        spans.append((start, min(end, n), True))
        start = min(end, n)
    if start < n and work[start:].any():  # the recording stopped inside an iteration
        spans.append((start, n, False))
    for i, (lo, hi, complete) in enumerate(spans):
        if hi <= lo:
            continue
        if lo == 0 and not (phase[lo:hi] == PH_FORWARD).any():
            complete = False  # the recording started inside it (a ring buffer)
        iteration[lo:hi] = len(out)
        k = lo + int(np.argmax(requested[lo:hi]))
        seg = phase[lo:hi]
        kind = "train" if (seg == PH_BACKWARD).any() else "eval"
        if not complete and out:  # cut short (an OOM): it was going to be like the others
            kind = out[-1].kind
        out.append(Iteration(
            index=len(out), start=lo, end=hi - 1, peak_bytes=int(requested[k]), peak_event=k,
            peak_phase=PHASE_NAMES[int(phase[k])],
            kind=kind,
            complete=complete, phases_guessed=bool(guessed[lo:hi].any() and not (
                ev[lo:hi] == sk.EV_FORWARD).any())))
    return out, iteration
