"""The categories' C passes (_native/catcore.c via categories/native_passes.py) equal their numpy
references exactly: whole breakdowns of real recordings built both ways (every column,
iteration, leak and curve), and each pass on random inputs against the numpy code it
replaces (inconsistent traces, ring buffers, annotation ranges, unsorted spans)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from tests.native_gate import needs
from vramscope.viewer.model import load_bytes, load_snapshot
from vramscope.viewer.model.categories import MemoryBreakdown, classify, iterations, lean
from vramscope.viewer.model.categories import native_passes as native
from vramscope.viewer.model.categories.iterations import (
    PH_BACKWARD,
    PH_FORWARD,
    PH_OPTIMIZER,
    PH_OTHER,
    Iteration,
    IterationOf,
    PhaseRuns,
    Phases,
)
from vramscope.viewer.model.replay.timeline import Intervals, build_timeline, oom_events

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import itertools

import synthetic_training as syn

from tests.model.test_replay import random_trace_snapshot

pytestmark = needs(native.available(), "the catcore extension is not built")

DATA = Path(__file__).resolve().parents[1] / "data"
EXTERNAL = shared_data.EXTERNAL
FILES = [
    DATA / f
    for f in (
        "transformer_long_python_1000k.pickle.xz",
        "gpt2_oom.pickle",
        "cuda_graph_pool.pickle",
        "side_stream_pending.pickle",
        "resnet50_train.pickle",
        "newer_fields.pickle",
        "truth/ring_wrap.pickle.xz",
        "truth/gpt2_leak.pickle.xz",
        "truth/ckpt_gpt2_b13.pickle.xz",
        "truth/eval_keeps_outputs.pickle.xz",
        "truth/stacks_all.pickle.xz",
    )
] + [
    shared_data.param(EXTERNAL / f)
    for f in (
        "JasperSolt_EoR_NN-snapshot.pickle.xz",
        "Constructor-Sun_code_location-memory_snapshot.pickle.xz",
        "kkaitlyn111_cs336-a2-systems-memory_files_memory_ctx128_fullstep_.pickle.xz",
    )
]


def _pure(monkeypatch):
    """The numpy references only (as without a compiler)."""
    monkeypatch.setattr(native, "_cat", None)


def _same(a: MemoryBreakdown, b: MemoryBreakdown) -> None:
    for col in Intervals.__dataclass_fields__:
        x, y = getattr(a.intervals, col), getattr(b.intervals, col)
        assert x.dtype == y.dtype and np.array_equal(x, y), col
    for col in ("category", "reason"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    for col in ("evidence", "phase", "guessed"):
        x, y = getattr(a.phases, col), getattr(b.phases, col)
        assert x.dtype == y.dtype and np.array_equal(x, y), col
    assert np.array_equal(np.asarray(a.phases.iteration), np.asarray(b.phases.iteration))
    assert a.phases.zero_grad == b.phases.zero_grad
    assert [it.to_dict() for it in a.iterations] == [it.to_dict() for it in b.iterations]
    assert [lk.to_dict() for lk in a.leaks] == [lk.to_dict() for lk in b.leaks]
    assert np.array_equal(a.requested, b.requested)
    ev = np.linspace(0, max(a.n_events - 1, 0), 64).astype(np.int64)
    assert np.array_equal(a.category_curves(ev), b.category_curves(ev))


def _both(snap_of, monkeypatch):
    """The breakdown of every device built with the C passes, then with numpy only."""
    snap = snap_of()
    tl = build_timeline(snap, keyframes=False, emit=oom_events(snap))
    fast = {d: MemoryBreakdown.build(snap, tl, d) for d in tl.devices}
    with monkeypatch.context() as m:
        _pure(m)
        snap = snap_of()
        tl = build_timeline(snap, keyframes=False, emit=oom_events(snap))
        slow = {d: MemoryBreakdown.build(snap, tl, d) for d in tl.devices}
    assert fast.keys() == slow.keys()
    return fast, slow


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_breakdowns_with_and_without_the_c_passes_are_identical(path, monkeypatch):
    if path.parent == EXTERNAL:  # others' files, not always there
        shared_data.require(path)
    fast, slow = _both(lambda: load_snapshot(path), monkeypatch)
    for d in fast:
        _same(fast[d], slow[d])


@pytest.mark.parametrize("leak", [False, True])
def test_frameless_training_loop_identical(leak, monkeypatch):
    """No frames: the phases are split at each iteration's peak (the curve)."""
    data, _ = syn.training_run(iterations=7, layers=4, leak=leak)
    fast, slow = _both(lambda: load_bytes(data), monkeypatch)
    for d in fast:
        _same(fast[d], slow[d])
        assert fast[d].iterations


