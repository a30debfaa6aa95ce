"""Expandable segments as snapshots list them: one segment per contiguous mapped range.

A segment_map next to a mapped range joins it (below, above, or filling the gap
between two ranges); a segment_unmap inside a range splits it; unmapping pages
inside a free block keeps that block's unaligned ends mapped.  The Python
reference and the C loop must agree on all of it, also on random map/unmap-heavy
traces; seeding undoes maps and unmaps the same way.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.native_gate import needs
from vramscope.viewer.model import load_bytes
from vramscope.viewer.model.replay import native_available, replay_device

MIB = 1 << 20
PAGE = 20 * MIB
BASE = 0x7F0000000000
# Both loops; without the C one only Python (a failure under the native gate).
LOOPS = [False, True] if native_available() else [False]
needs(native_available(), "replay_core extension not built")


def snapshot(events, segments=(), expandable=True):
    trace = [
        {"action": a, "addr": int(addr), "size": int(size), "stream": 0, "time_us": i, "frames": []}
        for i, (a, addr, size) in enumerate(events)
    ]
    segs = [
        {
            "device": 0,
            "address": addr,
            "total_size": size,
            "stream": 0,
            "segment_type": "large",
            "is_expandable": expandable,
            "blocks": [
                {"address": b, "size": s, "requested_size": r, "state": st, "frames": []}
                for b, s, r, st in blocks
            ],
        }
        for addr, size, blocks in segments
    ]
    return load_bytes(
        pickle.dumps(
            {
                "segments": segs,
                "device_traces": [trace],
                "allocator_settings": {"expandable_segments": True},
            }
        )
    )


def ranges(layout):
    return list(zip(layout.seg_addr.tolist(), layout.seg_size.tolist()))


@pytest.mark.parametrize("native", LOOPS)
def test_maps_join_and_unmaps_split_mapped_ranges(native):
    a, b, c = BASE, BASE + PAGE, BASE + 2 * PAGE
    events = [
        ("segment_map", c, PAGE),  # a range of its own
        ("segment_map", a, PAGE),  # another one, not touching it
        ("segment_map", b, PAGE),  # fills the gap: one range a..c+PAGE
        ("alloc", a, 5 * MIB),
        ("segment_map", c + PAGE, 2 * PAGE),  # grows it upwards
        ("segment_unmap", b, PAGE),  # a hole in the middle: two ranges
        ("segment_map", BASE - PAGE, PAGE),  # grows the first downwards
        ("segment_unmap", c + 2 * PAGE, PAGE),  # the last page: the range shrinks
    ]
    final = [
        (
            BASE - PAGE,
            2 * PAGE,
            [
                (BASE - PAGE, PAGE, 0, "inactive"),
                (a, 5 * MIB, 5 * MIB, "active_allocated"),
                (a + 5 * MIB, 15 * MIB, 0, "inactive"),
            ],
        ),
        (c, 2 * PAGE, [(c, 2 * PAGE, 0, "inactive")]),
    ]
    snap = snapshot(events, final)
    rep = replay_device(snap, 0, native=native)
    assert rep.inconsistencies == 0
    steps = [
        [(c, PAGE)],
        [(a, PAGE), (c, PAGE)],
        [(a, 3 * PAGE)],
        [(a, 3 * PAGE)],
        [(a, 5 * PAGE)],
        [(a, PAGE), (c, 3 * PAGE)],
        [(BASE - PAGE, 2 * PAGE), (c, 3 * PAGE)],
        [(BASE - PAGE, 2 * PAGE), (c, 2 * PAGE)],
    ]
    for k, want in enumerate(steps):
        assert ranges(rep.layout_after(k)) == want, k
    last = rep.layout_after(len(events) - 1)
    assert last.blk_addr.tolist() == [BASE - PAGE, a, a + 5 * MIB, c]
    assert last.blk_size.tolist() == [PAGE, 5 * MIB, 15 * MIB, 2 * PAGE]
    assert rep.reserved[-1] == 4 * PAGE


@pytest.mark.parametrize("native", LOOPS)
def test_unmap_inside_a_free_block_keeps_its_unaligned_ends(native):
    """The allocator unmaps the whole pages of a free block; the rest stays mapped free."""
    events = [
        ("segment_map", BASE, 3 * PAGE),
        ("alloc", BASE, 5 * MIB),
        ("segment_unmap", BASE + PAGE, PAGE),
    ]
    final = [
        (
            BASE,
            PAGE,
            [
                (BASE, 5 * MIB, 5 * MIB, "active_allocated"),
                (BASE + 5 * MIB, 15 * MIB, 0, "inactive"),
            ],
        ),
        (BASE + 2 * PAGE, PAGE, [(BASE + 2 * PAGE, PAGE, 0, "inactive")]),
    ]
    rep = replay_device(snapshot(events, final), 0, native=native)
    assert rep.inconsistencies == 0
    assert ranges(rep.layout_after(2)) == [(BASE, PAGE), (BASE + 2 * PAGE, PAGE)]


@pytest.mark.parametrize("native", LOOPS)
def test_seed_undoes_maps_and_unmaps_as_ranges(native):
    """A window that starts late: the first events unmap the middle of a range that was
    whole before, then map it back; the seeded layout has the range whole."""
    events = [("segment_unmap", BASE + PAGE, PAGE), ("segment_map", BASE + 3 * PAGE, PAGE)]
    final = [
        (BASE, PAGE, [(BASE, PAGE, 0, "inactive")]),
        (BASE + 2 * PAGE, 2 * PAGE, [(BASE + 2 * PAGE, 2 * PAGE, 0, "inactive")]),
    ]
    rep = replay_device(snapshot(events, final), 0, native=native)
    assert ranges(rep.initial) == [(BASE, 3 * PAGE)]
    assert rep.inconsistencies == 0
    assert ranges(rep.layout_after(1)) == [(BASE, PAGE), (BASE + 2 * PAGE, 2 * PAGE)]


def random_expandable_snapshot(rng):
    """Map/unmap-heavy random traces over page-aligned addresses (many joins and splits,
    and inconsistent events among them)."""
    names = [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
    ]
    n = int(rng.integers(1, 300))
    acts = rng.choice([0, 0, 2, 5, 5, 5, 6, 6, 6, 3, 4, 1], n)
    addrs = BASE + rng.integers(0, 24, n) * (2 * MIB) + rng.choice([0, 0, 0, 512, MIB], n)
    sizes = rng.choice([512, MIB, 2 * MIB, 4 * MIB, 6 * MIB, PAGE], n)
    events = [(names[int(a)], int(ad), int(sz)) for a, ad, sz in zip(acts, addrs, sizes)]
    segs = [
        (BASE + k * 8 * MIB, 4 * MIB, [(BASE + k * 8 * MIB, 4 * MIB, 0, "inactive")])
        for k in range(int(rng.integers(0, 4)))
    ]
    return snapshot(events, segs), n


@needs(native_available(), "replay_core extension not built")
def test_native_and_python_agree_on_random_map_unmap_traces():
    rng = np.random.default_rng(2024)
    for trial in range(300):
        snap, n = random_expandable_snapshot(rng)
        a = replay_device(snap, 0, keyframe_every=29, native=True)
        b = replay_device(snap, 0, keyframe_every=29, native=False)
        assert a.inconsistencies == b.inconsistencies, trial
        assert np.array_equal(a.block_size, b.block_size), trial
        assert np.array_equal(a.pool, b.pool), trial
        for k in (-1, n // 3, n // 2, n - 1):
            la, lb = a.layout_after(k), b.layout_after(k)
            for f in la.__dataclass_fields__:
                assert np.array_equal(getattr(la, f), getattr(lb, f)), (trial, k, f)
