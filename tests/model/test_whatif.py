"""The what-if simulator: exact at the recorded settings, within 2 % under others."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA, expected_for, snapshot_files, snapshot_id
from tests.snapshot_forms import raw_object
from vramscope.viewer.model import load_bytes
from vramscope.viewer.model.core import allocator_rules as rules
from vramscope.viewer.model.core.errors import LoadCancelled
from vramscope.viewer.model.core.progress import Progress
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq
from vramscope.viewer.model.whatif.selfcheck import compare_events

OWN = DATA / "whatif_h200"  # tests/workloads/whatif_workload.py --all, on an H200
OWN_FILES = sorted(OWN.glob("*.pickle.xz"))
ALL_FILES = snapshot_files() + OWN_FILES + sorted((DATA / "ddp_2ranks").glob("*.pickle"))


def sidecar(path: Path) -> dict:
    return json.loads((path.parent / (path.name.split(".pickle")[0] + ".json")).read_text())


@pytest.fixture(scope="module")
def cases(loaded_snapshots):
    memo = {}

    def get(path, device=None):
        key = (str(path), device)
        if key not in memo:
            memo[key] = prepare(loaded_snapshots(path), device)
        return memo[key]

    return get


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: f"{p.parent.name}/{snapshot_id(p)}")
def test_self_check_reproduces_every_recording(path, loaded_snapshots, cases):
    """Every segment event at the same request with the same size, the final segments
    and the allocator's own peak counters, on every real snapshot."""
    snap = loaded_snapshots(path)
    side = sidecar(path)
    for device in sorted(set(np.unique(snap.trace.device).tolist())):
        case = cases(path, device)
        check = case.self_check()
        assert check.ok, check.first_difference
        sim = case.recorded_run()
        assert sim.n_cuda_malloc == int(np.isin(case.requests.seg_action, (3, 5)).sum())
        if device != side.get("device", 0) or len(case.requests.initial.seg_addr):
            continue  # counters of another device / a wrapped window
        stats = side["memory_stats"]
        assert sim.peak_reserved == stats["reserved_bytes.all.peak"]
        assert sim.peak_allocated == stats["allocated_bytes.all.peak"]
        assert sim.n_cuda_malloc == stats["num_device_alloc"]
        assert sim.n_cuda_free == stats["num_device_free"]
        assert sim.n_retries == stats["num_alloc_retries"]
        assert len(sim.ooms) == stats["num_ooms"]


def test_wrapped_ring_buffer_is_seeded_from_the_replay(loaded_snapshots):
    """Drop the first 60 % of a trace (a wrapped buffer): the window still replays exactly."""
    obj = raw_object(DATA / "gpt2_oom.pickle")
    events = obj["device_traces"][0]
    obj["device_traces"][0] = events[int(len(events) * 0.6) :]
    case = prepare(load_bytes(pickle.dumps(obj)))
    assert len(case.requests.initial.seg_addr) > 0
    assert (case.requests.ref <= -2).any()  # frees of blocks from before the window
    check = case.self_check()
    assert check.ok, check.first_difference
    assert case.requests.seg_tag.size > 10


def test_expandable_prediction_on_the_shared_pair(cases):
    """whatif_default (recorded with a 10 GB limit) predicts whatif_expandable's peak."""
    case = cases(DATA / "whatif_default.pickle")
    result = case.simulate("expandable_segments:True", limit=10_000_000_000)
    target = expected_for(DATA / "whatif_expandable.pickle")["memory_stats"]
    assert result.first_oom is None
    assert abs(result.peak_reserved / target["reserved_bytes.all.peak"] - 1) <= 0.02
    assert result.peak_reserved < case.recorded_peak  # what expandable segments are for
    # Event for event, both ways: default -> expandable and expandable -> default.
    other = cases(DATA / "whatif_expandable.pickle")
    assert compare_events(other.requests, result) == ""
    back = other.simulate("", limit=10_000_000_000)
    assert compare_events(case.requests, back) == ""
    assert (
        back.peak_reserved
        == expected_for(DATA / "whatif_default.pickle")["memory_stats"]["reserved_bytes.all.peak"]
    )


@pytest.mark.parametrize(
    "target", [p for p in OWN_FILES if "whatif_default." not in p.name], ids=snapshot_id
)
def test_predictions_from_the_default_recording(target, cases):
    """The default recording, simulated under each other recorded setting and limit,
    predicts that recording's peak reserved within 2 %, its OOM at the same request and
    (the same seeded requests) every one of its segment events."""
    side = sidecar(target)
    case = cases(OWN / "whatif_default.pickle.xz")
    result = case.simulate(side["alloc_conf"], limit=side["memory_limit_bytes"])
    want = side["memory_stats"]["reserved_bytes.all.peak"]
    assert abs(result.peak_reserved_until_oom / want - 1) <= 0.02, (
        result.peak_reserved_until_oom,
        want,
    )
    other = cases(target)
    recorded_ooms = np.flatnonzero(other.requests.kind == rq.OOM)
    if side.get("oom"):
        assert result.first_oom is not None
        assert result.first_oom.request == recorded_ooms[0]
        # The recorded program stopped there; compare the answers up to that request.
        result.events = [e for e in result.events if e[0] <= result.first_oom.request]
    else:
        assert result.first_oom is None and not len(recorded_ooms)
    # Stronger than the peak: every cudaMalloc / cudaFree / map / unmap of the other
    # recording, at the same request with the same size, predicted from this one.
    assert compare_events(other.requests, result) == ""


