"""What newer torch writes into snapshots is read, kept apart and never changes a GPU figure.

The files are real bundled snapshots re-written with the fields torch 2.12+
adds (real key names, real pickler), loaded through the public path by both
parsers (tests/parser_paths.py).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests import native_gate
from tests.conftest import DATA, expected_for
from tests.parser_paths import assert_identical, parser_path, pure_python  # noqa: F401 - autouse
from tests.snapshot_forms import (
    ANNOTATION_TEXT,
    FORWARD_FRAMES,
    FX_FRAME,
    HOST_DEVICE_EVENTS,
    assert_same_snapshot,
    raw_object,
    resolved_stack,
    with_newer_fields,
)
from vramscope.viewer.model import Selection, SnapshotError, load_bytes, load_snapshot, memory_stats
from vramscope.viewer.model.core.snapshot import HOST_DEVICE, Action
from vramscope.viewer.model.io import cache, fast_pickle

NAMES = ["fragmentation_oom", "side_stream_pending", "cuda_graph_pool"]
ANN_COLUMNS = ("device", "addr", "size", "time_us", "trace_index")


@pytest.fixture(scope="module")
def newer():
    """name -> (bytes written by pickle, facts about what was added)."""
    out = {}
    for name in NAMES + ["resnet50_train"]:
        obj, facts = with_newer_fields(raw_object(DATA / f"{name}.pickle"))
        out[name] = (pickle.dumps(obj, protocol=4), facts)  # trusted test data
    return out


@pytest.mark.parametrize("name", NAMES + ["resnet50_train"])
def test_gpu_figures_and_columns_unchanged(name, newer, loaded_snapshots):
    """Annotations, host memory and the rest add nothing to any GPU figure."""
    path = DATA / f"{name}.pickle"
    snap = load_bytes(newer[name][0])
    expected = expected_for(path)["memory_stats"]
    stats = memory_stats(snap, Selection(device=0))
    for key, value in (
        ("reserved_bytes", "reserved_bytes.all.current"),
        ("allocated_bytes", "allocated_bytes.all.current"),
        ("active_bytes", "active_bytes.all.current"),
        ("requested_bytes", "requested_bytes.all.current"),
        ("inactive_split_bytes", "inactive_split_bytes.all.current"),
    ):
        assert getattr(stats, key) == expected[value], key
    assert snap.devices == loaded_snapshots(path).devices  # host is not a GPU
    # every GPU column, stacks resolved; but the metadata and forward stacks that were added
    assert_same_snapshot(
        loaded_snapshots(path), snap, ignore=("trace.user_metadata", "trace.forward_stack")
    )
    assert snap.warnings == []


@pytest.mark.parametrize("name", NAMES)
def test_annotate_events_become_allocation_annotations(name, newer):
    snap = load_bytes(newer[name][0])
    facts = newer[name][1]
    ann = snap.alloc_annotations
    assert len(ann) == len(facts["annotated"]) > 0
    assert not (snap.trace.action == 9).any()  # never an allocator action
    for i, (device, addr, row) in enumerate(facts["annotated"]):
        assert (int(ann.device[i]), int(ann.addr[i])) == (device, addr)
        assert snap.string(int(ann.text[i])) == ANNOTATION_TEXT
        # placed right after the alloc it annotates: between the same two events
        assert int(ann.trace_index[i]) == row + 1
        assert snap.trace.action[row] == Action.ALLOC and snap.trace.addr[row] == addr
        assert i in ann.rows_for(device, addr, first=row, last=row + 1)
        assert resolved_stack(snap, ann.stack[i]) == resolved_stack(snap, snap.trace.stack[row])


@pytest.mark.parametrize("name", NAMES)
def test_forward_frames_become_the_forward_stack(name, newer):
    snap = load_bytes(newer[name][0])
    rows = newer[name][1]["forward_rows"]
    has = np.flatnonzero(snap.trace.forward_stack >= 0)
    assert has.tolist() == rows
    for row in rows:
        frames = [
            (snap.frames.filename_of(f), int(snap.frames.line[f]), snap.frames.name_of(f))
            for f in snap.event_forward_frames(row)
        ]
        # innermost first, like every stack in the model
        assert frames == [("/w/model.py", 42, "forward"), ("/w/train.py", 10, "<module>")]
        assert snap.string(int(snap.trace.user_metadata[row])).startswith("step ")


def test_fx_frame_fields_are_kept():
    obj, _ = with_newer_fields(raw_object(DATA / "fragmentation_oom.pickle"))
    snap = load_bytes(pickle.dumps(obj))
    fx = [snap.frames.fx_of(i) for i in range(len(snap.frames))]
    with_fx = [d for d in fx if d]
    assert with_fx and all(d == FX_FRAME for d in with_fx)
    row = int(np.flatnonzero(snap.trace.forward_stack >= 0)[0])
    inner = snap.stacks.frame_ids(int(snap.trace.stack[row]))[0]
    assert snap.frames.fx_of(int(inner))["fx_node_name"] == "linear_1"


def test_trace_ring_overflow_is_reported(newer):
    snap = load_bytes(newer["fragmentation_oom"][0])
    assert snap.trace_overflowed is True
    assert snap.trace_max_entries == 100_000
    note = snap.trace_integrity_note()
    assert "overflowed" in note and "100,000" in note
    plain = load_snapshot(DATA / "fragmentation_oom.pickle")
    assert plain.trace_overflowed is None and plain.trace_integrity_note() is None


def test_pinned_host_memory_is_its_own_device(newer):
    snap = load_bytes(newer["fragmentation_oom"][0])
    assert snap.has_host_memory and HOST_DEVICE not in snap.devices
    host = snap.host
    assert (host.segments.device == HOST_DEVICE).all() and (host.trace.device == HOST_DEVICE).all()
    assert len(host.trace) == HOST_DEVICE_EVENTS
    assert host.reserved_bytes == 6 << 20 and host.allocated_bytes == 2 << 20
    hs = snap.host_snapshot()
    assert hs.devices == [HOST_DEVICE]
    stats = memory_stats(hs, Selection(device=HOST_DEVICE))
    assert (stats.reserved_bytes, stats.allocated_bytes) == (6 << 20, 2 << 20)
    frame = snap.stacks.frame_ids(int(host.blocks.stack[0]))[0]
    assert snap.frames.filename_of(frame) == "/w/loader.py"


def test_host_only_recording_loads():
    """record_cuda=False: no device memory at all, only pinned host memory."""
    obj, _ = with_newer_fields(raw_object(DATA / "fragmentation_oom.pickle"))
    obj["segments"], obj["device_traces"] = [], []
    snap = load_bytes(pickle.dumps(obj))
    assert snap.devices == [] and snap.has_host_memory and snap.warnings == []


def test_user_metadata_written_as_a_dict():
    obj = raw_object(DATA / "side_stream_pending.pickle")
    obj["device_traces"][0][0]["user_metadata"] = {"phase": "fwd", "step": 3}
    snap = load_bytes(pickle.dumps(obj))
    assert snap.string(int(snap.trace.user_metadata[0])) == "phase: fwd; step: 3"
    assert snap.warnings == []


def test_protocol5_in_band_loads(newer, loaded_snapshots):
    obj, _ = with_newer_fields(raw_object(DATA / "side_stream_pending.pickle"))
    obj["note"] = bytearray(b"in-band bytes")  # BYTEARRAY8, protocol 5's in-band buffer
    snap = load_bytes(pickle.dumps(obj, protocol=5))
    assert_same_snapshot(
        loaded_snapshots(DATA / "side_stream_pending.pickle"),
        snap,
        ignore=("trace.user_metadata", "trace.forward_stack"),
    )
    assert len(snap.alloc_annotations) > 0 and snap.has_host_memory


@pytest.mark.parametrize("readonly", [False, True])
def test_protocol5_out_of_band_buffers_refused_in_one_line(readonly):
    obj = raw_object(DATA / "side_stream_pending.pickle")
    data = bytes(b"x" * 64) if readonly else bytearray(b"x" * 64)
    obj["blob"] = pickle.PickleBuffer(data)
    buffers: list = []
    raw = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    assert buffers  # really out of band
    with pytest.raises(SnapshotError) as err:
        load_bytes(raw)
    message = str(err.value)
    assert "out-of-band buffer" in message and "\n" not in message
    assert "NEXT_BUFFER at byte" in message  # the first such opcode (READONLY_BUFFER follows)
    with pure_python():  # both parsers: the same words at the same byte
        with pytest.raises(SnapshotError) as slow:
            load_bytes(raw)
    assert str(slow.value) == message


def test_cache_keeps_the_newer_fields(newer, tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    snap = load_bytes(newer["fragmentation_oom"][0])
    cache.store("k" * 40, snap)
    back = cache.load_cached("k" * 40)
    assert back is not None
    assert_identical(snap, back)
    for a, b in (
        (snap.alloc_annotations, back.alloc_annotations),
        (snap.host.trace, back.host.trace),
        (snap.host.blocks, back.host.blocks),
    ):
        for name in a.__dataclass_fields__:
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in FX_FRAME:
        assert np.array_equal(getattr(snap.frames, name), getattr(back.frames, name))
    assert back.host.pools == snap.host.pools and back.trace_overflowed


needs_native = native_gate.needs(fast_pickle.available(), "compiled parser not built")


@needs_native
@pytest.mark.parametrize("parser_path", ["native"], indirect=True)
def test_compiled_parser_hands_unknown_event_keys_to_python():
    """A key the compiled parser does not know is never dropped: the Python path reads it."""
    obj = raw_object(DATA / "side_stream_pending.pickle")
    obj["device_traces"][0][3]["forward_frames"] = list(FORWARD_FRAMES)
    assert fast_pickle.native_loads(pickle.dumps(obj, protocol=4)) is None
    obj["device_traces"][0][3]["some_future_key"] = 1
    del obj["device_traces"][0][3]["forward_frames"]
    assert fast_pickle.native_loads(pickle.dumps(obj, protocol=4)) is None


@needs_native
@pytest.mark.parametrize("parser_path", ["native"], indirect=True)
def test_pool_id_files_read_alike_on_both_paths():
    """``pool_id`` (on every event since torch 2.12) is a key the compiled parser does
    not know: it hands the file to the Python path, which ignores it (pools come from
    the segments); the columns are those of the same file without it."""
    obj = raw_object(DATA / "side_stream_pending.pickle")
    plain = load_bytes(pickle.dumps(obj, protocol=4))
    for trace in obj["device_traces"]:
        for e in trace:
            e["pool_id"] = (0, 0)
    data = pickle.dumps(obj, protocol=4)
    fast = load_bytes(data)
    with pure_python():
        slow = load_bytes(data)
    assert_identical(fast, slow)
    assert_identical(plain, fast)


RECORDED = DATA / "newer_fields.pickle"  # tests/workloads/newer_fields.py, recorded on the GPU


def test_real_recording_with_newer_fields():
    """A real recording: figures equal memory_stats; what its torch wrote is read."""
    snap = load_snapshot(RECORDED)
    side = expected_for(RECORDED)
    expected = side["memory_stats"]
    stats = memory_stats(snap, Selection(device=0))
    assert stats.reserved_bytes == expected["reserved_bytes.all.current"]
    assert stats.allocated_bytes == expected["allocated_bytes.all.current"]
    assert stats.active_bytes == expected["active_bytes.all.current"]
    keys, truth = side["keys"], side["truth"]
    if "annotate" in keys["actions"]:
        got = {
            (int(a), snap.string(int(t)))
            for a, t in zip(snap.alloc_annotations.addr, snap.alloc_annotations.text)
        }
        assert {(a, t) for a, t in truth["annotations"]} <= got
    if truth["metadata"] and "user_metadata" in keys["event"]:
        seen = {snap.string(int(i)) for i in np.unique(snap.trace.user_metadata) if i >= 0}
        seen.discard("")  # events recorded while no metadata was set
        # The ring is smaller than the run: early steps' events (and their metadata) are
        # overwritten; what is read is the recorded steps', and the last step is there.
        assert seen and seen <= set(truth["metadata"])
        assert truth["metadata"][-1] in seen
    if "forward_frames" in keys["event"]:
        assert (snap.trace.forward_stack >= 0).any()
    if "host_segments" in keys["top"]:
        assert snap.has_host_memory and HOST_DEVICE not in snap.devices
        assert snap.host.allocated_bytes >= truth["pinned_kept_bytes"]
    if "trace_alloc_overflowed" in keys["allocator_settings"]:
        assert snap.trace_overflowed is True  # the ring is far smaller than the run
    assert snap.warnings == []


def test_event_details_for_tooltips_and_the_stack_panel(newer):
    snap = load_bytes(newer["side_stream_pending"][0])
    _device, addr, row = newer["side_stream_pending"][1]["annotated"][0]
    free = next(
        (
            r
            for r in range(row + 1, len(snap.trace))
            if snap.trace.addr[r] == addr and snap.trace.action[r] == Action.FREE_COMPLETED
        ),
        None,
    )
    d = snap.event_details(row, free)
    assert d["user_metadata"].startswith("step ") and d["compile_context"] is None
    assert len(d["forward_frames"]) == 2
    assert [a["text"] for a in d["annotations"]] == [ANNOTATION_TEXT]
    plain = int(np.flatnonzero(snap.trace.forward_stack < 0)[0])
    assert len(snap.event_details(plain)["forward_frames"]) == 0


def test_host_device_builds_its_own_document_and_replays_exactly(newer):
    """Selecting 'host' in the device selector: a document of its own whose replay
    ends on the recorded host segments."""
    from vramscope.viewer.model.view.document import Document

    snap = load_bytes(newer["fragmentation_oom"][0])
    doc = Document.build(snap.host_snapshot())
    assert list(doc.timeline.devices) == [HOST_DEVICE]
    rep = doc.timeline.replay(HOST_DEVICE)
    assert rep.peak("reserved")[0] == 6 << 20
    end = doc.timeline.snapshot_at(HOST_DEVICE, len(rep) - 1)
    recorded = snap.host
    assert end.segments.address.tolist() == recorded.segments.address.tolist()
    assert end.blocks.state.tolist() == recorded.blocks.state.tolist()
    assert end.blocks.size.tolist() == recorded.blocks.size.tolist()


def test_malformed_newer_fields_are_skipped_with_a_warning():
    obj = raw_object(DATA / "side_stream_pending.pickle")
    events = obj["device_traces"][0]
    events[0]["forward_frames"] = 5
    events[1]["forward_frames"] = [7, None, "no traceback here"]
    events[2]["user_metadata"] = [1, 2]
    events.insert(3, {"action": "annotate", "size": 0, "user_metadata": "x"})  # no addr
    frame = dict((events[4].get("frames") or [{}])[0] or {}, fx_node_name=12, fx_node_op=None)
    events[4]["frames"] = [frame]
    obj["host_segments"] = {"not": "a list"}
    obj["host_traces"] = [1, [2], {"action": "alloc"}]
    obj["allocator_settings"]["trace_alloc_overflowed"] = "yes"
    snap = load_bytes(pickle.dumps(obj))
    text = "\n".join(snap.warnings)
    for expected in (
        "forward_frames that are not lists",
        "forward_frames entries that are not strings",
        "annotate events without an address",
        "'host_segments': it is not a list",
        "'host_traces' entries that are neither events nor lists",
    ):
        assert expected in text, expected
    assert snap.trace_overflowed is None  # not a bool: not claimed either way
    row = 1  # the unparseable line is kept as its text
    names = [snap.frames.filename_of(f) for f in snap.event_forward_frames(row)]
    assert names == ["no traceback here"]
    assert snap.string(int(snap.trace.user_metadata[2])) == "?"
    stats = memory_stats(snap, Selection(device=0))
    assert (
        stats.reserved_bytes
        == expected_for(DATA / "side_stream_pending.pickle")["memory_stats"][
            "reserved_bytes.all.current"
        ]
    )


def test_annotations_placed_on_a_devices_event_axis():
    """Two devices: each annotation lands right after its alloc on its own device's axis."""
    from tests.snapshot_forms import merge_devices, on_device
    from vramscope.viewer.model.replay.timeline import build_timeline

    a, _ = with_newer_fields(raw_object(DATA / "side_stream_pending.pickle"), host=False)
    b, _ = with_newer_fields(
        on_device(raw_object(DATA / "cuda_graph_pool.pickle"), 1), every=3, host=False
    )
    snap = load_bytes(pickle.dumps(merge_devices(a, b)))
    timeline = build_timeline(snap)
    for device in (0, 1):
        rep = timeline.replay(device)
        rows, pos = snap.alloc_annotations.on_device(device, rep.rows)
        assert len(rows) > 0
        for r, k in zip(rows.tolist(), pos.tolist()):
            assert rep.action[k - 1] == Action.ALLOC
            assert rep.addr[k - 1] == snap.alloc_annotations.addr[r]


