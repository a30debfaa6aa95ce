"""Incremental replay (live sessions): a timeline extended by increments equals the
timeline built at once, in every column, layout, curve, lifetime and interval.

The increments are cut from real recordings: the live snapshot after ``m``
events is the trace's first ``m`` rows with the segments the full replay has
at that moment (what the live source sends: segments taken with the newest
event).  Rings that drop old rows are checked against a timeline built on the
ring alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model.replay import layout_snapshot, native_available
from vramscope.viewer.model.snapshot import Trace
from vramscope.viewer.model import timeline
from vramscope.viewer.model.timeline import build_timeline

LOOPS = [False, True] if native_available() else [False]
NAMES = ["gpt2_oom", "whatif_expandable", "side_stream_pending", "cuda_graph_pool"]


def rows_snapshot(snap, full, lo: int, hi: int):
    """The live snapshot holding trace rows [lo, hi) (one device), segments as after hi - 1."""
    trace = Trace(**{f.name: getattr(snap.trace, f.name)[lo:hi]
                     for f in dataclasses.fields(Trace)})
    at = layout_snapshot(snap, full.replay(0).layout_after(hi - 1), 0)
    return dataclasses.replace(at, trace=trace)


def assert_same(ext, ref, n_check: int = 9):
    """Two device replays hold the same events, layouts, curves and lifetimes."""
    assert len(ext) == len(ref)
    for f in ("action", "addr", "size", "stream", "stack", "time_us", "block_size", "pool"):
        assert np.array_equal(getattr(ext, f), getattr(ref, f)), f
    assert ext.inconsistencies == ref.inconsistencies
    n = len(ref)
    for k in np.linspace(-1, n - 1, n_check).astype(int).tolist():
        a, b = ext.layout_after(k), ref.layout_after(k)
        for f in a.__dataclass_fields__:
            assert np.array_equal(getattr(a, f), getattr(b, f)), (k, f)
    ia, ib = ext.curve_index(), ref.curve_index()
    assert ia.peaks == ib.peaks
    for c in ("requested", "allocated", "active", "reserved"):
        assert np.array_equal(ia.maxima[c], ib.maxima[c]), c
        assert np.array_equal(ia.checkpoints[c], ib.checkpoints[c]), c
        assert np.array_equal(np.asarray(ia.columns()[c]), np.asarray(ib.columns()[c])), c
        for level_a, level_b in zip(ia.levels(c), ib.levels(c)):
            assert level_a[0] == level_b[0] and np.array_equal(level_a[1], level_b[1])
    allocs = np.flatnonzero(ref.action == 0)
    assert np.array_equal(ext.alloc_of, ref.alloc_of)
    assert np.array_equal(ext.freed_at[allocs], ref.freed_at[allocs])
    assert np.array_equal(ext.free_requested_at[allocs], ref.free_requested_at[allocs])


def assert_same_intervals(a, b):
    order_a = np.lexsort((a.addr, a.start))
    order_b = np.lexsort((b.addr, b.start))
    for f in a.__dataclass_fields__:
        assert np.array_equal(getattr(a, f)[order_a], getattr(b, f)[order_b]), f


@pytest.mark.parametrize("native", LOOPS)
@pytest.mark.parametrize("name", NAMES)
def test_extended_timeline_equals_built_at_once(name, native, loaded_snapshots, monkeypatch):
    if not native:
        monkeypatch.setenv("VRAMSCOPE_PURE_PYTHON", "1")
    snap = loaded_snapshots(DATA / f"{name}.pickle")
    full = build_timeline(snap)
    n = len(snap.trace)
    rng = np.random.default_rng(len(name))
    cuts = sorted(set(rng.integers(1, n, 6).tolist()) | {n // 3})
    first = cuts[0]
    tl = build_timeline(rows_snapshot(snap, full, 0, first), live=True)
    rep = tl.replay(0)
    rep.curve_index()  # what a view holds: extended in place
    iv = tl.intervals(0)
    for lo, hi in zip(cuts, cuts[1:] + [n]):
        assert tl.extend(rows_snapshot(snap, full, 0, hi), lo) is False
        assert tl.replay(0) is rep and tl.intervals(0) is iv
    ref = build_timeline(snap).replay(0)
    assert_same(rep, ref)
    assert_same_intervals(iv, build_timeline(snap).intervals(0))


@pytest.mark.parametrize("native", LOOPS)
def test_ring_that_drops_rows_keeps_them_until_compaction(native, loaded_snapshots,
                                                          monkeypatch):
    """Dropped rows stay at the start (negative rows) and the events go on; past the
    slack the timeline is rebuilt on the ring alone and equals one built there."""
    if not native:
        monkeypatch.setenv("VRAMSCOPE_PURE_PYTHON", "1")
    monkeypatch.setattr(timeline, "MIN_SLACK", 1000)  # compact within this small ring
    snap = loaded_snapshots(DATA / "gpt2_oom.pickle")
    full = build_timeline(snap)
    n = len(snap.trace)
    ring = n // 2
    step = max(1, ring // 8)
    tl = build_timeline(rows_snapshot(snap, full, 0, ring), live=True)
    lo, hi = 0, ring
    rebuilt_once = False
    while hi < n:
        new_hi = min(n, hi + step)
        new_lo = max(0, new_hi - ring)
        live = rows_snapshot(snap, full, new_lo, new_hi)
        rebuilt = tl.extend(live, hi - new_lo, dropped=new_lo - lo)
        lo, hi = new_lo, new_hi
        rep = tl.replay(0)
        assert rep.rows[-1] == hi - lo - 1
        if rebuilt:
            rebuilt_once = True
            assert tl.stale(0) == 0
            assert_same(rep, build_timeline(live).replay(0), n_check=5)
        else:
            assert tl.stale(0) == int((rep.rows < 0).sum())
    assert rebuilt_once
    tl.trim()
    assert tl.stale(0) == 0 and len(tl.replay(0)) == ring


def test_extend_needs_a_live_timeline(loaded_snapshots):
    snap = loaded_snapshots(DATA / "side_stream_pending.pickle")
    with pytest.raises(ValueError):
        build_timeline(snap).extend(snap, len(snap.trace))
