"""Before and after on one time axis, against real pairs: the same program recorded
before and after one change a user makes (tests/workloads/truth/record_all.py PAIRS,
recorded on the GPU machine with their memory_stats)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports import aligned

ROOT = Path(__file__).resolve().parents[2]
TRUTH = ROOT / "tests" / "data" / "truth"
DATA = ROOT / "tests" / "data"


def _pairs():
    spec = importlib.util.spec_from_file_location(
        "record_all", ROOT / "tests" / "workloads" / "truth" / "record_all.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.PAIRS


PAIRS = [
    p
    for p in _pairs()
    if (TRUTH / f"{p[0]}.pickle.xz").exists() and (TRUTH / f"{p[1]}.pickle.xz").exists()
]


def _stats(name: str) -> dict:
    return json.loads((TRUTH / f"{name}.json").read_text())["memory_stats"]


def _align(a: str, b: str):
    sa, sb = load_snapshot(TRUTH / f"{a}.pickle.xz"), load_snapshot(TRUTH / f"{b}.pickle.xz")
    return sa, sb, aligned.align(sa, sb, build_timeline(sa), build_timeline(sb))


def test_every_pair_is_here():
    assert len(PAIRS) == len(_pairs()) >= 8


@pytest.mark.parametrize("a,b,change,line_key", PAIRS, ids=[p[1] for p in PAIRS])
def test_the_peak_delta_is_the_counters_and_the_changed_line_leads(a, b, change, line_key):
    _sa, _sb, al = _align(a, b)
    assert al is not None and al.by == "iteration"
    # Each span's figures are absolute: B's overall peak is the highest span peak.
    want = _stats(b)["reserved_bytes.all.peak"] - _stats(a)["reserved_bytes.all.peak"]
    got = max(s.b.peak_reserved for s in al.spans if s.b) - max(
        s.a.peak_reserved for s in al.spans if s.a
    )
    assert got == want
    assert al.b_peak_reserved == _stats(b)["reserved_bytes.all.peak"]
    top = al.sites[0]
    if line_key is not None:  # the change touched one line: it leads, and is gone
        line = json.loads((TRUTH / f"{a}.truth.json").read_text())["code_lines"][line_key]
        assert (Path(top.filename).name, top.line) == (Path(line["file"]).name, line["line"])
        assert top.status == "gone" and top.delta < 0
        return
    cats_a, cats_b = al.categories_at_peak
    d_act = cats_b.get("activation", 0) - cats_a.get("activation", 0)
    if change.startswith("allocator:"):
        # The same program under another setting: the same bytes at the same lines.
        assert abs(top.delta) <= 0.01 * max(top.a_bytes, top.b_bytes, 1)
        return
    if change == "8bit_optimizer":
        # Another optimizer: its state at the peak fell, at the line that made the
        # optimizer, and nothing else moved.
        d_opt = cats_b.get("optimizer_state", 0) - cats_a.get("optimizer_state", 0)
        assert d_opt < 0 and d_act == 0
        assert top.delta < 0 and abs(top.delta) >= 0.5 * abs(d_opt), (top, d_opt)
        assert "/site-packages/" not in top.filename
        return
    # The change acted on the activations: the leading site carries most of it.
    assert d_act < 0
    assert top.delta < 0 and abs(top.delta) >= 0.5 * abs(d_act), (top, d_act)
    assert "/site-packages/" not in top.filename  # the program's own line


# advise's names for the changes (a batch size is not in a file: the CLI test names it).
ADVISED = {"no_grad": "free_kept", "leak removed": "free_kept"}
PREDICTED = [p for p in PAIRS if p[2] != "smaller_batch"]


@pytest.mark.parametrize("a,b,change,line_key", PREDICTED, ids=[p[1] for p in PREDICTED])
def test_advise_s_prediction_is_held_against_the_real_run(a, b, change, line_key):
    sa, _sb, al = _align(a, b)
    change = ADVISED.get(change, change)
    if al.detected_change is not None:
        assert al.detected_change == change
    got = aligned.prediction_error(sa, al.b_peak_reserved, change)
    assert got is not None, f"advise offers no {change} on {a}"
    assert got["real_peak_reserved_bytes"] == _stats(b)["reserved_bytes.all.peak"]
    assert (
        got["error_bytes"] == got["predicted_peak_reserved_bytes"] - got["real_peak_reserved_bytes"]
    )
    if change.startswith("allocator:"):
        assert got["method"] == "simulated" and abs(got["error_fraction"]) <= 0.05
    if got["predicted_range"] is not None:
        lo, hi = got["predicted_range"]
        assert got["real_inside_range"] == (lo <= got["real_peak_reserved_bytes"] <= hi)


def test_settings_checkpointing_and_a_leak_are_read_from_the_files():
    seen = {}
    for a, b, _change, _ in PAIRS:
        _, _, al = _align(a, b)
        seen[b] = al.detected_change
    assert seen["pair_gpt2_expandable"] == "allocator:expandable_segments:True"
    assert seen["pair_gpt2_ckpt"] == "gradient_checkpointing"
    assert seen["vit_checkpoint_adamw_bf16"] == "gradient_checkpointing"
    assert seen["pair_gpt2_noleak"] == "free_kept"
    assert seen["pair_gpt2_b2"] is None  # a batch size is not in the file


def test_memory_live_at_an_iteration_s_start_counts():
    """No baseline dropped: every span's peak is at least what was live when it began."""
    _, _, al = _align("gpt2_leak", "pair_gpt2_noleak")
    sa = load_snapshot(TRUTH / "gpt2_leak.pickle.xz")
    req = np.asarray(build_timeline(sa).replay(al.devices[0]).requested)
    for s in al.spans:
        assert s.a.peak_requested >= req[s.a.start]
    # the leak grows iteration by iteration on A only
    deltas = [s.delta("peak_requested") for s in al.spans]
    assert deltas[-1] < deltas[1] < 0


