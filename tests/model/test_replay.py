"""Replay exactness: the trace reproduces the final snapshot and the allocator's peaks."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from tests.conftest import DATA, expected_for, snapshot_files, snapshot_id
from tests.snapshot_forms import raw_object
from vramscope.viewer.model import load_bytes, memory_stats
from vramscope.viewer.model.oom import oom_reports
from vramscope.viewer.model.replay import _apply, _State, replay_device
from vramscope.viewer.model.timeline import build_timeline, intervals, live_at

CURVE_COUNTERS = {"requested": "requested_bytes", "reserved": "reserved_bytes",
                  "allocated": "allocated_bytes", "active": "active_bytes"}


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


@pytest.mark.parametrize("name", ["gpt2_oom", "whatif_expandable", "cuda_graph_pool",
                                  "side_stream_pending"])
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
    obj["device_traces"][0] = events[int(len(events) * 0.6):]
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
    for key, values in (("pool", range(len(snap.pools))),
                        ("stream", sorted(set(snap.segments.stream.tolist())))):
        parts = [curves(rep, **{key: v}) for v in values]
        for curve in ("requested", "allocated", "active", "reserved"):
            assert np.array_equal(sum(p[curve] for p in parts), getattr(rep, curve)), (key, curve)
        for v, part in zip(values, parts):
            stats = memory_stats(snap, Selection(**{key: v}))
            assert part["reserved"][-1] == stats.reserved_bytes
            assert part["allocated"][-1] == stats.allocated_bytes
            assert part["requested"][-1] == stats.requested_bytes
    assert len(snap.pools) > 1 or name != "cuda_graph_pool"
