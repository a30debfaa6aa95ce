"""Every batch estimate carries a range of non-zero width, and every answer gives the same one.

The draws of the doubtful allocations (library workspaces, autotuning, size-judged ones)
may leave the peak where it is: ViT's few small workspaces do, from batch 16 to 8.  The
rest of the prediction is the recorded requests resized and re-simulated, which the judge
holds to the batch model's measured error; the estimate's range takes that in, so it is
never one value, and the whatif JSON, its text and advise's judge say the same range.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import pytest

from tests.workloads import batch_prediction_table as table
from vramscope.viewer.model.core.units import format_bytes as fb
from vramscope.viewer.model.remedies import batch_scale

SWEEPS = table.sweeps()
# (family, from, to): ViT's draws all give one peak at half of batch 16; ResNet-18's
# cuDNN workspaces already spread them, which the range must keep.
PAIRS = [("vit", 16, 8), ("vit", 32, 16), ("resnet", 32, 16)]


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_sweeps_are_here():
    """A missing recording fails here rather than thinning the pairs below."""
    for fam, b0, b1 in PAIRS:
        assert {b0, b1} <= set(SWEEPS.get(fam, {})), (fam, b0, b1)


@pytest.mark.parametrize("fam,b0,b1", PAIRS, ids=lambda v: str(v))
def test_an_estimate_has_a_range_of_nonzero_width_that_holds_the_real_run(fam, b0, b1):
    p = table.prediction_of(SWEEPS[fam][b0], b1)
    real = table.real_peak_reserved(SWEEPS[fam][b1])
    assert p.is_estimate and p.estimate is not None
    e = p.estimate
    assert e.low < p.peak < e.high, (e.low, p.peak, e.high)
    # Never narrower than the draws, nor than the error the judge holds an estimate to.
    assert e.low <= e.drawn_low and e.high >= e.drawn_high
    assert (e.low, e.high) == (p.low, p.high)
    assert e.low <= real <= e.high, (e.low, real, e.high)


def test_whatif_json_and_text_give_the_judges_range():
    """The JSON's range, its words and the prediction advise judges by are one range."""
    path = SWEEPS["vit"][16]
    out = vramscope("whatif", str(path), "--batch-scale", "0.5", "--batch", "16", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    lo, hi = row["peak_reserved_sensitivity_bytes"]
    case, j, _ = table.case_of(path)
    p = batch_scale.predict(case, j, Fraction(1, 2), recorded_batch=16)
    assert (lo, hi) == (p.low, p.high) and lo < row["peak_reserved_bytes"] < hi
    est = row["peak_reserved_estimate"]
    assert (est["low_bytes"], est["high_bytes"]) == (lo, hi)
    assert est["drawn_low_bytes"] >= lo and est["drawn_high_bytes"] <= hi
    assert "measured error" in est["why_range"]
    text = vramscope("whatif", str(path), "--batch-scale", "0.5", "--batch", "16")
    assert text.returncode == 0, text.stderr
    assert f"{fb(lo)} - {fb(hi)}" in text.stdout
