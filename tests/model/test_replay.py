"""Replay exactness: the trace reproduces the final snapshot and the allocator's peaks."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from tests.conftest import DATA, expected_for, snapshot_files, snapshot_id
from tests.native_gate import needs, required, skip_unless
from tests.snapshot_forms import raw_object
from vramscope.viewer.model import load_bytes, memory_stats
from vramscope.viewer.model.analysis.oom import oom_reports
from vramscope.viewer.model.replay import native_available, replay_device
from vramscope.viewer.model.replay.state import _apply, _State
from vramscope.viewer.model.replay.timeline import build_timeline, intervals, live_at

CURVE_COUNTERS = {
    "requested": "requested_bytes",
    "reserved": "reserved_bytes",
    "allocated": "allocated_bytes",
    "active": "active_bytes",
}


@pytest.fixture(scope="module")
def timelines(loaded_snapshots):
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = build_timeline(loaded_snapshots(path))
        return cache[path]

    return get


def sorted_blocks(snap):
    order = np.argsort(snap.blocks.address, kind="stable")
    b = snap.blocks
    return b.address[order], b.size[order], b.state[order]


@pytest.mark.parametrize("path", snapshot_files(), ids=snapshot_id)
def test_replay_reproduces_final_segments(path, loaded_snapshots, timelines):
    snap = loaded_snapshots(path)
    tl = timelines(path)
    rep = tl.replay(0)
    assert rep.inconsistencies == 0
    final = tl.snapshot_at(0, len(rep) - 1)
    for ours, theirs in zip(sorted_blocks(final), sorted_blocks(snap)):
        assert np.array_equal(ours, theirs)
    order = np.argsort(snap.segments.address)
    assert np.array_equal(final.segments.address, snap.segments.address[order])
    assert np.array_equal(final.segments.total_size, snap.segments.total_size[order])
    assert np.array_equal(final.segments.is_small, snap.segments.is_small[order])
    assert memory_stats(final) == memory_stats(snap)
    # Live blocks carry the stack of the allocation that made them.
    live = final.blocks.state == 0
    by_addr = dict(zip(snap.blocks.address.tolist(), snap.blocks.stack.tolist()))
    theirs = np.array([by_addr[a] for a in final.blocks.address[live].tolist()])
    assert np.array_equal(final.blocks.stack[live], theirs)


@pytest.mark.parametrize("path", snapshot_files(), ids=snapshot_id)
def test_peaks_equal_allocator_peaks(path, timelines):
    rep = timelines(path).replay(0)
    stats = expected_for(path)["memory_stats"]
    for curve, counter in CURVE_COUNTERS.items():
        assert rep.peak(curve)[0] == stats[f"{counter}.all.peak"], curve
        assert getattr(rep, curve)[-1] == stats[f"{counter}.all.current"], curve


@pytest.mark.parametrize(
    "name", ["gpt2_oom", "whatif_expandable", "cuda_graph_pool", "side_stream_pending"]
)
def test_seek_equals_straight_replay_and_curves(name, loaded_snapshots):
    snap = loaded_snapshots(DATA / f"{name}.pickle")
    rep = replay_device(snap, 0, keyframe_every=97)  # many keyframes, odd stride
    rng = random.Random(7)
    for k in [0, 96, 97, len(rep) - 1] + [rng.randrange(len(rep)) for _ in range(12)]:
        seek = rep.layout_after(k)
        st = _State.from_layout(rep.initial, rep.settings, rep.known)
        _apply(st, rep, 0, k + 1)
        straight = st.layout()
        for f in seek.__dataclass_fields__:
            assert np.array_equal(getattr(seek, f), getattr(straight, f)), (k, f)
    tl = build_timeline(snap)
    for k in [rng.randrange(len(rep)) for _ in range(15)]:
        stats = memory_stats(tl.snapshot_at(0, k))
        assert stats.allocated_bytes == rep.allocated[k]
        assert stats.active_bytes == rep.active[k]
        assert stats.requested_bytes == rep.requested[k]
        assert stats.reserved_bytes == rep.reserved[k]


def test_intervals_add_up_to_active(loaded_snapshots, timelines):
    path = DATA / "gpt2_oom.pickle"
    rep = timelines(path).replay(0)
    iv = intervals(rep)
    for k in range(0, len(rep), 997):
        assert iv.size[live_at(iv, k)].sum() == rep.active[k]


def test_wrapped_ring_buffer_seeds_blocks_from_before_recording(loaded_snapshots):
    """Drop the first 60% of a trace, as a wrapped ring buffer does."""
    path = DATA / "gpt2_oom.pickle"
    obj = raw_object(path)
    events = obj["device_traces"][0]
    obj["device_traces"][0] = events[int(len(events) * 0.6) :]
    snap = load_bytes(pickle.dumps(obj))
    tl = build_timeline(snap)
    rep = tl.replay(0)
    assert (rep.initial.blk_alloc == -1).all()
    assert ((rep.initial.blk_state == 0) | (rep.initial.blk_state == 1)).any()
    final = tl.snapshot_at(0, len(rep) - 1)
    ref = loaded_snapshots(path)
    # Blocks allocated inside the window are exact; so are the segments.
    assert np.array_equal(np.sort(final.segments.address), np.sort(ref.segments.address))
    in_window = rep.layout_after(len(rep) - 1).blk_alloc >= 0
    ours = set(zip(final.blocks.address[in_window].tolist(), final.blocks.size[in_window].tolist()))
    theirs = set(zip(ref.blocks.address.tolist(), ref.blocks.size.tolist()))
    assert ours <= theirs and len(ours) > 100
    assert memory_stats(final).reserved_bytes == memory_stats(ref).reserved_bytes


def test_first_oom_judged_at_its_moment(loaded_snapshots, timelines):
    path = DATA / "fragmentation_oom.pickle"
    first, last = oom_reports(loaded_snapshots(path), timelines(path))
    assert first.kind == "capacity" and first.free_in_pool_bytes == 0
    assert last.kind == "fragmentation" and last.largest_free_block_bytes == 4 << 20


@pytest.mark.parametrize("name", ["cuda_graph_pool", "side_stream_pending"])
def test_curves_per_pool_and_stream_add_up(name, loaded_snapshots):
    """Per-pool and per-stream curves end at the figures of that pool / stream."""
    from vramscope.viewer.model import Selection
    from vramscope.viewer.model.replay import curves

    snap = loaded_snapshots(DATA / f"{name}.pickle")
    rep = build_timeline(snap).replay(0)
    for key, values in (
        ("pool", range(len(snap.pools))),
        ("stream", sorted(set(snap.segments.stream.tolist()))),
    ):
        parts = [curves(rep, **{key: v}) for v in values]
        for curve in ("requested", "allocated", "active", "reserved"):
            assert np.array_equal(sum(p[curve] for p in parts), getattr(rep, curve)), (key, curve)
        for v, part in zip(values, parts):
            stats = memory_stats(snap, Selection(**{key: v}))
            assert part["reserved"][-1] == stats.reserved_bytes
            assert part["allocated"][-1] == stats.allocated_bytes
            assert part["requested"][-1] == stats.requested_bytes
    assert len(snap.pools) > 1 or name != "cuda_graph_pool"


needs_native = needs(native_available(), "replay_core extension not built")


@needs_native
@pytest.mark.parametrize("path", snapshot_files(), ids=snapshot_id)
def test_native_replay_equals_python_replay(path, loaded_snapshots):
    """The C loop and the Python state machine give identical replays, seeks and lifetimes."""
    snap = loaded_snapshots(path)
    for device in sorted(set(snap.trace.device.tolist())):
        ours = replay_device(snap, device, keyframe_every=211, native=True)
        ref = replay_device(snap, device, keyframe_every=211, native=False)
        assert ours.native and not ref.native
        assert ours.inconsistencies == ref.inconsistencies
        assert np.array_equal(ours.block_size, ref.block_size)
        assert np.array_equal(ours.pool, ref.pool)
        assert len(ours.keyframes) == len(ref.keyframes) == len(ref) // 211
        for a, b in zip([ours.initial] + ours.keyframes, [ref.initial] + ref.keyframes):
            for f in a.__dataclass_fields__:
                assert np.array_equal(getattr(a, f), getattr(b, f)), f
        rng = random.Random(3)
        for k in [-1, 0, len(ref) - 1] + [rng.randrange(len(ref)) for _ in range(8)]:
            a, b = ours.layout_after(k), ref.layout_after(k)
            for f in a.__dataclass_fields__:
                assert np.array_equal(getattr(a, f), getattr(b, f)), (k, f)
        for f in ("alloc_of", "freed_at", "free_requested_at"):
            assert np.array_equal(getattr(ours, f), getattr(ref, f)), f
        for curve in CURVE_COUNTERS:
            assert ours.peak(curve) == ref.peak(curve)
            assert np.array_equal(getattr(ours, curve), getattr(ref, curve))


@needs_native
def test_native_seed_scan_and_lifetimes_equal_python(monkeypatch):
    """Random traces (addresses reused, frees without allocs) through both scans."""
    from vramscope.viewer.model import replay as rp
    from vramscope.viewer.model.replay.seed import _first_frees

    rng = np.random.default_rng(5)
    action = rng.integers(0, 9, 20_000).astype(np.int8)
    addr = rng.integers(0, 300, 20_000).astype(np.int64) * 512
    native = _first_frees(action, addr), rp.link_lifetimes(action, addr)
    monkeypatch.setenv("VRAMSCOPE_PURE_PYTHON", "1")
    python = _first_frees(action, addr), rp.link_lifetimes(action, addr)
    assert np.array_equal(native[0][0], python[0][0])
    assert np.array_equal(np.sort(native[0][1]), python[0][1])
    for f in native[1]:
        assert np.array_equal(native[1][f], python[1][f]), f
    # The fill variant (what link_lifetimes uses, on np.empty) writes every entry: on
    # outputs full of garbage it gives what the pre-filled variant gives.
    from vramscope.viewer.model.replay.native_loop import _core

    n = len(action)
    junk = [np.full(n, 777, np.int32) for _ in range(3)]
    _core.link_lifetimes_fill(action, addr, *junk)
    pre = [np.full(n, -1, np.int32), np.full(n, n, np.int32), np.full(n, n, np.int32)]
    _core.link_lifetimes(action, addr, *pre)
    for a, b, f in zip(junk, pre, ("alloc_of", "freed_at", "free_requested_at")):
        assert np.array_equal(a, b), f
        assert np.array_equal(a, python[1][f]), f


def test_summary_replay_without_keyframes_keeps_oom_layouts(loaded_snapshots):
    """A headless replay keeps no keyframes, only the layouts at the OOMs, and they equal
    the seeks of a full replay."""
    from vramscope.viewer.model.replay.timeline import oom_events

    snap = loaded_snapshots(DATA / "fragmentation_oom.pickle")
    emit = oom_events(snap)
    assert emit[0]
    light = build_timeline(snap, keyframes=False, emit=emit).replay(0)
    full = build_timeline(snap).replay(0)
    assert not light.keyframes and sorted(light.emitted) == emit[0]
    for k in emit[0] + [5, len(full) - 2]:
        a, b = light.layout_after(k), full.layout_after(k)
        for f in a.__dataclass_fields__:
            assert np.array_equal(getattr(a, f), getattr(b, f)), (k, f)
    assert light.peak("reserved") == full.peak("reserved")


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("name", ["gpt2_oom", "whatif_expandable"])
def test_curve_index_gives_the_curves_exactly(name, native, loaded_snapshots):
    """Views read the curves through block summaries; every value and envelope is exact."""
    from vramscope.viewer.model.replay.curves import BLOCK, CurveIndex

    if native:  # under VRAMSCOPE_REQUIRE_NATIVE=1 a missing extension fails, never skips
        skip_unless(native_available(), "replay_core extension not built")
    snap = loaded_snapshots(DATA / f"{name}.pickle")
    rep = replay_device(snap, 0, native=native)
    full = {c: getattr(rep, c) for c in CURVE_COUNTERS}
    index = CurveIndex(rep)
    cols = index.columns()
    n = len(rep)
    rng = random.Random(11)
    for _ in range(20):
        a = rng.randrange(n)
        b = min(n - 1, a + rng.randrange(1, 3 * BLOCK))
        got = index.values(a, b)
        for c in CURVE_COUNTERS:
            assert np.array_equal(got[c], full[c][a : b + 1]), (c, a, b)
    picks = np.array(sorted(rng.randrange(n) for _ in range(50)))
    for c in CURVE_COUNTERS:
        assert np.array_equal(cols[c][picks], full[c][picks])
        assert cols[c][-1] == full[c][-1] and len(cols[c]) == n
        assert cols[c].peak() == (int(full[c].max()), int(np.argmax(full[c]))) == rep.peak(c)
        for level, maxima in index.levels(c):
            m = (n // level) * level
            assert np.array_equal(maxima, full[c][:m].reshape(-1, level).max(axis=1))


def random_trace_snapshot(rng, actions):
    """A snapshot whose trace is random events (frees without allocs, overlapping
    blocks, maps into nothing, sizes up to 2**62) over a few seeded segments."""
    names = [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
    ]
    base = 0x7F0000000000
    n = int(rng.integers(1, 400))
    addrs = base + rng.integers(0, 64, n) * (1 << 20) + rng.integers(0, 4, n) * 512
    sizes = rng.choice(
        [1, 511, 512, 4096, 1 << 20, (1 << 20) + 1, 2 << 20, 20 << 20, 1 << 40, 1 << 62], n
    )
    events = [
        {
            "action": names[int(a)],
            "addr": int(ad),
            "size": int(sz),
            "stream": 0,
            "time_us": i,
            "frames": [],
        }
        for i, (a, ad, sz) in enumerate(zip(rng.choice(actions, n), addrs, sizes))
    ]
    segs = [
        {
            "device": 0,
            "address": base + k * (4 << 20),
            "total_size": 2 << 20,
            "stream": 0,
            "segment_type": "small" if k % 2 else "large",
            "blocks": [
                {
                    "address": base + k * (4 << 20),
                    "size": 2 << 20,
                    "requested_size": 0,
                    "state": "inactive",
                    "frames": [],
                }
            ],
        }
        for k in range(int(rng.integers(0, 4)))
    ]
    settings = {
        "max_split_size": int(rng.choice([-1, 4 << 20])),
        "roundup_power2_divisions": {"1": int(rng.choice([0, 4]))},
    }
    return load_bytes(
        pickle.dumps({"segments": segs, "device_traces": [events], "allocator_settings": settings})
    ), n


def test_random_traces_replay_without_errors():
    """Any trace, however inconsistent, replays (both loops): counted, never raised."""
    if not native_available():  # the Python loop alone, but never under the native gate
        assert not required(), "replay_core extension not built, but VRAMSCOPE_REQUIRE_NATIVE=1"
    rng = np.random.default_rng(99)
    for _ in range(40):
        snap, n = random_trace_snapshot(rng, list(range(9)))
        for native in [True, False] if native_available() else [False]:
            rep = replay_device(snap, 0, keyframe_every=37, native=native)
            rep.layout_after(n // 2)
            assert len(rep.block_size) == n


@needs_native
def test_native_and_python_replays_agree_on_random_traces():
    """Random inconsistent traces give the same replay in C and in Python, every
    action included (maps joining ranges, unmaps splitting them)."""
    rng = np.random.default_rng(1234)
    for trial in range(300):
        snap, n = random_trace_snapshot(rng, list(range(9)))
        a = replay_device(snap, 0, keyframe_every=37, native=True)
        b = replay_device(snap, 0, keyframe_every=37, native=False)
        assert a.inconsistencies == b.inconsistencies, trial
        assert np.array_equal(a.block_size, b.block_size), trial
        assert np.array_equal(a.pool, b.pool), trial
        for k in (-1, n // 2, n - 1):
            la, lb = a.layout_after(k), b.layout_after(k)
            for f in la.__dataclass_fields__:
                assert np.array_equal(getattr(la, f), getattr(lb, f)), (trial, k, f)
