"""Every figure equals the allocator's own counter on every real snapshot."""

from __future__ import annotations

import pytest

from tests.conftest import expected_for, snapshot_files, snapshot_id
from vramscope.viewer.model import memory_stats
from vramscope.viewer.model.analysis.figures import ALLOCATOR_COUNTERS as COUNTERS
from vramscope.viewer.model.reports.summary import summarize


@pytest.mark.parametrize("path", snapshot_files(), ids=snapshot_id)
def test_figures_equal_memory_stats(path, loaded_snapshots):
    snap = loaded_snapshots(path)
    expected = expected_for(path)["memory_stats"]
    stats = memory_stats(snap).to_dict()
    for ours, theirs in COUNTERS.items():
        assert stats[ours] == expected[theirs], ours
    assert snap.warnings == []


@pytest.mark.parametrize("path", snapshot_files(), ids=snapshot_id)
def test_summary_json_keys_match(path, loaded_snapshots):
    snap = loaded_snapshots(path)
    summary = summarize(snap)
    expected = expected_for(path)["memory_stats"]
    for ours, theirs in COUNTERS.items():
        assert summary[ours] == expected[theirs]
    # Per-device and per-pool detail adds up to the totals.
    assert sum(d["reserved_bytes"] for d in summary["devices"]) == summary["reserved_bytes"]
    pools = [p for d in summary["devices"] for p in d["pools"]]
    assert sum(p["allocated_bytes"] for p in pools) == summary["allocated_bytes"]
    assert sum(p["free_bytes"] for p in pools) == summary["free_bytes"]
    assert summary["largest_free_block_bytes"] == max(
        [p["largest_free_block_bytes"] for p in pools] or [0]
    )


def test_free_plus_active_is_reserved(loaded_snapshots):
    for path in snapshot_files():
        s = memory_stats(loaded_snapshots(path))
        assert s.free_bytes + s.active_bytes == s.reserved_bytes, path.name


def test_expandable_segments_reported_separately(loaded_snapshots):
    from tests.conftest import DATA

    snap = loaded_snapshots(DATA / "whatif_expandable.pickle")
    stats = memory_stats(snap)
    assert stats.segment_count == 0  # as the allocator counts
    assert stats.expandable_segment_count == 2
    free = int(snap.blocks.size[snap.blocks.state == 2].sum())
    assert stats.expandable_free_bytes == free > 0
    assert summarize(snap)["notes"], "the summary must say expandable segments are not counted"


def test_pending_free_counts_as_active_not_allocated(loaded_snapshots):
    from tests.conftest import DATA

    stats = memory_stats(loaded_snapshots(DATA / "side_stream_pending.pickle"))
    assert stats.pending_free_bytes == stats.active_bytes - stats.allocated_bytes > 0
