"""SnapshotBuilder: one conversion for files and live sessions."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from tests.conftest import DATA
from tests.snapshot_forms import ANNOTATION_TEXT, raw_object, resolved_stack, with_newer_fields
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core.snapshot import HOST_DEVICE
from vramscope.viewer.model.io.builder import SnapshotBuilder
from vramscope.viewer.model.live.columns import LiveColumns


def test_builder_parts_equal_the_file_loader():
    obj = raw_object(DATA / "side_stream_pending.pickle")
    ref = load_snapshot(DATA / "side_stream_pending.pickle")
    b = SnapshotBuilder()
    _segments, blocks, pools = b.segments(obj["segments"])
    trace = b.trace(obj["device_traces"])
    assert pools == ref.pools
    for name in ("address", "size", "state", "requested_size", "stack"):
        assert np.array_equal(getattr(blocks, name), getattr(ref.blocks, name))
    for name in ("action", "addr", "size", "stack", "time_us"):
        assert np.array_equal(getattr(trace, name), getattr(ref.trace, name))
    assert b.frames_table().strings == ref.frames.strings


def test_host_traces_as_one_list_or_per_device_lists():
    obj, _ = with_newer_fields(raw_object(DATA / "side_stream_pending.pickle"))
    flat = SnapshotBuilder().host(obj["host_segments"], obj["host_traces"])
    nested = SnapshotBuilder().host(obj["host_segments"], [obj["host_traces"]])
    assert len(flat.trace) == len(nested.trace) == len(obj["host_traces"])
    assert (flat.trace.device == HOST_DEVICE).all()
    assert SnapshotBuilder().host(None, None) is None
    # a host segment written without blocks is one block, its state from its byte counts
    seg = {k: v for k, v in obj["host_segments"][0].items() if k != "blocks"}
    one = SnapshotBuilder().host([seg], [])
    assert one.allocated_bytes == seg["total_size"] and len(one.blocks) == 1


def test_live_session_keeps_annotations_on_the_held_trace():
    obj, facts = with_newer_fields(
        raw_object(DATA / "side_stream_pending.pickle"), every=1, host=False, overflow=False
    )
    events = obj["device_traces"][0]
    cols = LiveColumns(max_events=10_000)
    half = len(events) // 2
    cols.append([events[:half]], obj["segments"])
    cols.append([events[half:]], obj["segments"])
    snap = cols.snapshot()
    ann = snap.alloc_annotations
    assert len(ann) == len(facts["annotated"])
    rows = [row + 1 for _, _, row in facts["annotated"]]
    assert ann.trace_index.tolist() == rows
    assert {snap.string(int(t)) for t in ann.text} == {ANNOTATION_TEXT}
    # the oldest events dropped: annotations of dropped events go, the rest shift with them
    cols.max_events = len(snap.trace) - rows[0]
    cols._trim()
    kept = cols.snapshot().alloc_annotations
    assert kept.trace_index.tolist() == [r - rows[0] for r in rows if r - rows[0] >= 0]


@pytest.mark.slow
def test_live_interner_does_not_reuse_ids_of_freed_frame_lists():
    """Each increment's objects are freed after append; a new list at a reused address
    must not take the old list's stack."""
    cols = LiveColumns()
    for i in range(50):
        frames = [{"filename": f"f{i}.py", "line": i, "name": f"fn{i}"}]
        cols.append(
            [[{"action": "alloc", "addr": 4096 * (i + 1), "size": 512, "frames": frames}]], []
        )
        del frames
        gc.collect()
    snap = cols.snapshot()
    for i in range(50):
        assert resolved_stack(snap, snap.trace.stack[i]) == [(f"f{i}.py", i, f"fn{i}")]
