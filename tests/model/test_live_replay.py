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
import itertools

import numpy as np
import pytest

from tests.conftest import DATA
from tests.native_gate import needs
from vramscope.viewer.model.core.snapshot import Trace
from vramscope.viewer.model.replay import layout_snapshot, native_available, timeline
from vramscope.viewer.model.replay.integrity import final_difference
from vramscope.viewer.model.replay.timeline import build_timeline

LOOPS = [False, True] if native_available() else [False]
needs(native_available(), "replay_core extension not built")  # under the gate: required
NAMES = ["gpt2_oom", "whatif_expandable", "side_stream_pending", "cuda_graph_pool"]


def rows_snapshot(snap, full, lo: int, hi: int):
    """The live snapshot holding trace rows [lo, hi) (one device), segments as after hi - 1."""
    trace = Trace(**{f.name: getattr(snap.trace, f.name)[lo:hi] for f in dataclasses.fields(Trace)})
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
        assert final_difference(tl) == []  # the replay lands on the live segments
    ref = build_timeline(snap).replay(0)
    assert_same(rep, ref)
    assert_same_intervals(iv, build_timeline(snap).intervals(0))


@pytest.mark.parametrize("native", LOOPS)
def test_ring_that_drops_rows_keeps_them_until_compaction(native, loaded_snapshots, monkeypatch):
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


def two_devices(snap):
    """``snap`` (one device) and a copy of it on device 1 at other addresses, the two
    traces interleaved event by event (as one process driving two GPUs)."""
    off = 1 << 44
    n = len(snap.trace)
    t = snap.trace
    cols = {f.name: np.empty(2 * n, getattr(t, f.name).dtype) for f in dataclasses.fields(Trace)}
    for name, out in cols.items():
        out[0::2] = getattr(t, name)
        out[1::2] = getattr(t, name)
    cols["device"][1::2] = 1
    cols["addr"][1::2] = np.where(t.addr[:] != 0, t.addr + off, 0)
    return dataclasses.replace(snap, trace=Trace(**cols)), off


def stack_devices(a, b, off):
    """Segments and blocks of ``a`` (device 0) and ``b`` moved to device 1 by ``off``."""
    sa, sb, ba, bb = a.segments, b.segments, a.blocks, b.blocks
    segs = {
        f.name: np.concatenate([getattr(sa, f.name), getattr(sb, f.name)])
        for f in dataclasses.fields(sa)
    }
    segs["device"][len(sa.address) :] = 1
    segs["address"][len(sa.address) :] += off
    segs["block_start"][len(sa.address) :] += len(ba.address)
    blocks = {
        f.name: np.concatenate([getattr(ba, f.name), getattr(bb, f.name)])
        for f in dataclasses.fields(ba)
    }
    blocks["segment"][len(ba.address) :] += len(sa.address)
    blocks["address"][len(ba.address) :] += off
    return dataclasses.replace(a, segments=type(sa)(**segs), blocks=type(ba)(**blocks))


@pytest.mark.parametrize("native", LOOPS)
def test_two_devices_extend_like_one_build(native, loaded_snapshots, monkeypatch):
    if not native:
        monkeypatch.setenv("VRAMSCOPE_PURE_PYTHON", "1")
    one = loaded_snapshots(DATA / "side_stream_pending.pickle")
    full1 = build_timeline(one)
    snap, off = two_devices(one)
    n = len(one.trace)

    def prefix(m):  # rows [0, 2m): m events of each device
        lay = rows_snapshot(one, full1, 0, m)
        trace = Trace(
            **{f.name: getattr(snap.trace, f.name)[: 2 * m] for f in dataclasses.fields(Trace)}
        )
        return dataclasses.replace(stack_devices(lay, lay, off), trace=trace)

    cuts = [n // 4, n // 2, (3 * n) // 4, n]
    tl = build_timeline(prefix(cuts[0]), live=True)
    for d in (0, 1):
        tl.replay(d).curve_index()
        tl.intervals(d)
    for lo, hi in itertools.pairwise(cuts):
        assert tl.extend(prefix(hi), 2 * lo) is False
    ref = build_timeline(prefix(n))
    for d in (0, 1):
        assert ref.replay(d).inconsistencies == 0 and len(ref.replay(d)) == n
        assert_same(tl.replay(d), ref.replay(d), n_check=5)
        assert_same_intervals(tl.intervals(d), ref.intervals(d))


def test_document_extend_equals_document_build(loaded_snapshots):
    """Document.extend: the timeline grows in place and labels are computed for the new
    frames and stacks only; the result equals a document built at once."""
    from vramscope.viewer.model.core.snapshot import Frames, Stacks
    from vramscope.viewer.model.view.document import Document

    snap = loaded_snapshots(DATA / "side_stream_pending.pickle")
    full = build_timeline(snap)
    n = len(snap.trace)
    first = rows_snapshot(snap, full, 0, n // 2)
    # The session's interner had seen fewer frames and stacks at the first update.
    f, s = snap.frames, snap.stacks
    ns = len(s) // 2
    nf = int(s.frames[: s.offsets[ns]].max()) + 1  # the frames those stacks use
    assert 0 < nf < len(f) and 0 < ns < len(s)
    first = dataclasses.replace(
        first,
        frames=Frames(f.filename[:nf], f.line[:nf], f.name[:nf], f.strings),
        stacks=Stacks(s.offsets[: ns + 1], s.frames[: s.offsets[ns]]),
    )
    doc = Document.build(first, live=True)
    iv = doc.intervals(0)
    doc2 = doc.extend(rows_snapshot(snap, full, 0, n), n // 2)
    ref = Document.build(snap)
    for name in ("categories", "top_frame", "top_rank"):
        assert np.array_equal(getattr(doc2, name), getattr(ref, name)), name
    assert doc2.top_label.tolist() == ref.top_label.tolist()
    assert doc2.timeline is doc.timeline and doc2.intervals(0) is iv
    assert_same(doc2.timeline.replay(0), ref.timeline.replay(0), n_check=5)
    assert_same_intervals(doc2.intervals(0), ref.intervals(0))
    assert len(doc2.ooms) == len(ref.ooms)


def test_what_views_derived_from_the_intervals_follows_a_live_extend(loaded_snapshots):
    """A view's index over the intervals (the stacked timeline's) is made again after a
    live update extended them in place, not kept from before."""
    from vramscope.viewer.model.view.stacking import stacked_layout

    snap = loaded_snapshots(DATA / "side_stream_pending.pickle")
    full = build_timeline(snap)
    n = len(snap.trace)
    tl = build_timeline(rows_snapshot(snap, full, 0, n // 3), live=True)
    iv = tl.intervals(0)
    stacked_layout(iv, 0, n // 3, 200)  # the view's index is made here
    assert tl.extend(rows_snapshot(snap, full, 0, n), n // 3) is False
    assert tl.intervals(0) is iv
    fresh = build_timeline(snap).intervals(0)
    got, want = stacked_layout(iv, 0, n, 200), stacked_layout(fresh, 0, n, 200)

    def bands(layout, ivs):
        ids = layout.band_interval
        return sorted(zip(ivs.start[ids].tolist(), ivs.addr[ids].tolist()))

    assert len(want.band_interval) > 0
    assert bands(got, iv) == bands(want, fresh)
    assert np.array_equal(got.summary_height, want.summary_height)