@needs_native
@pytest.mark.parametrize("parser_path", ["native"], indirect=True)
def test_fx_frames_stay_on_the_compiled_path_with_identical_columns():
    """Frames are handed to the interner as they are: FX fields survive the fast path."""
    obj = raw_object(DATA / "side_stream_pending.pickle")
    for e in obj["device_traces"][0][::3]:
        if e.get("frames"):
            e["frames"] = [dict(e["frames"][0], **FX_FRAME)] + list(e["frames"][1:])
    data = pickle.dumps(obj, protocol=4)
    assert fast_pickle.native_loads(data) is not None
    fast = load_bytes(data)
    with pure_python():
        slow = load_bytes(data)
    assert_identical(fast, slow)
    for name in FX_FRAME:
        assert np.array_equal(getattr(fast.frames, name), getattr(slow.frames, name))
    assert any(fast.frames.fx_of(i) == FX_FRAME for i in range(len(fast.frames)))


def test_every_encoding_of_a_newer_file_gives_the_same_snapshot():
    """Protocols 0-5, gzip, xz and JSON: the newer fields read alike from each."""
    from tests.snapshot_forms import encodings

    obj, _ = with_newer_fields(raw_object(DATA / "side_stream_pending.pickle"))
    reference = load_bytes(pickle.dumps(obj, protocol=4))
    for form, data in encodings(obj):
        snap = load_bytes(data)
        assert_same_snapshot(reference, snap)
        for name in ANN_COLUMNS:  # the text and stack ids may differ: compare them resolved
            assert np.array_equal(
                getattr(reference.alloc_annotations, name), getattr(snap.alloc_annotations, name)
            ), (form, name)
        assert [snap.string(int(t)) for t in snap.alloc_annotations.text] == [
            reference.string(int(t)) for t in reference.alloc_annotations.text
        ]
        assert snap.host.reserved_bytes == reference.host.reserved_bytes, form
        assert len(snap.host.trace) == len(reference.host.trace), form
        assert np.array_equal(snap.trace.forward_stack >= 0, reference.trace.forward_stack >= 0)
        assert snap.trace_overflowed is True and snap.warnings == [], form


