"""One answer everywhere: advise speaks the categories that summary and the header
speak, at the same instant, and its batch axis splits the same bytes; a remedy is
offered only when the recording holds its evidence, in the order the verdict calls for.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from vramscope.viewer.model.core.errors import SnapshotError
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import advise as adv
from vramscope.viewer.model.remedies import evidence, scaling
from vramscope.viewer.model.remedies import split as split_axes
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports.summary import summarize
from vramscope.viewer.model.whatif.predictions import prepare

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
EXTERNAL = shared_data.EXTERNAL
EXAMPLE = ROOT / "assets" / "example_fragmentation_oom.pickle"

FILES = sorted(p for p in DATA.glob("*.pickle*")) + sorted((DATA / "truth").glob("*.pickle.xz"))
SPLIT_FILES = [p for p in FILES if p.stat().st_size < 3_000_000]


def _split(path: Path):
    snap = load_snapshot(path)
    try:
        case = prepare(snap)
    except SnapshotError:
        return None
    evd = evidence.gather(case)
    j = scaling.judge(case, None, evd)
    at, event, name = split_axes.moment(case, evd, case.recorded_run())
    return snap, case, evd, event, name, split_axes.split_at(case, evd, j, at, event)


def test_enough_files_are_split():
    assert len(SPLIT_FILES) >= 60, len(SPLIT_FILES)


@pytest.mark.parametrize("path", SPLIT_FILES, ids=lambda p: p.name)
def test_the_two_axes_split_the_same_bytes_in_the_words_of_summary(path):
    got = _split(path)
    if got is None:  # a snapshot with no trace: nothing to advise on
        assert not len(load_snapshot(path).trace)
        return
    snap, case, evd, event, name, split = got
    cats = split["categories"]
    assert cats is not None
    # The category axis is the breakdown's own split at that event ...
    assert cats == evd.breakdown.split_at(event)
    # ... and the batch axis adds up to it (nothing counted twice or left out).
    total = sum(cats.values())
    axis = (
        split["scales_with_batch"]
        + split["model_state"]
        + split["other_fixed"]
        + split["before_recording"]
    )
    assert axis == total, (split, total)
    assert split["activations"] == cats.get("activation", 0)
    # "Model state" is the categories' parameters, gradients and optimizer state (those
    # that do not scale), never a temporary of a weight's size.
    state = sum(cats.get(c, 0) for c in ("parameter", "gradient", "optimizer_state"))
    assert split["model_state"] <= state, (split, cats)
    if name == "at the peak":
        # summary's "at the peak" of the same device is the same instant and split.
        summ = summarize(snap, build_timeline(snap))
        if summ.get("categories_device") == case.device:
            assert summ["peak_requested_event"] == event
            assert summ["categories_at_peak"] == cats


@pytest.mark.parametrize(
    "name",
    [
        "resnet50_train.pickle",
        "truth/gpt2_leak.pickle.xz",
        "truth/mlp_sgd_plain.pickle.xz",
        "truth/bert_adam_fp32.pickle.xz",
    ],
)
def test_without_an_oom_advise_splits_at_summary_s_peak(name):
    snap, case, _evd, event, moment, split = _split(DATA / name)
    assert moment == "at the peak"
    summ = summarize(snap, build_timeline(snap))
    assert summ["categories_device"] == case.device
    assert summ["peak_requested_event"] == event
    assert summ["categories_at_peak"] == split["categories"]


@pytest.fixture(scope="module")
def long_trace_advice():
    return _advise(DATA / "transformer_long_python_1000k.pickle.xz")


def _advise(path: Path, device: int | None = None) -> adv.Advice:
    snap = load_snapshot(path)
    return adv.advise(prepare(snap, device))


def test_no_model_no_model_remedies_and_nothing_kept_without_iterations():
    """The bundled example allocates and frees buffers in a loop with no model: no
    iterations, nothing kept, no saved activations - so no remedy about them."""
    a = _advise(EXAMPLE)
    ids = [r.remedy for r in a.remedies]
    assert ids, "the smaller batch still applies: the buffers scale"
    assert not {"free_kept", "gradient_checkpointing", "bf16_autocast"} & set(ids), ids
    text = adv.format_text(a)
    assert "activations" not in text.split("remedies")[0], text


def test_a_fragmentation_oom_leads_with_the_setting_that_removes_it():
    a = _advise(DATA / "gpt2_oom.pickle")
    assert a.fragmentation
    assert a.remedies[0].remedy.startswith("allocator:")
    assert a.remedies[0].fits
    # the rest still follow by predicted peak
    rest = [
        r.predicted_peak_reserved_bytes for r in a.remedies if not r.remedy.startswith("allocator:")
    ]
    assert rest == sorted(rest)


def test_what_was_reserved_before_the_recording_stays_in_every_prediction(long_trace_advice):
    """The 1M trace wraps: most of its peak was reserved before the recording.  The
    simulated remedies keep those segments, so the estimated ones do too, and a remedy
    that saves nothing is not offered."""
    case = prepare(load_snapshot(DATA / "transformer_long_python_1000k.pickle.xz"))
    floor = int(case.requests.initial.seg_size.sum())
    assert floor > 0
    a = long_trace_advice
    for r in a.remedies:
        assert r.saving_bytes > 0, r.title
        assert r.predicted_peak_reserved_bytes >= floor, r.title
    assert any("before the recording started" in t for t in a.notes)


def test_the_limit_hint_is_the_cli_s_not_the_model_s(long_trace_advice):
    a = long_trace_advice
    assert a.memory_limit_bytes is None
    assert "--memory-limit" not in a.verdict  # the GUI shows the verdict too
    assert "(give --memory-limit)" in adv.format_text(a)
    assert a.to_dict()["memory_limit_known"] is False


@shared_data.MARK
def test_a_single_iteration_keeps_nothing_across_iterations():
    path = EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"
    a = _advise(shared_data.require(path), 1)
    assert "free_kept" not in [r.remedy for r in a.remedies]
    cats = a.split_at_peak["categories"]
    assert max(cats, key=cats.__getitem__) == "temporary"
    assert a.moment == "at the OOM"


def test_kept_every_iteration_is_still_offered_where_it_happened():
    """gpt2_leak keeps its outputs every iteration (the program says so): offered."""
    a = _advise(DATA / "truth" / "gpt2_leak.pickle.xz")
    kept = [r for r in a.remedies if r.remedy == "free_kept"]
    assert kept and kept[0].saving_bytes > 0
    assert np.all([r.saving_bytes > 0 for r in a.remedies])


@pytest.mark.parametrize(
    "name,offered",
    [
        ("truth/gpt2_adamw_fp32.pickle.xz", True),
        ("truth/resnet_sgd_fp32.pickle.xz", True),
        ("truth/gpt2_adamw_bf16.pickle.xz", False),
        ("truth/pair_resnet_bf16.pickle.xz", False),
        ("resnet50_train.pickle", False),
    ],
)
def test_mixed_precision_is_offered_exactly_on_fp32_runs(name, offered):
    """Under autocast the forward makes half-size copies of the weights; an fp32 run does
    not (the programs say which they ran: their truth files / workload names)."""
    ids = [r.remedy for r in _advise(DATA / name).remedies]
    assert ("bf16_autocast" in ids) == offered, ids


def test_model_state_is_the_parameters_gradients_and_optimizer_state_the_header_shows():
    """A program whose peak holds weight-gradient temporaries of a weight's size (the zoo's
    GPT-2 at batch 1): they are other fixed, not model state."""
    got = _split(DATA / "zoo" / "pair_set_to_none_b1_dec_gpt2_sdpa_adamw_fp32_before.pickle.xz")
    assert got is not None
    split = got[-1]
    cats = split["categories"]
    state = cats["parameter"] + cats["gradient"] + cats["optimizer_state"]
    assert split["model_state"] == state
    assert split["other_fixed"] > 0
