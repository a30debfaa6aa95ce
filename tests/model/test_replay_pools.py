"""The replay's per-event pool column (the private pool of the segment an event happened
in) is the same from the compiled loop as from the Python one, on traces whose segments
belong to different pools: the compiled loop finds a free's segment through the freed
block rather than by a search over the segments, and must land on the segment the search
would (segments freed and made again, split by unmaps, joined by maps, events in gaps)."""

from __future__ import annotations

import pickle

import numpy as np

from tests.native_gate import needs
from vramscope.viewer.model import load_bytes
from vramscope.viewer.model.replay import native_available, replay_device

needs_native = needs(native_available(), "replay_core extension not built")

BASE = 0x7F0000000000
SEG = 2 << 20


def pooled_trace(rng, n_segments: int, n_events: int):
    """A snapshot of ``n_segments`` segments, each in a private pool of its own or in the
    ordinary ones, and a trace of mostly sensible events over them (allocations inside
    free blocks, their frees in either form, segments freed and made again at their
    addresses, maps and unmaps, a few events in no segment)."""
    segs = []
    for k in range(n_segments):
        seg = {
            "device": 0,
            "address": BASE + k * 2 * SEG,
            "total_size": SEG,
            "stream": 0,
            "segment_type": "large",
            "blocks": [
                {
                    "address": BASE + k * 2 * SEG,
                    "size": SEG,
                    "requested_size": 0,
                    "state": "inactive",
                    "frames": [],
                }
            ],
        }
        if k % 3:
            seg["segment_pool_id"] = (1, k)
        segs.append(seg)
    events = []
    live: list[tuple[int, int]] = []
    pending: list[tuple[int, int]] = []
    t = 0

    def ev(action: str, addr: int, size: int) -> None:
        nonlocal t
        events.append(
            {
                "action": action,
                "addr": int(addr),
                "size": int(size),
                "stream": 0,
                "time_us": t,
                "frames": [],
            }
        )
        t += 1

    for _ in range(n_events):
        r = rng.random()
        k = int(rng.integers(0, n_segments + 1))  # n_segments: past the last one
        if r < 0.45:
            addr = BASE + k * 2 * SEG + int(rng.integers(0, 8)) * (SEG // 8)
            size = int(rng.choice([512, SEG // 8, SEG // 4]))
            ev("alloc", addr, size)
            live.append((addr, size))
        elif r < 0.75 and live:
            addr, size = live.pop(int(rng.integers(0, len(live))))
            if rng.random() < 0.5:
                ev("free_requested", addr, size)
                pending.append((addr, size))
            else:
                ev("free_requested", addr, size)
                ev("free_completed", addr, size)
        elif r < 0.85 and pending:
            addr, size = pending.pop(int(rng.integers(0, len(pending))))
            ev("free_completed", addr, size)
        elif r < 0.92:
            addr = BASE + k * 2 * SEG
            ev("segment_free", addr, SEG)
            ev("segment_alloc", addr, SEG)
        elif r < 0.96:
            addr = BASE + k * 2 * SEG + SEG // 2
            ev("segment_unmap", addr, SEG // 4)
        else:
            addr = BASE + k * 2 * SEG + SEG
            ev("segment_map", addr, SEG // 2)
    raw = {"segments": segs, "device_traces": [events], "allocator_settings": {}}
    return load_bytes(pickle.dumps(raw)), len(events)


@needs_native
def test_pool_column_equal_in_c_and_python():
    rng = np.random.default_rng(40)
    pooled = 0
    for trial in range(120):
        snap, n = pooled_trace(rng, int(rng.integers(2, 40)), int(rng.integers(50, 600)))
        a = replay_device(snap, 0, keyframe_every=53, native=True)
        b = replay_device(snap, 0, keyframe_every=53, native=False)
        assert a.inconsistencies == b.inconsistencies, trial
        assert np.array_equal(a.pool, b.pool), (trial, np.flatnonzero(a.pool != b.pool)[:5])
        assert np.array_equal(a.block_size, b.block_size), trial
        pooled += int((a.pool >= 0).sum())
        la, lb = a.layout_after(n - 1), b.layout_after(n - 1)
        for f in la.__dataclass_fields__:
            assert np.array_equal(getattr(la, f), getattr(lb, f)), (trial, f)
    # The traces do put events in private pools (else every pool would be -1 either way).
    assert pooled > 10_000
