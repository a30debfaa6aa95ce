"""The compiled snapshot parser gives exactly what the pure-Python path gives.

Every bundled snapshot goes through both (columns, dtypes, interned ids,
strings, warnings equal), the compiled path must really be taken on them (not
quietly handed back), errors match word for word, an uncompressed file is
streamed in bounded memory, and a cancelled parse frees what it built.
"""

from __future__ import annotations

import lzma
import os
import pickle
import random
import threading
import tracemalloc

import pytest

from tests import native_gate, shared_data
from tests.bad_inputs import cases
from tests.conftest import DATA
from tests.parser_paths import assert_identical, parallel_parse, pure_python, same_parse
from vramscope.viewer.model import LoadCancelled, Progress, SnapshotError, load_bytes, load_snapshot
from vramscope.viewer.model.io import fast_pickle
from vramscope.viewer.model.io.safe_pickle import safe_loads

ROOT = DATA.parent.parent
SNAPSHOTS = (
    sorted(DATA.glob("*.pickle"))
    + sorted(DATA.glob("*.pickle.xz"))
    + sorted((DATA / "ddp_2ranks").glob("*.pickle"))
    + sorted((ROOT / "assets").glob("*.pickle"))
)
BIG_XZ = DATA / "transformer_long_python_1000k.pickle.xz"

needs_native = native_gate.needs(fast_pickle.available(), "compiled parser not built")
# Real recordings with event keys the compiled parser does not model (forward_frames):
# it must hand them to the Python path, never drop the field.
HANDED_BACK = {"newer_fields.pickle"}


def test_extension_is_built():
    """The test install builds the extension; only a deliberate no-compiler run may skip it."""
    if os.environ.get("VRAMSCOPE_BUILD_NATIVE") == "0":
        pytest.skip("VRAMSCOPE_BUILD_NATIVE=0: testing the pure-Python install")
    assert fast_pickle.available(), "run `make install` (or pip install -e .) to build it"


def _plain(path):
    data = path.read_bytes()
    return lzma.decompress(data) if path.suffix == ".xz" else data


@pytest.fixture(scope="module")
def big_plain(tmp_path_factory):
    """The 1M-event snapshot, decompressed: the file the benchmarks stream."""
    path = tmp_path_factory.mktemp("big") / "transformer_long_python_1000k.pickle"
    path.write_bytes(lzma.decompress(BIG_XZ.read_bytes()))
    return path


@pytest.mark.slow
@needs_native
@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_every_snapshot_identical_through_both_paths(path):
    data = _plain(path)
    if path.name in HANDED_BACK:  # by design: the Python path reads those fields
        assert fast_pickle.native_loads(data) is None, "an unknown event key was dropped"
    else:
        assert fast_pickle.native_loads(data) is not None, "the compiled parser handed it back"
    fast = load_bytes(path.read_bytes())
    with pure_python():
        slow = load_bytes(path.read_bytes())
    assert_identical(fast, slow)
    assert len(fast.trace) > 0 and not fast.warnings
    if path.suffix == ".pickle":  # the streamed file path, too
        assert_identical(load_snapshot(path, use_cache=False), slow)


@needs_native
def test_big_file_streamed_identical_in_bounded_memory(big_plain):
    """Streaming keeps ~1 MiB of the file in memory, not all 83 MiB of it."""
    tracemalloc.start()
    try:
        streamed = load_snapshot(big_plain, use_cache=False)
        stream_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        whole = load_bytes(big_plain.read_bytes())
        whole_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_identical(streamed, whole)
    size = big_plain.stat().st_size
    assert stream_peak < whole_peak - 0.8 * size, (stream_peak, whole_peak, size)


@needs_native
def test_cancelled_parse_frees_its_memory(big_plain):
    cancel = threading.Event()

    def cancel_halfway(stage, fraction):
        if stage == "parse" and fraction > 0.5:
            cancel.set()

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with pytest.raises(LoadCancelled):
            load_snapshot(big_plain, Progress(cancel_halfway, cancel), use_cache=False)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - before > 20 << 20  # it did build half a trace ...
    assert after - before < 1 << 20  # ... and gave it all back


def _messages(data: bytes) -> tuple[str, str]:
    out = []
    for pure in (False, True):
        try:
            if pure:
                with pure_python():
                    snap = load_bytes(data)
            else:
                snap = load_bytes(data)
            out.append(("ok", snap))
        except SnapshotError as exc:
            out.append((type(exc).__name__, str(exc)))
    return out[0], out[1]


