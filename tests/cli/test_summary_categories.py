"""`vramscope summary` in a real subprocess: what the memory is:
``categories_at_peak``, ``categories_at`` (``--at``), ``iterations``, ``leaks``."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from tests.conftest import DATA
from tests.synthetic_training import LEAK_LINE, MIB, training_run

CATEGORIES = [
    "parameter",
    "gradient",
    "optimizer_state",
    "activation",
    "temporary",
    "input",
    "kv_cache",
    "parameter_gathered",
    "communication",
    "unknown",
]


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("name", ["gpt2_oom", "resnet50_train", "whatif_default"])
def test_categories_at_peak_add_up_to_the_peak(name):
    out = vramscope("summary", str(DATA / f"{name}.pickle"), "--json", "--no-cache")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    split = s["categories_at_peak"]
    assert list(split) == CATEGORIES
    assert sum(split.values()) == s["peak_requested_bytes"]
    assert split["parameter"] > 0 and split["optimizer_state"] > 0
    assert s["leaks"] == []
    its = s["iterations"]
    assert its and all(
        {"start_event", "end_event", "peak_bytes", "peak_phase"} <= it.keys() for it in its
    )
    assert max(it["peak_bytes"] for it in its) == s["peak_requested_bytes"]
    assert all(a["end_event"] < b["start_event"] for a, b in itertools.pairwise(its))


def test_at_gives_the_split_at_that_event():
    path = str(DATA / "resnet50_train.pickle")
    out = vramscope("summary", path, "--json", "--no-cache", "--at", "3000")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert sum(s["categories_at"].values()) == s["requested_bytes"]  # the state after 3000
    assert s["categories_at"] != s["categories_at_peak"]
    text = vramscope("summary", path, "--no-cache", "--at", "3000").stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("after event 3,000: "))
    assert "= parameters" in line


def test_text_prints_the_split_and_iterations():
    out = vramscope("summary", str(DATA / "gpt2_oom.pickle"), "--no-cache")
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("at the peak:"))
    assert "parameters 474.70 MiB" in line and "optimizer state 949.40 MiB" in line
    assert "9 iterations" in out.stdout
    assert "leak" not in out.stdout


def test_a_leak_is_named_in_json_and_words(tmp_path):
    data, _ = training_run(iterations=8, layers=3, leak=True, leak_bytes=5 * MIB)
    path = tmp_path / "leaky.pickle"
    path.write_bytes(data)
    s = json.loads(vramscope("summary", str(path), "--json", "--no-cache").stdout)
    assert len(s["leaks"]) == 1
    lk = s["leaks"][0]
    assert lk["frame"] == f"train.py:{LEAK_LINE}" and lk["function"] == "main"
    assert lk["bytes_per_iteration"] == 5 * MIB
    assert lk["iterations"] == 8 and lk["live_bytes"] == 8 * 5 * MIB
    assert s["leaked_bytes_at_peak"] > 0
    text = vramscope("summary", str(path), "--no-cache").stdout
    assert "of it kept by the leak below" in text
    assert (
        f"leak: train.py:{LEAK_LINE} (main) keeps 5.00 MiB per iteration "
        f"(8 iterations, 40.00 MiB now)" in text
    )


def test_cuda_graphs_held_memory_beside_the_split():
    """reduce-overhead: at the recording's end the gradients the backward graph's replays
    write are named beside the split (JSON ``graph_held_at``, a line under the split), the
    split still the allocated bytes; the same words as the window's header."""
    from vramscope.viewer.model.categories.wording import held_words

    path = DATA / "zoo" / "cmp_ro_encoder_adamw_fp32_b8.pickle.xz"
    truth = json.loads(path.with_name("cmp_ro_encoder_adamw_fp32_b8.truth.json").read_text())
    out = vramscope("summary", str(path), "--json", "--no-cache", "--at", "5015")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert sum(s["categories_at"].values()) == s["requested_bytes"]
    assert s["categories_at"]["gradient"] == 0
    held = s["graph_held_at"]
    real = truth["gradients"]["bytes"]
    assert list(held) == ["gradient"] and abs(held["gradient"] - real) <= 0.02 * real
    assert s["graph_held_at_peak"] == {}  # the peak is inside the recording iteration
    text = vramscope("summary", str(path), "--no-cache", "--at", "5015").stdout
    assert f"  + after event 5,015: {held_words(held)}" in text.splitlines()
