"""Releases right before a new segment: the program's empty_cache or the allocator's retry.

Both look alike in a trace: a run of segment_free events, then a segment_alloc.
A run at the recorded peak could have been a retry after a failed cudaMalloc
by the reserved totals alone; two things settle it.  The allocator frees cache
for an allocation only after finding no cached block for it, so if a segment
the run released would have served the next request, the run was the
program's.  And a release whose recorded stack runs through empty_cache is the
program's whatever the totals say.  Told apart wrongly, the self-check fails
(the model serves the request from the cache and releases nothing) or a memory
limit is inferred that the program never ran under.
"""

from __future__ import annotations

import pickle

import pytest

from vramscope.viewer.model import load_bytes
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

MIB = 1 << 20
BASE = 0x7F00_0000_0000
USER = [{"filename": "/home/user/calibrate.py", "line": 30, "name": "calibrate"}]
PY_EMPTY_CACHE = [
    {
        "filename": "/usr/lib/python3.12/site-packages/torch/cuda/memory.py",
        "line": 192,
        "name": "empty_cache",
    },
    {"filename": "/home/user/calibrate.py", "line": 41, "name": "calibrate"},
]
NATIVE = "c10::cuda::CUDACachingAllocator::Native::"
CPP_EMPTY_CACHE = [
    {"filename": "", "line": 0, "name": NATIVE + "NativeCachingAllocator::emptyCache()"},
    {"filename": "??", "line": 0, "name": "THCPModule_emptyCache(_object*, _object*)"},
]
MALLOC = [
    {
        "filename": "CUDACachingAllocator.cpp",
        "line": 0,
        "name": NATIVE + "DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
    }
] + USER


class Recording:
    """A trace in torch's pickle schema, one stream, segments of one allocation each
    (and the remainder of a split one)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.t = 1_700_000_000_000_000
        self.segments: dict[int, tuple[int, int, int]] = {}  # addr -> (size, used, requested)

    def _event(self, action: str, addr: int, size: int, frames: list) -> None:
        self.t += 10
        self.events.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": 0,
                "time_us": self.t,
                "frames": frames,
            }
        )

    def alloc_in_new_segment(self, addr: int, seg_size: int, size: int) -> None:
        self._event("segment_alloc", addr, seg_size, USER)
        self._event("alloc", addr, size, USER)
        self.segments[addr] = (seg_size, (size + 511) // 512 * 512, size)

    def free_all(self) -> None:
        for addr, (_, _, requested) in sorted(self.segments.items()):
            self._event("free_requested", addr, requested, USER)
            self._event("free_completed", addr, requested, USER)

    def release_all(self, frames: list) -> None:
        """The cudaFree of every (free) segment, smallest first as release_cached_blocks
        walks the pool."""
        for addr, (seg_size, _, _) in sorted(self.segments.items(), key=lambda s: (s[1][0], s[0])):
            self._event("segment_free", addr, seg_size, frames)
        self.segments.clear()

    def snapshot(self) -> bytes:
        segs = []
        for addr, (seg_size, used, requested) in sorted(self.segments.items()):
            blocks = [
                {
                    "address": addr,
                    "size": used,
                    "requested_size": requested,
                    "state": "active_allocated",
                    "frames": USER,
                }
            ]
            if used < seg_size:
                blocks.append(
                    {
                        "address": addr + used,
                        "size": seg_size - used,
                        "requested_size": 0,
                        "state": "inactive",
                        "frames": [],
                    }
                )
            segs.append(
                {
                    "device": 0,
                    "address": addr,
                    "total_size": seg_size,
                    "allocated_size": used,
                    "active_size": used,
                    "requested_size": requested,
                    "stream": 0,
                    "segment_type": "large",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": [],
                    "blocks": blocks,
                }
            )
        return pickle.dumps(
            {
                "segments": segs,
                "device_traces": [self.events],
                "allocator_settings": {
                    "PYTORCH_CUDA_ALLOC_CONF": "",
                    "max_split_size": -1,
                    "garbage_collection_threshold": 0.0,
                    "expandable_segments": False,
                },
            }
        )


def _releases_are_the_programs(case) -> bool:
    reqs = case.requests
    tags = [t for t, a in zip(reqs.seg_tag.tolist(), reqs.seg_action.tolist()) if a == 4]
    return bool(tags) and all(reqs.kind[t] == rq.EMPTY_CACHE for t in tags)


def test_empty_cache_before_a_request_the_released_cache_would_serve():
    """Each round ends at the peak with empty_cache, and the next round's first request
    (8 MiB) would fit the 20 MiB segment just released: no allocation frees cache it
    could have used, so the releases are the program's, even with no stacks recorded."""
    rec = Recording()
    for r in range(4):
        base = BASE + r * (1 << 30)
        rec.alloc_in_new_segment(base, 20 * MIB, 8 * MIB)
        rec.alloc_in_new_segment(base + 256 * MIB, 100 * MIB, 100 * MIB)
        if r < 3:
            rec.free_all()
            rec.release_all([])
    case = prepare(load_bytes(rec.snapshot()))
    check = case.self_check()
    assert check.ok, check.first_difference
    assert _releases_are_the_programs(case)
    assert int((case.requests.kind == rq.EMPTY_CACHE).sum()) == 3
    assert case.limit is None and case.bounds.upper is None  # no failed cudaMalloc


def _released_at_the_peak_then_a_bigger_request(frames):
    """Two segments freed at the peak with ``frames`` as the releases' stack, then a
    200 MiB request bigger than either: the totals alone allow a retry.  The model must
    reproduce the recording whatever it decides the releases were."""
    rec = Recording()
    rec.alloc_in_new_segment(BASE, 20 * MIB, 8 * MIB)
    rec.alloc_in_new_segment(BASE + 256 * MIB, 100 * MIB, 100 * MIB)
    rec.free_all()
    rec.release_all(frames)
    rec.alloc_in_new_segment(BASE + (1 << 30), 200 * MIB, 200 * MIB)
    case = prepare(load_bytes(rec.snapshot()))
    check = case.self_check()
    assert check.ok, check.first_difference
    return case


@pytest.mark.parametrize("frames", [PY_EMPTY_CACHE, CPP_EMPTY_CACHE], ids=["python", "cpp"])
def test_a_release_recorded_inside_empty_cache_is_the_programs(frames):
    """After empty_cache at the peak the next request (200 MiB) is bigger than anything
    released, so the totals allow a retry; the recorded stack says empty_cache, and the
    model must not invent a memory limit the program hit."""
    case = _released_at_the_peak_then_a_bigger_request(frames)
    assert _releases_are_the_programs(case)
    assert case.limit is None and case.limit_source == "none"


def test_a_release_with_the_allocations_stack_stays_a_possible_retry():
    """The same run recorded with a malloc stack (a retry's, or the segment's own when
    empty_cache gathered none) proves nothing: the totals still allow a retry."""
    case = _released_at_the_peak_then_a_bigger_request(MALLOC)
    assert not (case.requests.kind == rq.EMPTY_CACHE).any()
    assert case.bounds.upper is not None
