"""The largest batch near a limit, and one exactness label for a batch prediction.

* the largest batch that fits says how far under the limit its prediction is and errs on
  the safe side where the prediction's uncertainty reaches the limit (its workspace
  range, never narrower than the model's measured error,
  :data:`~vramscope.viewer.model.remedies.batch_scale.POINT_ERROR`, whose bounds the
  truth recordings give here);
* ``whatif --batch-scale``, ``advise`` and the GUI (``format_peak``) label the same
  prediction the same way (:func:`~vramscope.viewer.model.remedies.batch_scale.is_estimate`);
* a range whose ends read the same is one value, labelled.

Truth: tests/data/truth (sweeps at several batches, the GPT-2 limit recordings and the
fresh-process probes of which batch fits 2 GiB).
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from tests.model.test_remedies_truth import KNOWN_MISSES, PAIRS, SWEEPS
from tests.workloads import batch_prediction_table as table
from vramscope.viewer.model.core.units import format_bytes as fb
from vramscope.viewer.model.remedies import batch_scale
from vramscope.viewer.model.remedies.advise import Remedy, advise, format_peak, format_text

TRUTH = Path(__file__).resolve().parents[1] / "data" / "truth"


def _probes() -> tuple[int, dict[int, dict]]:
    """(limit, batch -> probe) of the fresh-process GPT-2 probes under 2 GiB (fp32)."""
    out = {}
    for p in sorted(TRUTH.glob("probe_limitprobe_gpt2_b*.result.json")):
        d = json.loads(p.read_text())
        if p.name.endswith(f"b{d['batch_size']}.result.json"):  # not the autocast probe
            out[int(d["batch_size"])] = d
    limits = {int(d["memory_limit_bytes"]) for d in out.values()}
    assert len(out) >= 4 and len(limits) == 1, out
    return limits.pop(), out


# -- the margin: what the truth recordings support ------------------------------------


def test_the_point_error_is_what_the_truth_pairs_and_probes_support():
    """POINT_ERROR's lower bound: the largest miss of the point prediction over the pairs
    the model is held to (half and 1.5x the recorded batch; the documented algorithm
    switches excepted: their ranges hold the real run).  Its upper bound: the margin must
    not cost the probes' real answer (the largest batch that fit in a fresh process
    keeps its predicted peak plus the margin under the limit)."""
    misses = []
    for fam, src, dst in PAIRS:
        if (fam, src, dst) in KNOWN_MISSES:
            continue
        pred = table.predict_peak(SWEEPS[fam][src], dst)
        real = table.real_peak_reserved(SWEEPS[fam][dst])
        misses.append((abs(pred / real - 1), fam, src, dst))
    worst = max(misses)
    assert worst[0] > 0.02, worst  # the model does miss by a few % (ResNet-18 32 -> 48)
    assert worst[0] <= batch_scale.POINT_ERROR, worst
    limit, probes = _probes()
    fit = max(b for b, d in probes.items() if d["fits"])
    room = limit / int(probes[fit]["peak_reserved"]) - 1
    assert batch_scale.POINT_ERROR < room, (fit, room)
    # Both bounds are a few %: the constant is between them.
    assert worst[0] <= batch_scale.POINT_ERROR < room


@pytest.mark.slow
def test_every_truth_pair_lies_in_its_predictions_uncertainty():
    """The uncertainty advise uses near a limit (range or point, never narrower than the
    measured error) holds the real peak of every sweep pair."""
    out = []
    for fam, by in sorted(SWEEPS.items()):
        for b0, src in sorted(by.items()):
            case, j, _ = table.case_of(src)
            for b1, dst in sorted(by.items()):
                if b1 == b0:
                    continue
                p = batch_scale.predict(case, j, Fraction(b1, b0), None, None, b0)
                real = table.real_peak_reserved(dst)
                if not p.low <= real <= p.high:
                    out.append((fam, b0, b1, p.low, real, p.high))
    assert not out, out


# -- the largest batch on the GPT-2 limit recordings ----------------------------------


@pytest.mark.parametrize("name", ["limit_sweep_gpt2_fit", "limit_sweep_gpt2_oom"])
def test_the_largest_batch_on_the_limit_recordings_is_right_and_says_its_margin(name):
    limit, probes = _probes()
    real = max(b for b, d in probes.items() if d["fits"])
    assert not probes[real + 1]["fits"]
    path = table.find(name)
    case, _, truth = table.case_of(path)
    a = advise(case, int(truth["batch_size"]), limit)
    assert a.largest_batch_that_fits == real == 12
    got = a.to_dict()
    margin = got["largest_batch_margin"]
    # The prediction is the fresh-process probe's peak; the margin is what is left of the
    # limit, in bytes and as a fraction.
    peak = int(probes[real]["peak_reserved"])
    assert margin["predicted_peak_bytes"] == peak
    assert margin["bytes"] == limit - peak and margin["fraction"] == pytest.approx(
        (limit - peak) / limit
    )
    # The batch after it: predicted over the limit (the probe ran out of memory), close
    # enough that it may fit within the model's error.
    assert got["next_batch"] == real + 1 and got["next_batch_predicted_to_fit"] is False
    assert got["next_batch_predicted_peak_bytes"] > limit
    assert got["largest_batch_below_the_point_answer"] is False
    text = format_text(a)
    line = next(x for x in text.splitlines() if x.startswith("largest batch that fits: 12"))
    assert f"predicted {fb(peak)}, {(limit - peak) / limit:.1%} under the {fb(limit)} limit" in line
    if int(truth["batch_size"]) == real + 1 and truth.get("oom"):
        # 13 is the recording itself, which ran out of memory: known, not predicted.
        assert got["next_batch_may_fit"] is False
        assert "13 ran out of memory in the recording" in line
    else:
        assert got["next_batch_may_fit"] is True
        assert f"13 is predicted at {fb(got['next_batch_predicted_peak_bytes'])}" in line
        assert "may fit" in line


@pytest.mark.parametrize("share", [0.2, 0.5, 0.99])
def test_a_limit_just_above_a_batchs_prediction_makes_it_may_not_fit(share):
    """GPT-2 from batch 8 (exact, no workspace): a limit placed just above batch 12's
    prediction (within the error an exact prediction is held to) makes 12 "may not fit";
    the answer is 11 and says why."""
    path = SWEEPS["gpt2"][8]
    case, j, _ = table.case_of(path)
    pred12 = batch_scale.predict(case, j, Fraction(12, 8), None, None, 8)
    p12 = pred12.peak
    assert not pred12.is_estimate and pred12.error == batch_scale.EXACT_ERROR
    limit = p12 + int(p12 * pred12.error * Fraction(share))
    a = advise(case, 8, limit)
    assert a.near_limit is not None and a.near_limit.search.batch == 12  # the point answer
    assert a.largest_batch_that_fits == 11
    got = a.to_dict()
    assert got["largest_batch_below_the_point_answer"] is True
    assert got["next_batch"] == 12 and got["next_batch_predicted_to_fit"] is True
    assert got["next_batch_may_fit"] is True
    assert got["next_batch_predicted_peak_bytes"] == p12
    assert (
        got["largest_batch_margin"]["bytes"]
        == limit - got["largest_batch_margin"]["predicted_peak_bytes"]
        > 0
    )
    line = next(x for x in format_text(a).splitlines() if x.startswith("largest batch"))
    assert line.startswith("largest batch that fits: 11 ")
    assert (
        f"12 is predicted at {fb(p12)}, within {float(pred12.error):.0%} of "
        f"the {fb(limit)} limit: may not fit"
    ) in line


def test_a_prediction_at_exactly_the_limit_is_not_the_answer():
    """As reported (batch 10 of a Llama run predicted at exactly its 7 GiB limit, 7.17 GiB
    real): a batch predicted at the limit itself is never the answer."""
    path = SWEEPS["gpt2"][8]
    case, j, _ = table.case_of(path)
    p12 = batch_scale.predict(case, j, Fraction(12, 8), None, None, 8).peak
    a = advise(case, 8, p12)
    assert a.near_limit.search.batch == 12 and a.largest_batch_that_fits < 12
    got = a.to_dict()
    assert got["next_batch_may_fit"] is True and got["next_batch_predicted_to_fit"] is True
    assert "may not fit" in format_text(a)


# -- one label for one prediction ------------------------------------------------------


def _whatif_row(path: Path, batch: int, scale: str) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramscope.viewer",
            "whatif",
            str(path),
            "--batch-scale",
            scale,
            "--batch",
            str(batch),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    return row


@pytest.mark.parametrize("family,batch", [("gpt2", 16), ("vit", 16), ("gpt2", 8)])
def test_the_half_batch_carries_one_label_in_whatif_advise_and_the_gui(family, batch):
    """GPT-2 at 16 and ViT at 16 have library workspaces whose every drawn size gives one
    peak at half the batch: whatif, advise (JSON and the table the GUI shows) and the
    model's rule give the same label; GPT-2 at 8 has none: exact everywhere."""
    path = SWEEPS[family][batch]
    case, j, _ = table.case_of(path)
    rule = batch_scale.is_estimate(j, Fraction(1, 2))
    row = _whatif_row(path, batch, "0.5")
    a = advise(case, batch)  # no limit given: the GPU's; the half batch is the remedy
    rem = next(r for r in a.remedies if r.remedy == "smaller_batch")
    assert rem.title == "Half the batch" and rem.batch_scale == 0.5
    assert row["peak_reserved_bytes"] == rem.predicted_peak_reserved_bytes
    assert row["peak_reserved_is_estimate"] is rule
    assert rem.to_dict()["predicted_peak_is_estimate"] is rule
    assert ("(estimate" in format_peak(rem)) is rule
    assert rule is (family != "gpt2" or batch == 16)