def _same_outcome(data: bytes) -> None:
    fast, slow = _messages(data)
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "ok":
        assert_identical(fast[1], slow[1])
    else:
        assert fast[1] == slow[1]


@needs_native
@pytest.mark.parametrize("name,data,expect", list(cases()), ids=[c[0] for c in cases()])
def test_hostile_and_damaged_inputs_same_outcome(name, data, expect):
    _same_outcome(data)


@pytest.mark.slow
@needs_native
def test_truncation_and_refused_opcodes_reported_at_the_same_byte():
    data = (DATA / "fragmentation_oom.pickle").read_bytes()
    rng = random.Random(5)
    for cut in rng.sample(range(1, len(data)), 60):
        _same_outcome(data[:cut])
    for at in rng.sample(range(2, len(data)), 60):
        for opcode in (b"c", b"\x93", b"R", b"\x81", b"Q", b"\x82\x01"):
            _same_outcome(data[:at] + opcode + data[at:])


def _forms():
    obj = safe_loads((DATA / "side_stream_pending.pickle").read_bytes())
    for proto in range(6):
        yield f"protocol{proto}", pickle.dumps(obj, protocol=proto)  # trusted test data
    flipped = {"device_traces": obj["device_traces"], **obj}  # traces before segments
    yield "traces-first", pickle.dumps(flipped, protocol=4)
    odd = dict(obj, device_traces=[list(t) for t in obj["device_traces"]])
    odd["device_traces"][0][0] = dict(odd["device_traces"][0][0], action="teleport")
    yield "unknown-action", pickle.dumps(odd, protocol=4)
    shared = dict(obj, device_traces=[obj["device_traces"][0], obj["device_traces"][0]])
    yield "shared-device-list", pickle.dumps(shared, protocol=4)
    tupled = dict(
        obj,
        device_traces=[
            [dict(e, frames=tuple(e.get("frames") or ())) for e in obj["device_traces"][0]]
        ],
    )
    yield "tuple-frames", pickle.dumps(tupled, protocol=2)
    one = dict(obj, device_traces=[[obj["device_traces"][0][0]], [{"action": "alloc", "size": 1}]])
    yield "single-entry-lists", pickle.dumps(one, protocol=4)
    # Context strings interleaved with new stacks: ids must follow the same first-seen order.
    events = [
        dict(
            e,
            compile_context=("N/A", "ctx0", "ctx1")[i % 3],
            user_metadata=("", "meta0", "ctx0")[i % 3],
            device_free=i * 512,
        )
        for i, e in enumerate(obj["device_traces"][0])
    ]
    yield "context-strings", pickle.dumps(dict(obj, device_traces=[[], events]), protocol=4)
    yield "context-strings-p2", pickle.dumps(dict(obj, device_traces=[events, events[:5]]), 2)
    # Found by tests/fuzz/fuzz_parser.py: an APPENDS with no items still needs a list.
    yield "empty-appends-on-a-dict", b"\x80\x04}\x94(\x8c\x08segments]h\x00(e0u."


@needs_native
@pytest.mark.parametrize("name,data", list(_forms()), ids=[f[0] for f in _forms()])
def test_other_forms_identical_handled_or_handed_back(name, data):
    _same_outcome(data)


@pytest.mark.slow
@needs_native
def test_short_fuzz_run():
    """A short run of the differential fuzzer (the long one: tests/fuzz/fuzz_parser.py)."""
    from tests.fuzz.fuzz_parser import run_inputs

    outcomes = run_inputs(20_000, seed=7, report_every=0, crash_dir=ROOT / "fuzz-findings")
    assert sum(outcomes.values()) == 20_000
    assert outcomes.get("equal", 0) > 200 and outcomes.get("same-error", 0) > 2000, outcomes


@needs_native
def test_an_unknown_event_key_goes_to_the_python_parser():
    """A newer torch's event field is never silently dropped by the compiled parser:
    the file goes to the Python path (the reference decides what the field means)."""
    event = {
        "action": "alloc",
        "addr": 4096,
        "size": 512,
        "stream": 0,
        "time_us": 1,
        "frames": [],
        "is_new_field": 7,
    }
    obj = {"segments": [], "device_traces": [[event]]}
    data = pickle.dumps(obj, protocol=4)
    assert fast_pickle.native_loads(data) is None
    known = dict(event)
    del known["is_new_field"]
    assert fast_pickle.native_loads(pickle.dumps(dict(obj, device_traces=[[known]]), 4)) is not None
    with pure_python():
        reference = load_bytes(data)
    assert_identical(load_bytes(data), reference)