@needs_native
@pytest.mark.parametrize("parser_path", ["native"], indirect=True)
def test_fx_frames_survive_the_threaded_sections():
    """Big traces are parsed in threaded sections; frame dicts with FX fields come out
    whole (the same ids as the Python path)."""
    from vramscope.viewer.model.io.safe_pickle import safe_loads
    from vramscope.viewer.model.io.schema import to_snapshot

    events = []
    for i in range(20_000):
        frames = [
            dict(
                {"filename": "gen.py", "line": i % 49, "name": "f"}, **(FX_FRAME if i % 2 else {})
            ),
            {"filename": "m.py", "line": 3, "name": "main"},
        ]
        events.append(
            {
                "action": "alloc",
                "addr": 4096 * i,
                "size": 512,
                "stream": 0,
                "time_us": i,
                "frames": frames,
                "compile_context": "N/A",
                "user_metadata": "",
            }
        )
    data = pickle.dumps({"segments": [], "device_traces": [events], "allocator_settings": {}})
    fast = fast_pickle.native_loads(data, -1, None, 2, 1000)  # two threads, small sections
    assert fast is not None
    a = to_snapshot(fast.obj, native=fast.native)
    b = to_snapshot(safe_loads(data))
    assert_identical(a, b)
    assert sum(1 for i in range(len(a.frames)) if a.frames.fx_of(i) == FX_FRAME) == 49


def test_a_snapshot_at_any_event_keeps_the_newer_fields(newer):
    """Time travel (timeline.snapshot_at) keeps annotations, host memory and settings."""
    from vramscope.viewer.model.replay.timeline import build_timeline

    snap = load_bytes(newer["side_stream_pending"][0])
    at = build_timeline(snap).snapshot_at(0, 3)
    assert len(at.alloc_annotations) == len(snap.alloc_annotations)
    assert at.has_host_memory and at.host_snapshot() is not None and at.trace_overflowed
