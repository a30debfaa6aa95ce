"""RecordedWindow: what a device's trace window cannot show, checked against the allocator's
own counters."""

from __future__ import annotations

import pytest

from tests.conftest import DATA, expected_for
from vramscope.viewer.model.replay import replay_device
from vramscope.viewer.model.replay.recorded_window import recorded_window


@pytest.mark.parametrize(
    "name", ["gpt2_oom.pickle", "fragmentation_oom.pickle", "whatif_expandable.pickle"]
)
def test_a_whole_recording_starts_empty_and_sees_every_segment_event(name, loaded_snapshots):
    path = DATA / name
    snap = loaded_snapshots(path)
    w = recorded_window(replay_device(snap, 0, keyframes=False))
    stats = expected_for(path)["memory_stats"]
    assert not w.started_late and not w.reserved_fixed and w.describe() == ""
    assert w.segments_before == w.reserved_before == w.blocks_before == 0
    if name != "whatif_expandable.pickle":  # expandable segments map and unmap pages
        assert w.segment_events == stats["num_device_alloc"] + stats["num_device_free"]
    assert w.saw_segment_changes


def test_the_wrapped_ring_started_after_every_segment(loaded_snapshots):
    path = DATA / "transformer_long_python_1000k.pickle.xz"
    snap = loaded_snapshots(path)
    w = recorded_window(replay_device(snap, 0, keyframes=False))
    stats = expected_for(path)["memory_stats"]
    assert w.started_late and w.segment_events == 0 and w.reserved_fixed
    assert w.segments_before == stats["segment.all.current"] == 67
    assert w.reserved_before == stats["reserved_bytes.all.current"]
    assert 0 < w.allocated_before <= w.reserved_before
    assert w.to_dict()["reserved_fixed"] is True
    assert w.describe().startswith("device 0's trace starts after 67 segments (1.34 GiB)")