def test_lean_intervals_of_random_inconsistent_traces(monkeypatch):
    """Frees without allocations, allocations over live blocks, blocks from before
    recording: catcore.alloc_lifetimes pairs them as the lifetimes do."""
    rng = np.random.default_rng(7)
    from vramscope.viewer.model.replay import replay_device

    for trial in range(200):
        snap, _n = random_trace_snapshot(rng, [0, 0, 1, 2, 2, 3, 4])
        rep = replay_device(snap, 0, keyframe_every=37)
        fast = lean.lean_intervals(rep)
        with monkeypatch.context() as m:
            _pure(m)
            rep._derived.clear()
            slow = lean.lean_intervals(rep)
        for col in Intervals.__dataclass_fields__:
            x, y = getattr(fast, col), getattr(slow, col)
            assert x.dtype == y.dtype and np.array_equal(x, y), (trial, col)
        some = np.arange(0, len(fast), 3)
        for col in ("addr", "size"):
            fresh = lean.lean_intervals(rep)
            assert np.array_equal(lean.column_at(fresh, col, some), getattr(slow, col)[some])
            assert col not in vars(fresh)


def _random_runs(rng, n, values, mean):
    out = np.empty(n, np.int8)
    k = 0
    while k < n:
        r = int(rng.integers(1, 2 * mean))
        out[k : k + r] = rng.choice(values)
        k += r
    return out


def test_phases_equal_event_evidence_and_fill_phases():
    rng = np.random.default_rng(3)
    for trial in range(150):
        n = int(rng.integers(0, 3000))
        n_stacks = int(rng.integers(1, 12))
        code = np.append(
            rng.integers(0, 8, n_stacks).astype(np.int8)
            | (rng.integers(0, 2, n_stacks).astype(np.int8) << 4),
            np.int8(0),
        )
        stack = rng.integers(-1, n_stacks, n).astype(np.int32)
        action = rng.integers(0, 9, n).astype(np.int8)
        forced_list = []
        for _ in range(int(rng.integers(0, 6))):
            lo = int(rng.integers(0, n + 5))
            forced_list.append(
                (lo, lo + int(rng.integers(-3, 200)), int(rng.choice([PH_OTHER, PH_OPTIMIZER])))
            )
        ev, guessed, phase, (at, v) = native.phases(action, stack, code, forced_list)
        want_at, want_v = native.runs(phase)
        assert np.array_equal(at, want_at) and np.array_equal(v, want_v), trial
        got = code[stack] * np.isin(action, (0, 1)).astype(np.int8)
        assert np.array_equal(guessed, got >= 16), trial
        assert np.array_equal(ev, got & 15), trial
        forced = np.full(n, -1, np.int8)
        for lo, hi, v in forced_list:
            forced[max(lo, 0) : max(hi, 0)] = v
        assert np.array_equal(phase, iterations.fill_phases(got & 15, forced)), trial