def test_without_iterations_the_sides_align_by_relative_time():
    sa = load_snapshot(DATA / "fragmentation_oom.pickle")
    sb = load_snapshot(DATA / "capacity_oom.pickle")
    al = aligned.align(sa, sb, build_timeline(sa), build_timeline(sb))
    assert al.by == "relative time"
    assert len(al.spans) == aligned.RELATIVE_SPANS
    assert al.spans[0].label == "0-10 %" and al.spans[-1].label == "90-100 %"
    assert any("relative time" in n for n in al.notes)


def test_moved_lines_are_matched_by_the_shift_that_explains_most():
    f, fn = "pkg/train.py", "run"
    a = [(f, 234, fn), (f, 236, fn), (f, 239, fn)]  # 239: the line the edit removed
    b = [(f, 235, fn), (f, 237, fn)]
    moved = aligned._moved_lines(a, b)
    assert moved == {(f, 234, fn): (f, 235, fn), (f, 236, fn): (f, 237, fn)}
    # another function's lines are never paired with these
    assert aligned._moved_lines([(f, 10, "other")], b) == {}
    # paths under other roots are one site
    assert aligned.site_key("/home/u/proj/pkg/train.py", 3, fn) == aligned.site_key(
        "/srv/ci/pkg/train.py", 3, fn
    )


def test_diff_cli_keeps_its_output_and_adds_the_aligned_part():
    a, b = TRUTH / "gpt2_adamw_fp32.pickle.xz", TRUTH / "pair_gpt2_expandable.pickle.xz"
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "diff", str(a), str(b), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    for key in ("delta_peak_reserved_bytes", "top_stacks", "counters"):  # as before
        assert key in got
    assert (
        got["delta_peak_reserved_bytes"]
        == _stats("pair_gpt2_expandable")["reserved_bytes.all.peak"]
        - _stats("gpt2_adamw_fp32")["reserved_bytes.all.peak"]
    )
    assert got["aligned_by"] == "iteration" and len(got["iterations"]) == 6
    assert set(got["categories_at_peak"]) == {"a", "b"}
    assert got["sites"] and {"frame", "a_bytes", "b_bytes", "delta"} <= set(got["sites"][0])
    pe = got["prediction_error"]
    assert pe["change"] == "allocator:expandable_segments:True"
    text = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "diff", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "aligned by iteration" in text and "advise predicted allocator:" in text


def test_diff_cli_names_a_change_the_files_cannot_show():
    a, b = TRUTH / "gpt2_adamw_fp32.pickle.xz", TRUTH / "pair_gpt2_b2.pickle.xz"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramscope.viewer",
            "diff",
            str(a),
            str(b),
            "--json",
            "--change",
            "smaller_batch",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    pe = json.loads(out.stdout)["prediction_error"]
    assert pe["change"] == "smaller_batch" and pe["method"] == "simulated"
    # advise halves the batch with no limit to fit: this pair is exactly half the batch.
    assert abs(pe["error_fraction"]) <= 0.05, pe
