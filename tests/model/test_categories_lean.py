"""The categories' lean allocation lifetimes (categories/lean.py) equal the timeline's,
column by column, on real recordings: in-window allocations, blocks from before
recording (a ring buffer), several devices, side streams, private pools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.categories import MemoryBreakdown
from vramscope.viewer.model.categories.lean import LeanIntervals, lean_intervals
from vramscope.viewer.model.replay.timeline import Intervals, build_timeline, intervals

DATA = Path(__file__).resolve().parents[1] / "data"
EXTERNAL = shared_data.EXTERNAL
FILES = [
    DATA / f
    for f in (
        "transformer_long_python_1000k.pickle.xz",
        "gpt2_oom.pickle",
        "cuda_graph_pool.pickle",
        "side_stream_pending.pickle",
        "small_pool_mixed.pickle",
        "newer_fields.pickle",
    )
] + [
    shared_data.param(EXTERNAL / "JasperSolt_EoR_NN-snapshot.pickle.xz"),
    shared_data.param(EXTERNAL / "cranberrii_ftcourse-memory_snapshot.pickle.xz"),
]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_lean_intervals_equal_the_timelines_column_by_column(path):
    if path.parent == EXTERNAL:  # others' files, not always there
        shared_data.require(path)
    snap = load_snapshot(path, use_cache=False)
    tl = build_timeline(snap, keyframes=False)
    assert tl.devices
    for rep in tl.devices.values():
        lean = lean_intervals(rep)
        full = intervals(rep)
        assert isinstance(lean, LeanIntervals)
        assert len(lean) == len(full)
        for name in Intervals.__dataclass_fields__:
            a, b = getattr(lean, name), getattr(full, name)
            assert a.dtype == b.dtype, name
            assert np.array_equal(a, b), name
        some = np.arange(0, len(full), 7)
        taken = lean_intervals(rep).take(some)  # fresh: lazy columns read through take()
        assert np.array_equal(taken.addr, full.addr[some])
        assert np.array_equal(taken.pool, full.pool[some])


def test_the_summary_build_leaves_the_unread_columns_unmade():
    """What the cold summary saves: the block size, stream and pool of every allocation
    are never gathered by the classification."""
    snap = load_snapshot(DATA / "transformer_long_python_1000k.pickle.xz", use_cache=False)
    tl = build_timeline(snap, keyframes=False)
    bd = MemoryBreakdown.build(snap, tl)
    made = vars(bd.intervals)
    assert "start" in made and "requested" in made
    assert not {"size", "stream", "pool"} & set(made)
    # Read later (the GUI's allocations table), they appear - and equal the timeline's.
    rep = tl.replay(bd.device)
    assert np.array_equal(bd.intervals.size, intervals(rep).size)
    assert "size" in vars(bd.intervals)


@pytest.mark.parametrize("chunk", [997, 4096, 1 << 20])
def test_iteration_peaks_in_chunks_equal_the_whole_curves(chunk):
    """RequestedCurve.span_peaks (the C pass in chunks, spans crossing chunk borders) gives
    the maximum and the first event at it of every span, as argmax over the whole curve."""
    from vramscope.viewer.model.categories.breakdown import RequestedCurve

    snap = load_snapshot(DATA / "transformer_long_python_1000k.pickle.xz", use_cache=False)
    tl = build_timeline(snap, keyframes=False)
    rep = tl.replay(min(tl.devices))
    iv = lean_intervals(rep)
    curve = RequestedCurve(iv, len(rep), rep)
    curve.CHUNK = chunk
    bd = MemoryBreakdown.build(snap, tl)
    lo = np.array([it.start for it in bd.iterations], np.int64)
    hi = np.array([it.end + 1 for it in bd.iterations], np.int64)
    top, peak = curve.span_peaks(lo, hi)
    assert curve._array is None  # the whole curve was never made
    whole = bd.requested
    want = np.array([a + int(np.argmax(whole[a:b])) for a, b in zip(lo, hi)])
    assert np.array_equal(peak, want)
    assert np.array_equal(top, whole[want])
    assert [it.peak_event for it in bd.iterations] == want.tolist()


def test_iteration_of_events_indexes_like_its_column():
    """Phases.iteration answers per event without a column: same values as the column
    it stands for, for ints, arrays, negative indices, masks and slices."""
    bd = MemoryBreakdown.build(*_loaded("gpt2_oom.pickle"))
    it = bd.phases.iteration
    col = np.asarray(it)
    assert col.dtype == np.int32 and len(col) == bd.n_events
    assert (col == -1).any() and col.max() == len(bd.iterations) - 1
    for i, x in enumerate(bd.iterations):
        assert (col[x.start : x.end + 1] == i).all()
    ev = np.arange(-5, bd.n_events, 3)
    assert np.array_equal(it[ev], col[ev])
    assert it[7] == col[7] and it[-1] == col[-1]
    assert np.array_equal(it[10:200], col[10:200])
    mask = col >= 1
    assert np.array_equal(it[mask], col[mask])


def _loaded(name):
    snap = load_snapshot(DATA / name, use_cache=False)
    return snap, build_timeline(snap, keyframes=False)


def test_iteration_of_events_acts_as_an_array_for_the_views():
    bd = MemoryBreakdown.build(*_loaded("gpt2_oom.pickle"))
    it = bd.phases.iteration
    col = np.asarray(it)
    assert np.array_equal(it.astype(np.int64), col.astype(np.int64))
    assert it.max() == col.max() and it.dtype == np.int32
    assert np.array_equal(it == 1, col == 1) and np.array_equal(it >= 2, col >= 2)