def test_runs_spans_and_next_equal_equal_numpy():
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(1, 2000))
        x = _random_runs(rng, n, [0, 1, 2, 3], int(rng.integers(1, 40)))
        at, v = native.runs(x)
        want = np.concatenate(([0], np.flatnonzero(x[1:] != x[:-1]) + 1))
        assert np.array_equal(at, want) and np.array_equal(v, x[want])
        end = int(rng.integers(1, n + 1))
        lo = np.sort(rng.integers(0, end, int(rng.integers(1, 20))))
        if trial % 3 == 0:
            lo = rng.integers(0, end, len(lo))  # unsorted: reduceat's own rule
        for value in (1, 2):
            assert np.array_equal(
                native.spans_any(x, value, lo, end), np.logical_or.reduceat(x[:end] == value, lo)
            ), trial
            q = rng.integers(-3, n + 3, int(rng.integers(0, 50)))
            if trial % 2:
                q = np.sort(q)
            assert np.array_equal(
                native.next_equal(x, value, q), classify._next_at(np.flatnonzero(x == value), q, n)
            ), trial


def test_span_peaks_equal_argmax_of_the_curve():
    rng = np.random.default_rng(11)
    for trial in range(150):
        n = int(rng.integers(1, 3000))
        action = rng.integers(0, 9, n).astype(np.int8)
        size = rng.integers(0, 1 << 40, n).astype(np.int64)
        start = int(rng.integers(0, 1 << 41))
        step = np.where(action == 0, size, np.where(action == 2, -size, 0))
        curve = start + np.cumsum(step)
        cuts = np.unique(rng.integers(0, n + 1, int(rng.integers(2, 30))))
        lo, hi = cuts[:-1], cuts[1:]
        keep = rng.random(len(lo)) < 0.8  # gaps between spans too
        lo, hi = lo[keep], hi[keep]
        top, peak = native.span_peaks(action, size, start, lo, hi)
        want = np.array([a + int(np.argmax(curve[a:b])) for a, b in zip(lo, hi)], np.int64)
        assert np.array_equal(peak, want.reshape(-1)), trial
        assert np.array_equal(top, curve[want].reshape(-1)), trial


