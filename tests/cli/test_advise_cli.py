"""`vramscope advise` and `vramscope whatif --batch-scale` in real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

from tests.conftest import DATA
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import batch_scale, scaling
from vramscope.viewer.model.whatif import prepare

RESNET = DATA / "resnet50_train.pickle"  # batch 32, no OOM; peak reserved 1.94 GiB
GPT2_OOM = DATA / "gpt2_oom.pickle"  # ran out of memory under 10.49 GiB
KEYS = {"remedy", "predicted_peak_reserved_bytes", "saving_bytes", "method", "change", "where"}


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_advise_json_ranks_remedies_and_names_the_largest_batch():
    limit = 3 * 1024**3
    out = vramscope("advise", str(RESNET), "--batch", "32", "--memory-limit", str(limit), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    rem = got["remedies"]
    assert rem and all(KEYS <= set(r) for r in rem)
    peaks = [r["predicted_peak_reserved_bytes"] for r in rem]
    assert peaks == sorted(peaks)
    assert {r["method"] for r in rem} == {"simulated", "estimated"}
    for r in rem:  # (a run that fits: what it needs is what it recorded)
        assert (
            r["saving_bytes"]
            == got["needed_peak_reserved_bytes"] - r["predicted_peak_reserved_bytes"]
        )
    assert got["needed_peak_reserved_bytes"] == got["recorded_peak_reserved_bytes"]
    assert any(r["remedy"].startswith("allocator:expandable_segments") for r in rem)
    # The largest batch is the safe side of the simulated runs: b fits; b + 1 does not, or
    # its prediction is so close to the limit that the answer says it may not.
    b = got["largest_batch_that_fits"]
    assert got["memory_limit_bytes"] == limit and 32 < b < 64
    assert abs(got["largest_scale_that_fits"] - b / 32) < 1e-9
    case = prepare(load_snapshot(str(RESNET), use_cache=False))
    j = scaling.judge(case, 32)
    assert batch_scale.scaled_case(case, j, Fraction(b, 32)).simulate(None, limit).first_oom is None
    assert got["next_batch"] == b + 1
    oom_next = (
        batch_scale.scaled_case(case, j, Fraction(b + 1, 32)).simulate(None, limit).first_oom
        is not None
    )
    assert oom_next or got["next_batch_may_fit"] is True
    margin = got["largest_batch_margin"]
    assert margin["bytes"] == limit - margin["predicted_peak_bytes"] > 0


def test_advise_text_on_an_oom():
    out = vramscope("advise", str(GPT2_OOM))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "verdict: out of memory at event 25902" in text
    # The point answer (0.992 of the batch) is within the model's error of the limit: the
    # answer steps down to a scale whose prediction has room, and says why.
    assert "largest batch scale that fits: 0.85" in text
    assert "within 5% of the 10.49 GiB limit: may not fit" in text
    assert " GiB" in text and " MiB" in text
    # A fragmentation OOM leads with the setting that removes the fragmentation.
    assert "fragmentation: " in text
    assert "remedies, the fragmentation's first, then by predicted peak reserved:" in text
    assert "  1. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert out.stderr == ""  # no progress noise when stderr is not a terminal


def test_advise_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "x.pickle"
    bad.write_bytes(b"not a pickle")
    out = vramscope("advise", str(bad))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "vramscope: error:" in out.stderr


def test_whatif_batch_scale_rows_and_judgement():
    out = vramscope(
        "whatif",
        str(RESNET),
        "--batch-scale",
        "0.5",
        "--batch-scale",
        "1.5",
        "--batch",
        "32",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["batch_scale"] for r in rows] == [0.5, 1.5]
    assert [r["batch"] for r in rows] == [16.0, 48.0]
    assert rows[0]["peak_reserved_bytes"] < 2084569088 < rows[1]["peak_reserved_bytes"]
    assert rows[0]["peak_reserved_vs_recorded"] < 0 < rows[1]["peak_reserved_vs_recorded"]
    # cuDNN workspaces are not per-sample sizes: the answer says how much it hangs on them.
    for r in rows:
        lo, hi = r["peak_reserved_sensitivity_bytes"]
        assert r["uncertain_allocations"] > 0 and lo <= r["peak_reserved_bytes"] <= hi and lo < hi
        # ... and labels the figure and its range as an estimate, never as exact.
        est = r["peak_reserved_estimate"]
        assert r["peak_reserved_is_estimate"] is True and est["estimate"] is True
        assert (est["low_bytes"], est["high_bytes"]) == (lo, hi)
        assert est["workspace_allocations"] == r["uncertain_allocations"]
    rules = {r["rule"]: r for r in rows[0]["scaling"]}
    assert rules["data_category"]["scales"] and not rules["state_category"]["scales"]
    assert all(r["reason"] and r["examples"] for r in rows[0]["scaling"])
    text = vramscope("whatif", str(RESNET), "--batch-scale", "0.5", "--batch", "32")
    assert text.returncode == 0
    assert "batch x0.5 (16) (estimate)" in text.stdout
    # The row is the recorded allocator settings with another batch, not the recorded run.
    assert "(16) (estimate) (recorded settings)" in text.stdout
    assert "(= recorded)" not in text.stdout
    assert "estimate " in text.stdout and "library workspaces" in text.stdout
    assert "how each allocation was judged to scale with the batch" in text.stdout


def test_whatif_batch_scale_rejects_nonsense():
    out = vramscope("whatif", str(RESNET), "--batch-scale", "0")
    assert out.returncode == 2 and "not a positive number" in out.stderr


def test_whatif_batch_scale_without_workspaces_is_not_an_estimate():
    """GPT-2's recording has no cuDNN-like workspace: its figure is not labelled an
    estimate (and it is exact against the real run, tests/model/test_remedies_truth.py)."""
    path = DATA / "truth" / "sweep_gpt2_b08.pickle.xz"
    out = vramscope("whatif", str(path), "--batch-scale", "0.5", "--batch", "8", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["peak_reserved_is_estimate"] is False and row["peak_reserved_estimate"] is None
    text = vramscope("whatif", str(path), "--batch-scale", "0.5", "--batch", "8")
    assert "batch x0.5 (4)" in text.stdout and "estimate" not in text.stdout


def test_advise_json_gives_the_range_of_an_estimated_batch_prediction():
    """ResNet's cuDNN workspaces make a batch prediction an estimate: advise --json gives
    its range (the model's own estimate_range, the prediction inside it); what is simulated
    exactly has none, and the estimated remedies say they are estimates."""
    path = DATA / "truth" / "sweep_resnet_b64.pickle.xz"
    limit = int(1.4 * 1024**3)
    out = vramscope("advise", str(path), "--batch", "64", "--memory-limit", str(limit), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    by_id = {r["remedy"]: r for r in got["remedies"]}
    batch = by_id["smaller_batch"]
    lo, hi = batch["predicted_peak_reserved_range"]
    assert lo <= batch["predicted_peak_reserved_bytes"] <= hi and lo < hi
    assert batch["method"] == "simulated" and batch["predicted_peak_is_estimate"] is True
    b = got["largest_batch_that_fits"]
    case = prepare(load_snapshot(str(path), use_cache=False))
    j = scaling.judge(case, 64)
    est = batch_scale.estimate_range(case, j, Fraction(b, 64), None, limit)
    assert (est.low, est.high) == (lo, hi)
    for r in got["remedies"]:
        assert "predicted_peak_reserved_range" in r and KEYS <= set(r)
        if r["method"] == "estimated":
            assert r["predicted_peak_is_estimate"] is True
        elif r["remedy"] != "smaller_batch":
            assert r["predicted_peak_reserved_range"] is None
            assert r["predicted_peak_is_estimate"] is False
    text = vramscope("advise", str(path), "--batch", "64", "--memory-limit", str(limit))
    from vramscope.viewer.model.core.units import format_bytes as fb

    assert f"(estimate, {fb(lo)} - {fb(hi)})" in text.stdout


def test_advise_json_batch_prediction_label_follows_the_one_rule():
    """GPT-2's recording has four odd-sized transients judged library workspaces: its batch
    prediction is an estimate (as whatif labels it).  Every size drawn for them gives the
    same peak, yet the estimate still carries a range of non-zero width (the model's
    measured error around the point), and it holds the real run at batch 12."""
    out = vramscope(
        "advise", str(DATA / "truth" / "limit_sweep_gpt2_oom.pickle.xz"), "--batch", "13", "--json"
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    batch = next(r for r in got["remedies"] if r["remedy"] == "smaller_batch")
    lo, hi = batch["predicted_peak_reserved_range"]
    real = json.loads((DATA / "truth" / "limit_sweep_gpt2_fit.json").read_text())
    assert lo < batch["predicted_peak_reserved_bytes"] < hi
    assert lo <= real["memory_stats"]["reserved_bytes.all.peak"] <= hi
    case = prepare(load_snapshot(str(DATA / "truth" / "limit_sweep_gpt2_oom.pickle.xz")))
    j = scaling.judge(case, 13)
    assert batch["predicted_peak_is_estimate"] is batch_scale.is_estimate(j, Fraction(12, 13))
    assert batch["predicted_peak_is_estimate"] is got["largest_batch_is_estimate"]
    assert got["largest_batch_that_fits"] == 12  # as the fresh-process probes found


def test_the_checkpointing_estimate_range_holds_the_real_checkpointed_run():
    """GPT-2 at batch 13 ran out of memory under 2 GiB; the same program with gradient
    checkpointing (ckpt_gpt2_b13, a real run) peaked at its sidecar's reserved peak,
    inside the range advise gives for checkpointing (half to two thirds of the
    activations live at the OOM, the category summary names), whose upper end is the
    point figure."""
    truth = json.loads((DATA / "truth" / "ckpt_gpt2_b13.json").read_text())
    real = truth["memory_stats"]["reserved_bytes.all.peak"]
    out = vramscope(
        "advise", str(DATA / "truth" / "limit_sweep_gpt2_oom.pickle.xz"), "--batch", "13", "--json"
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    ckpt = next(r for r in got["remedies"] if r["remedy"] == "gradient_checkpointing")
    lo, hi = ckpt["predicted_peak_reserved_range"]
    assert lo < real < hi == ckpt["predicted_peak_reserved_bytes"]
    act = got["split_at_peak"]["activations"]
    assert act == got["split_at_peak"]["categories"]["activation"]
    peak = got["needed_peak_reserved_bytes"]  # (estimates count from what the run needs)
    assert (lo, hi) == (peak - act * 2 // 3, peak - act // 2)


def test_advise_under_a_limit_below_the_recorded_peak_says_it_does_not_fit():
    # resnet50_train fits its own GPU (peak reserved 1.94 GiB); under 1 GiB it would not.
    out = vramscope("advise", str(RESNET), "--batch", "32", "--memory-limit", "1GiB")
    assert out.returncode == 0, out.stderr
    verdict = next(line for line in out.stdout.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith(
        "verdict: does not fit: peak reserved 1.94 GiB is above the limit 1.00 GiB"
    ), verdict