def test_a_prediction_more_than_2_percent_off_is_never_labelled_exact():
    """Over every sweep pair: where the point prediction misses the real peak by more
    than 2 %, the one rule (and the prediction advise makes) says "estimate"."""
    off = []
    for fam, by in sorted(SWEEPS.items()):
        for b0, src in sorted(by.items()):
            _case, j, _ = table.case_of(src)
            for b1, dst in sorted(by.items()):
                pred = table.predict_peak(src, b1)
                real = table.real_peak_reserved(dst)
                if abs(pred / real - 1) > 0.02:
                    off.append((fam, b0, b1))
                    assert batch_scale.is_estimate(j, Fraction(b1, b0)), (fam, b0, b1)
    assert len(off) >= 20, off  # the sweeps do hold such misses


# -- a range of zero width is one value ------------------------------------------------


def test_a_range_whose_ends_read_the_same_is_one_labelled_value():
    seven = 7 * 1024**3
    assert batch_scale.range_words(seven - 1000, seven) is None
    assert batch_scale.range_words(seven, seven) is None
    assert batch_scale.range_words(seven - 2**28, seven) == f"{fb(seven - 2**28)} - {fb(seven)}"
    rem = Remedy(
        "smaller_batch",
        "Smaller batch",
        seven,
        0,
        "simulated",
        "",
        None,
        True,
        predicted_peak_reserved_range=(seven - 1000, seven),
        batch_estimate=True,
    )
    assert format_peak(rem) == f"{fb(seven)} (estimate)"
    rem.predicted_peak_reserved_range = None
    assert format_peak(rem) == f"{fb(seven)} (estimate)"