def test_classify_window_equals_the_numpy_rules():
    """Random phases, evidence, guesses, iterations and lifetimes: every rule of
    classify._window, in C, decides the same reason."""
    rng = np.random.default_rng(17)
    for trial in range(150):
        n = int(rng.integers(2, 4000))
        phase = _random_runs(rng, n, [PH_OTHER, PH_FORWARD, PH_BACKWARD, PH_OPTIMIZER], 60)
        evidence = rng.integers(0, 8, n).astype(np.int8)
        guessed = rng.random(n) < 0.2
        n_stacks = int(rng.integers(1, 20))
        kinds = rng.integers(0, 1 << 13, n_stacks).astype(np.int32)
        pre = int(rng.integers(0, 5))
        starts = np.sort(rng.choice(n, int(rng.integers(1, n)), replace=False))
        start = np.concatenate((np.full(pre, -1), starts)).astype(np.int64)
        end = np.minimum(np.maximum(start, 0) + rng.integers(1, n // 2 + 2, len(start)), n)
        stack = rng.integers(-1, n_stacks, len(start)).astype(np.int32)
        cuts = np.unique(rng.integers(0, n + 1, int(rng.integers(0, 12))))
        spans = [(int(a), int(b)) for a, b in itertools.pairwise(cuts)]
        its = [
            Iteration(i, a, b - 1, 0, a, "forward", "train", True, False)
            for i, (a, b) in enumerate(spans)
        ]
        it_of = IterationOf(
            np.array([a for a, _ in spans], np.int64), spans[-1][1] if spans else 0, n
        )
        ph = Phases(
            evidence=evidence,
            phase=phase,
            guessed=guessed,
            iteration=it_of,
            iterations=its,
            stack_kinds=kinds,
            annotated=False,
        )
        iv = Intervals(
            start=start,
            end=end,
            requested=np.ones(len(start), np.int64),
            stack=stack,
            event=start,
            size=np.ones(len(start), np.int64),
            addr=np.arange(len(start), dtype=np.int64),
            stream=np.zeros(len(start), np.int64),
            pool=np.zeros(len(start), np.int32),
        )
        kinds_ext = np.append(kinds, np.int32(0))
        a = np.full(len(start), -1, np.int16)
        b = a.copy()
        assert classify._window_native(iv, ph, n, a, kinds_ext)
        classify._window(iv, ph, n, b, kinds_ext, start >= 0)
        assert np.array_equal(a, b), trial
        assert (a[pre:] >= 0).all() and (a[:pre] == -1).all()


def test_classify_window_declines_allocations_out_of_event_order():
    n = 10
    ph = Phases(
        evidence=np.zeros(n, np.int8),
        phase=np.zeros(n, np.int8),
        guessed=np.zeros(n, bool),
        iteration=IterationOf(np.zeros(0, np.int64), 0, n),
        iterations=[],
        stack_kinds=np.zeros(1, np.int32),
        annotated=False,
    )
    start = np.array([5, 2], np.int64)
    iv = Intervals(
        start=start,
        end=start + 1,
        requested=start,
        stack=np.zeros(2, np.int32),
        event=start,
        size=start,
        addr=start,
        stream=start,
        pool=np.zeros(2, np.int32),
    )
    reason = np.full(2, -1, np.int16)
    assert not classify._window_native(iv, ph, n, reason, np.zeros(2, np.int32))
    assert (reason == -1).all()  # nothing written: the numpy rules decide


def test_phase_runs_answer_like_masks():
    rng = np.random.default_rng(23)
    for trial in range(100):
        n = int(rng.integers(1, 2000))
        phase = _random_runs(rng, n, [0, 1, 2, 3], 30)
        runs = PhaseRuns(phase)
        for p in range(4):
            s, e = runs.of(p)
            m = np.concatenate(([False], phase == p, [False])).view(np.int8)
            d = np.diff(m)
            assert np.array_equal(s, np.flatnonzero(d == 1)), trial
            assert np.array_equal(e, np.flatnonzero(d == -1)), trial
        cuts = np.unique(np.concatenate(([0, n], rng.integers(0, n, 8))))
        lo, hi = cuts[:-1], cuts[1:]
        want = np.logical_or.reduceat(phase == PH_BACKWARD, lo)
        assert np.array_equal(runs.any_in(lo, hi, PH_BACKWARD), want), trial


def test_unique_inverse_equals_numpy():
    rng = np.random.default_rng(29)
    for trial in range(100):
        pool = rng.integers(-(1 << 62), 1 << 62, int(rng.integers(1, 300)))
        x = rng.choice(pool, int(rng.integers(0, 5000)))
        u, inv = native.unique_inverse(x)
        wu, winv = np.unique(x, return_inverse=True)
        assert np.array_equal(u, wu) and np.array_equal(inv, winv.reshape(-1)), trial


@pytest.mark.parametrize("path", FILES[:8], ids=lambda p: p.name)
def test_phase_spans_from_runs_equal_the_per_event_columns(path):
    """category_view.phase_spans (runs cut at the iterations' bounds) = the reference
    from the per-event phase and iteration columns."""
    from vramscope.viewer.model.view.category_view import phase_spans, phase_spans_of_columns

    snap = load_snapshot(path)
    tl = build_timeline(snap, keyframes=False, emit=oom_events(snap))
    for d in tl.devices:
        bd = MemoryBreakdown.build(snap, tl, d)
        assert phase_spans(bd) == phase_spans_of_columns(bd)


@pytest.mark.parametrize("leak", [False, True])
def test_phase_spans_of_a_frameless_loop_equal_the_columns(leak):
    from vramscope.viewer.model.view.category_view import phase_spans, phase_spans_of_columns

    data, _ = syn.training_run(iterations=7, layers=4, leak=leak)
    snap = load_bytes(data)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
    spans = phase_spans(bd)
    assert spans and spans == phase_spans_of_columns(bd)


def test_breakdowns_of_random_inconsistent_traces_identical(monkeypatch):
    """Frees of unknown blocks, allocations over live ones, OOMs, segments: the whole
    breakdown with the C passes = without them (never an error either way)."""
    rng = np.random.default_rng(42)
    for _ in range(150):
        snap, _ = random_trace_snapshot(rng, [0, 0, 1, 2, 2, 3, 4, 7])
        fast = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
        with monkeypatch.context() as m:
            _pure(m)
            slow = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
        _same(fast, slow)
