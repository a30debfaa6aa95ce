"""OOM verdicts on the real OOM snapshots."""

from __future__ import annotations

from tests.conftest import DATA, expected_for
from vramscope.viewer.model import last_oom, oom_reports
from vramscope.viewer.model.analysis.figures import fit_request


def test_fragmentation_verdict(loaded_snapshots):
    path = DATA / "fragmentation_oom.pickle"
    snap = loaded_snapshots(path)
    reports = oom_reports(snap)
    assert len(reports) == 2
    oom = last_oom(snap)
    assert oom.is_last and oom.kind == "fragmentation"
    assert oom.requested_bytes == 8 << 20
    assert oom.largest_free_block_bytes == 4 << 20
    meta = expected_for(path)
    stats = meta["memory_stats"]
    unallocated = stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"]
    assert oom.free_in_pool_bytes == unallocated  # "1.74 GiB is reserved ... but unallocated"
    assert oom.free_segments == 178
    assert oom.verdict == (
        "fragmentation: 1.74 GiB is free inside 178 segments of the large pool, "
        "but the largest free block is 4.00 MiB < 8.00 MiB requested"
    )
    assert oom.new_segment_bytes == meta["oom_request"]  # "Tried to allocate 20.00 MiB"
    assert oom.device_free_bytes == meta["oom_device_free"]
    # The first OOM happened before half the blocks were freed: the final
    # layout is not the layout at that moment, and the report says so.
    assert reports[0].kind == "changed" and reports[0].events_after > 0


def test_capacity_verdict(loaded_snapshots):
    path = DATA / "capacity_oom.pickle"
    oom = last_oom(loaded_snapshots(path))
    meta = expected_for(path)
    assert oom.kind == "capacity"
    assert oom.free_in_pool_bytes == 0
    assert oom.verdict.startswith("capacity: every segment is full")
    assert "memory limit" in oom.verdict  # the device had free memory: a fraction limit
    assert oom.new_segment_bytes == meta["oom_request"]


def test_gpt2_oom_is_explained(loaded_snapshots):
    path = DATA / "gpt2_oom.pickle"
    oom = last_oom(loaded_snapshots(path))
    meta = expected_for(path)
    assert oom.new_segment_bytes == meta["oom_request"]
    assert oom.requested_bytes <= meta["oom_request"]
    assert oom.largest_free_block_bytes < oom.requested_bytes
    assert oom.kind in ("fragmentation", "capacity")


def test_no_oom_without_oom_events(loaded_snapshots):
    assert last_oom(loaded_snapshots(DATA / "resnet50_train.pickle")) is None


def test_fit_request_best_fit(loaded_snapshots):
    snap = loaded_snapshots(DATA / "fragmentation_oom.pickle")
    fits = fit_request(snap, 4 << 20)
    assert fits.fits and fits.block_bytes == 4 << 20 and fits.pool_kind == "large"
    too_big = fit_request(snap, (4 << 20) + 1)
    assert not too_big.fits
    assert too_big.rounded_bytes == (4 << 20) + 512
    assert too_big.new_segment_bytes == 20 << 20
    small = fit_request(snap, 1000)
    assert small.pool_kind == "small" and small.rounded_bytes == 1024 and not small.fits