def test_whatif_prints_a_range_of_zero_width_as_one_value():
    from vramscope.viewer.commands.whatif_batch import format_table
    from vramscope.viewer.model.whatif.predictions import Prediction

    path = SWEEPS["gpt2"][16]
    case, j, _ = table.case_of(path)
    f = Fraction(1, 2)
    res = batch_scale.scaled_case(case, j, f).simulate()
    p = Prediction(
        "batch x0.5 (8) (estimate)", case.recorded, case.limit, res, program_changed=True
    )
    peak = res.peak_reserved_until_oom
    est = {"low_bytes": peak - 4096, "high_bytes": peak, "workspace_allocations": 9}
    text = format_table(case, [p], [{"peak_reserved_estimate": est}])
    assert f"{fb(peak)} - {fb(peak)}" not in text
    assert f"estimate {fb(peak)} to {fb(peak)}" not in text
    assert f"every size tried gives the same peak to the figures shown, {fb(peak)}" in text


def test_the_recorded_batch_that_ran_out_of_memory_is_not_said_to_fit():
    """GPT-2 at batch 13 ran out of memory under 2 GiB in the recording: whatever the
    model's uncertainty, the next batch up from the answer (13) is known not to fit."""
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.remedies.advise import advise, format_text
    from vramscope.viewer.model.whatif.predictions import prepare

    path = Path(__file__).resolve().parents[1] / "data" / "truth" / "limit_sweep_gpt2_oom.pickle.xz"
    a = advise(prepare(load_snapshot(path)), 13)
    d = a.to_dict()
    assert d["largest_batch_that_fits"] == 12 and d["next_batch"] == 13
    assert d["next_batch_may_fit"] is False
    assert "13 ran out of memory in the recording" in format_text(a)


