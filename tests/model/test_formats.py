"""Every format and schema generation loads to the same columns."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.conftest import DATA, expected_for, snapshot_files, snapshot_id
from tests.parser_paths import parser_path  # noqa: F401 - autouse: both parsers
from tests.snapshot_forms import (
    assert_same_snapshot,
    encodings,
    merge_devices,
    on_device,
    raw_object,
    resolved_stack,
    to_legacy,
)
from vramscope.viewer.model import Selection, load_bytes, memory_stats
from vramscope.viewer.model.io.safe_pickle import safe_loads

SMALL = ["fragmentation_oom", "side_stream_pending", "cuda_graph_pool", "whatif_expandable"]


@pytest.mark.slow
@pytest.mark.parametrize("parser_path", ["python"], indirect=True)  # safe_loads only
@pytest.mark.parametrize("path", snapshot_files(), ids=snapshot_id)
def test_safe_unpickler_equals_pickle(path):
    """The restricted unpickler builds exactly what pickle.load builds."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        import lzma

        data = lzma.decompress(data)
    assert safe_loads(data) == pickle.loads(data)  # trusted test data only


@pytest.mark.parametrize("name", SMALL)
def test_every_encoding_gives_same_columns(name, loaded_snapshots):
    reference = loaded_snapshots(DATA / f"{name}.pickle")
    obj = raw_object(DATA / f"{name}.pickle")
    for form, data in encodings(obj):
        snap = load_bytes(data)
        assert_same_snapshot(reference, snap)
        assert snap.source_format.startswith("json" if form.startswith("json") else "pickle")
        assert snap.warnings == [], form


def test_compression_detected_by_content_not_name(tmp_path, loaded_snapshots):
    import gzip

    from vramscope.viewer.model import load_snapshot

    obj = raw_object(DATA / "fragmentation_oom.pickle")
    odd = tmp_path / "snapshot.pickle"  # gzip data under a .pickle name
    odd.write_bytes(gzip.compress(pickle.dumps(obj)))
    snap = load_snapshot(odd)
    assert snap.source_format == "pickle+gzip"
    assert_same_snapshot(loaded_snapshots(DATA / "fragmentation_oom.pickle"), snap)


@pytest.mark.parametrize("name", SMALL + ["gpt2_oom"])
def test_torch20_history_blocks(name, loaded_snapshots):
    path = DATA / f"{name}.pickle"
    legacy = load_bytes(pickle.dumps(to_legacy(raw_object(path))))
    expected = expected_for(path)["memory_stats"]
    stats = memory_stats(legacy)
    assert stats.requested_bytes == expected["requested_bytes.all.current"]
    assert stats.allocated_bytes == expected["allocated_bytes.all.current"]
    assert stats.reserved_bytes == expected["reserved_bytes.all.current"]
    assert (legacy.trace.time_us == -1).all()
    ref = loaded_snapshots(path)
    for column in ("address", "size", "state", "segment"):
        assert np.array_equal(getattr(ref.blocks, column), getattr(legacy.blocks, column))
    active = ref.blocks.state != 2
    assert np.array_equal(ref.blocks.requested_size[active], legacy.blocks.requested_size[active])
    # Frames of allocated blocks come from history[0].
    for i in np.flatnonzero(active)[:100]:
        assert resolved_stack(legacy, legacy.blocks.stack[i]) == resolved_stack(
            ref, ref.blocks.stack[i]
        )


def test_bare_list_of_segments(loaded_snapshots):
    path = DATA / "gpt2_oom.pickle"
    obj = raw_object(path)
    snap = load_bytes(pickle.dumps(obj["segments"]))
    stats = memory_stats(snap)
    expected = expected_for(path)["memory_stats"]
    assert stats.reserved_bytes == expected["reserved_bytes.all.current"]
    assert stats.active_bytes == expected["active_bytes.all.current"]
    assert len(snap.trace) == 0


OPTIONAL_SEGMENT_KEYS = [
    "segment_pool_id",
    "is_expandable",
    "device",
    "frames",
    "segment_type",
    "stream",
    "allocated_size",
    "active_size",
    "requested_size",
]
OPTIONAL_EVENT_KEYS = ["time_us", "compile_context", "user_metadata", "frames", "stream"]


@pytest.mark.parametrize(
    "key",
    OPTIONAL_SEGMENT_KEYS
    + OPTIONAL_EVENT_KEYS
    + ["allocator_settings", "external_annotations", "device_traces", "block_frames"],
)
def test_optional_key_missing(key):
    path = DATA / "side_stream_pending.pickle"
    obj = raw_object(path)
    if key in OPTIONAL_SEGMENT_KEYS:
        for seg in obj["segments"]:
            seg.pop(key)
    elif key in OPTIONAL_EVENT_KEYS:
        for e in obj["device_traces"][0]:
            e.pop(key)
    elif key == "block_frames":
        for seg in obj["segments"]:
            for b in seg["blocks"]:
                b.pop("frames")
    else:
        obj.pop(key)
    snap = load_bytes(pickle.dumps(obj))
    assert snap.warnings == []
    expected = expected_for(path)["memory_stats"]
    stats = memory_stats(snap)
    assert stats.reserved_bytes == expected["reserved_bytes.all.current"]
    assert stats.active_bytes == expected["active_bytes.all.current"]


def test_several_devices(loaded_snapshots):
    a = raw_object(DATA / "fragmentation_oom.pickle")
    b = on_device(raw_object(DATA / "resnet50_train.pickle"), 1)
    snap = load_bytes(pickle.dumps(merge_devices(a, b)))
    assert snap.devices == [0, 1]
    for device, name in ((0, "fragmentation_oom"), (1, "resnet50_train")):
        expected = expected_for(DATA / f"{name}.pickle")["memory_stats"]
        stats = memory_stats(snap, Selection(device=device))
        assert stats.reserved_bytes == expected["reserved_bytes.all.current"]
        assert stats.allocated_bytes == expected["allocated_bytes.all.current"]
        assert stats.inactive_split_bytes == expected["inactive_split_bytes.all.current"]
    assert (snap.trace.device == 1).sum() == len(b["device_traces"][1])


def test_shared_stack_is_interned_once():
    """200k events referencing one 5000-frame list: interned once, not 10^9 times."""
    frames = [{"filename": f"model_{i}.py", "line": i, "name": f"f{i}"} for i in range(5000)]
    events = [
        {"action": "alloc", "addr": 4096 * i, "size": 512, "stream": 0, "frames": frames}
        for i in range(200_000)
    ]
    obj = {"segments": [], "device_traces": [events]}
    snap = load_bytes(pickle.dumps(obj, protocol=4))
    assert len(snap.trace) == 200_000
    assert len(snap.stacks) == 1 and len(snap.frames) == 5000
    assert (snap.trace.stack == 0).all()


def test_progress_reports_and_cancel(tmp_path):
    import threading

    from vramscope.viewer.model import LoadCancelled, Progress, load_snapshot

    path = DATA / "gpt2_oom.pickle"
    seen = []
    load_snapshot(path, Progress(lambda stage, f: seen.append((stage, f))), use_cache=False)
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert {"read", "parse", "columns"} <= {s for s, _ in seen}

    cancel = threading.Event()

    def cancel_during_parse(stage, fraction):
        if stage == "parse":
            cancel.set()

    with pytest.raises(LoadCancelled):
        load_snapshot(path, Progress(cancel_during_parse, cancel), use_cache=False)