PARALLEL_FILES = (
    SNAPSHOTS
    + sorted((DATA / "truth").glob("*.pickle*"))
    + shared_data.external_params("*.pickle*")
)


@pytest.mark.slow
@needs_native
@pytest.mark.parametrize("path", PARALLEL_FILES, ids=lambda p: p.name)
def test_parallel_sections_give_the_serial_answer(path):
    """Device traces parsed in parallel regions (here a checkpoint every event, so a
    file of a few events is cut into many regions that refer to each other's memo
    entries) give exactly the serial VM's answer - and really ran in parallel."""
    path = shared_data.require(path)
    data = _plain(path)
    serial = snapparse().parse(data)
    for threads in (2, 5):
        parallel = parallel_parse(data, threads)
        assert same_parse(parallel, serial), f"{threads} threads"
    if (
        serial[0] == "ok"
        and serial[2] is not None
        and memoryview(serial[2]["columns"]["action"]).nbytes
    ):
        assert parallel[2]["parallel"] >= 1, "the parallel path was abandoned"


@needs_native
def test_the_big_snapshot_in_parallel_is_the_serial_one():
    """The 1M-event recording at the real section size (a chunked skim, regions of
    thousands of events) on 2 and 4 threads, through the loader too."""
    data = _plain(BIG_XZ)
    serial = snapparse().parse(data)
    for threads in (2, 4):
        parallel = snapparse().parse(data, -1, None, threads)
        assert parallel[2]["parallel"] == 1
        assert same_parse(parallel, serial)
    fast = fast_pickle.native_loads(data, threads=4)
    assert fast is not None and fast.native["parallel"] == 1


@needs_native
def test_a_cancel_during_parallel_sections_stops_the_parse():
    data = _plain(BIG_XZ)

    class Stop(Exception):
        pass

    def progress(fraction):
        if fraction > 0.1:
            raise Stop()

    with pytest.raises(Stop):
        snapparse().parse(data, -1, progress, 4, 1)


def snapparse():
    from vramscope.viewer.model._native import native_module

    return native_module("snapparse")


@needs_native
def test_sections_share_frame_lists_across_devices():
    """Device 1's events reuse device 0's frame lists and frame dicts (memo references
    into an earlier parallel section) and the segments' lists (before any section)."""
    frames = [[{"filename": f"f{i % 7}.py", "line": i, "name": "fn"}] for i in range(50)]
    seg_frames = [{"filename": "seg.py", "line": 1, "name": "alloc"}]
    segments = [
        {
            "device": 0,
            "address": 0,
            "total_size": 1 << 20,
            "stream": 0,
            "segment_type": "large",
            "allocated_size": 0,
            "active_size": 0,
            "requested_size": 0,
            "blocks": [
                {
                    "address": 0,
                    "size": 1 << 20,
                    "requested_size": 0,
                    "state": "inactive",
                    "frames": seg_frames,
                }
            ],
        }
    ]
    dev0 = [
        {
            "action": "alloc",
            "addr": 4096 * i,
            "size": 512,
            "stream": 0,
            "time_us": i,
            "frames": frames[i % 50],
            "compile_context": f"cc{i % 3}",
        }
        for i in range(300)
    ]
    dev1 = [
        {
            "action": "free_completed",
            "addr": 4096 * i,
            "size": 512,
            "stream": 0,
            "time_us": 1000 + i,
            "frames": (frames[i % 50] if i % 3 else seg_frames),
        }
        for i in range(300)
    ]
    data = pickle.dumps({"segments": segments, "device_traces": [dev0, dev1]}, protocol=4)
    serial = snapparse().parse(data)
    assert serial[0] == "ok"
    for threads in (2, 4):
        parallel = parallel_parse(data, threads)
        assert parallel[2]["parallel"] == 2, "both device lists in parallel"
        assert same_parse(parallel, serial)
    assert_identical(load_bytes(data), _python_load(data))


def _python_load(data):
    with pure_python():
        return load_bytes(data)