@pytest.mark.parametrize("path", OWN_FILES, ids=snapshot_id)
def test_conf_parsing_matches_the_allocator(path, loaded_snapshots):
    """Our parse of each recorded PYTORCH_CUDA_ALLOC_CONF equals what torch recorded."""
    conf = sidecar(path)["alloc_conf"]
    assert rules.parse_conf(conf) == rules.config_from_settings(
        loaded_snapshots(path).allocator_settings
    )


@pytest.mark.parametrize(
    "bad",
    [
        "foo:1",
        "max_split_size_mb:10",
        "expandable_segments:yes",
        "roundup_power2_divisions:3",
        "garbage_collection_threshold:1.5",
        "max_split_size_mb",
        "roundup_power2_divisions:[256:3]",
        "backend:cudaMallocAsync",
        "expandable_segments:True;x",
    ],
)
def test_bad_conf_is_one_clear_error(bad):
    with pytest.raises(rules.ConfError) as err:
        rules.parse_conf(bad)
    assert "\n" not in str(err.value) and str(err.value)


def test_a_wrong_rule_is_reported_at_its_first_event(cases):
    """Simulated under other settings, the answers differ, and the report names where."""
    case = cases(OWN / "whatif_default.pickle.xz")
    other = case.simulate("max_split_size_mb:64")
    diff = compare_events(case.requests, other)
    assert diff.startswith("segment event ") and "trace event" in diff
    assert compare_events(case.requests, case.recorded_run()) == ""


def test_max_split_size_raises_the_peak_here_and_expandable_lowers_it(cases):
    """The issue's surprise, predicted and recorded: max_split_size_mb:64 costs memory."""
    case = cases(OWN / "whatif_default.pickle.xz")
    split = case.simulate("max_split_size_mb:64").peak_reserved
    exp = case.simulate("expandable_segments:True").peak_reserved
    recorded = {
        p.name.split(".")[0]: sidecar(p)["memory_stats"]["reserved_bytes.all.peak"]
        for p in OWN_FILES
    }
    assert (split > case.recorded_peak) == (
        recorded["whatif_max_split_64"] > recorded["whatif_default"]
    )
    assert (exp < case.recorded_peak) == (
        recorded["whatif_expandable"] < recorded["whatif_default"]
    )


def test_cancel_stops_a_simulation(cases):
    case = cases(DATA / "gpt2_oom.pickle")
    progress = Progress()
    progress.cancel()
    with pytest.raises(LoadCancelled):
        case.simulate("expandable_segments:True", progress=progress)


def test_limit_is_bounded_from_the_trace_when_the_sidecar_lacks_it(cases):
    """The own recordings know their limit: the bounds from the trace must contain it."""
    for path in OWN_FILES:
        if not sidecar(path).get("oom"):
            continue
        case = cases(path)
        limit = sidecar(path)["memory_limit_bytes"]
        assert case.bounds.upper is not None
        assert case.bounds.lower <= limit <= case.bounds.upper


def test_a_fragmentation_oom_under_expandable_segments_is_explained(cases):
    """The issue's second surprise: expandable segments can still run out by fragmentation.
    Free pieces between live blocks of the one growing segment add up to the request, none
    is big enough, and the pages they share with live blocks cannot be unmapped."""
    from vramscope.viewer.model.whatif.predictions import verdict

    case = cases(DATA / "gpt2_oom.pickle")
    limit = 10_000_000_000  # a little under the recording's own (inferred) limit
    assert limit < case.bounds.lower
    oom = case.simulate("expandable_segments:True", limit=limit).first_oom
    assert oom is not None and oom.expandable and oom.kind == "fragmentation"
    assert oom.reserved_bytes + oom.new_memory_bytes > limit
    assert oom.largest_free_bytes < oom.size <= oom.free_in_pool_bytes
    assert "pages" in verdict(oom)


@pytest.mark.parametrize("seed", range(24))
def test_damaged_traces_never_crash_the_simulator(seed):
    """Dropped, duplicated, swapped events and wrapped windows: predictions still come back
    (a window seeded under default settings holds split blocks bigger than max_split_size,
    which the allocator itself would never have)."""
    import random

    names = ["side_stream_pending", "cuda_graph_pool", "gpt2_oom"]
    rng = random.Random(seed)
    obj = raw_object(DATA / f"{names[seed % 3]}.pickle")
    ev = obj["device_traces"][0]
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(ev))
        op = rng.random()
        if op < 0.4:
            del ev[i]
        elif op < 0.7:
            ev.insert(rng.randrange(len(ev)), dict(ev[i]))
        else:
            j = rng.randrange(len(ev))
            ev[i], ev[j] = ev[j], ev[i]
    if seed % 5 == 0:
        obj["device_traces"][0] = ev[rng.randrange(len(ev) // 2) :]
    case = prepare(load_bytes(pickle.dumps(obj)))
    for conf in (
        "recorded",
        "expandable_segments:True",
        "max_split_size_mb:64",
        "garbage_collection_threshold:0.5,roundup_power2_divisions:4",
    ):
        result = case.simulate(conf, limit=(2 << 30) if seed % 2 else None)
        assert result.peak_reserved >= 0 and len(result.reserved) == len(case.requests)
    assert isinstance(case.self_check().first_difference, str)


def test_self_check_says_one_sentence_everywhere():
    """The commands' warning is the sentence the What-if panel shows: one wording."""
    from vramscope.viewer.model.whatif.selfcheck import CheckResult

    failed = CheckResult(ok=False, n_segment_events=3, first_difference="segment event 2: x")
    assert failed.warnings() == [failed.sentence()]
    assert "segment event 2: x" in failed.sentence() and "approximate" in failed.sentence()
    passed = CheckResult(ok=True, n_segment_events=3, first_difference="")
    assert passed.warnings() == [] and passed.sentence().startswith("Self-check passed")