# -- two more limits, probed in fresh processes -----------------------------------------

PROBED = {"gpt2_3072": "gpt2", "vit_1536": "vit"}


@pytest.mark.parametrize("tag", sorted(PROBED))
def test_the_largest_batch_at_two_more_probed_limits(tag):
    """GPT-2 under 3 GiB (18 fits, 19 does not) and ViT-tiny under 1.5 GiB (45 fits with
    nothing to spare, 46 does not), probed in fresh processes: from the recording of the
    largest batch that fits the answer is that batch (what ran, no prediction); from the
    recording that ran out of memory and from the sweeps (recorded without a limit) it is
    never above the real answer, equal to it where the prediction is exact, and where it
    steps below, the line says the batch above it may not fit and why."""
    search = json.loads((TRUTH / f"limit_{tag}.search.json").read_text())
    real = int(search["largest_batch_that_fits"])
    limit = int(search["memory_limit_bytes"])
    probes = {int(p["batch_size"]): p for p in search["probes"]}
    assert probes[real]["fits"] and not probes[real + 1]["fits"]
    ran = 0
    for name in [f"limit_{tag}_fit", f"limit_{tag}_oom"] + [
        p.name.split(".pickle")[0] for p in SWEEPS[PROBED[tag]].values()
    ]:
        case, j, truth = table.case_of(table.find(name))
        b = int(truth["batch_size"])
        a = advise(case, b, limit)
        got = a.largest_batch_that_fits
        line = next(
            x for x in format_text(a).splitlines() if x.startswith("largest batch that fits")
        )
        ran += 1
        if name.endswith("_fit"):
            assert got == real and b == real, (name, got)
            assert a.near_limit.safe.error == 0
            continue
        assert got is not None and got <= real, (name, got, real)
        exact = not batch_scale.is_estimate(j, Fraction(real, b))
        if exact:
            assert got == real, (name, got, real)
        if got < real:
            assert f"{got + 1} is predicted at" in line and "may not fit" in line, line
    assert ran >= 5


def test_a_remedy_whose_range_holds_the_limit_may_fit():
    """GPT-2 at 13 under 2 GiB ran out of memory: a remedy predicted under the limit
    whose range reaches over it is "maybe" in the table (and in the JSON), not "yes"."""
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.whatif.predictions import prepare

    path = TRUTH / "limit_sweep_gpt2_oom.pickle.xz"
    a = advise(prepare(load_snapshot(path)), 13)
    lim = a.memory_limit_bytes
    seen = {"maybe": 0, "yes": 0}
    for r in a.remedies:
        rng = r.predicted_peak_reserved_range
        straddles = rng is not None and rng[0] <= lim < rng[1]
        assert r.range_holds_limit is straddles
        assert r.to_dict()["range_holds_limit"] is straddles
        want = "maybe" if straddles else ("yes" if r.fits else "no")
        assert r.fits_word == want
        seen[want] = seen.get(want, 0) + 1
        row = next(x for x in format_text(a).splitlines() if r.title in x)
        assert f"  {want}  " in row, row
    assert seen["maybe"] >= 1 and seen["yes"] >= 1, seen
