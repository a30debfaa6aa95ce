"""advise's prediction for each remedy held to the real run with the change made
(tests/workloads/truth/record_all.py PAIRS: the same program before and after one
change, recorded with its memory_stats): a simulated prediction within 5 % of the
real peak reserved; an estimate labelled so, with a range of non-zero width that
holds its own point and the real peak."""

from __future__ import annotations

import functools

import pytest

from tests.model.test_aligned_diff import ADVISED, PAIRS, TRUTH, _pairs, _stats
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies.advise import advise, format_peak
from vramscope.viewer.model.reports import aligned
from vramscope.viewer.model.whatif.predictions import prepare

TOLERANCE = 0.05


def _real_peak(name: str) -> int:
    return _stats(name)["reserved_bytes.all.peak"]


@functools.lru_cache(maxsize=None)
def _snap(name: str):
    return load_snapshot(TRUTH / f"{name}.pickle.xz")


@functools.lru_cache(maxsize=None)
def _advice(name: str):
    return advise(prepare(_snap(name)))


def test_every_remedy_of_the_catalogue_has_pairs():
    # Pairs for each remedy held here: a floor, so that a lost recording fails.
    assert len(PAIRS) == len(_pairs()) >= 12
    changes = {ADVISED.get(c, c) for _, _, c, _ in PAIRS}
    assert {
        "free_kept",
        "smaller_batch",
        "gradient_checkpointing",
        "bf16_autocast",
        "no_grad_forward",
        "8bit_optimizer",
    } <= changes
    assert any(c.startswith("allocator:") for c in changes)


@pytest.mark.parametrize("a,b,change,line_key", PAIRS, ids=[p[1] for p in PAIRS])
def test_the_prediction_holds_the_real_run(a, b, change, line_key):
    change = ADVISED.get(change, change)
    real = _real_peak(b)
    got = aligned.prediction_error(_snap(a), real, change)
    assert got is not None, f"advise offers no {change} on {a}"
    pred, rng = got["predicted_peak_reserved_bytes"], got["predicted_range"]
    if got["method"] == "simulated":
        assert abs(pred / real - 1) <= TOLERANCE, (change, pred, real, rng)
    else:
        assert got["method"] == "estimated"
        assert rng is not None, f"the estimate of {change} has no range"
    if rng is not None:
        lo, hi = rng
        assert lo < hi, f"a range of zero width: {rng}"
        assert lo <= pred <= hi, (pred, rng)
        assert lo <= real <= hi, (change, real, rng)
        assert got["real_inside_range"] is True


@pytest.mark.parametrize("name", sorted({p[0] for p in PAIRS}))
def test_json_text_and_label_say_the_same(name):
    """Each remedy's JSON carries its method and range, an estimate is labelled one
    everywhere (is_estimate, the JSON flag, the text) and its range holds its point."""
    adv = _advice(name)
    assert adv.remedies
    for r, d in zip(adv.remedies, adv.to_dict()["remedies"]):
        assert {"method", "predicted_peak_reserved_range", "predicted_peak_is_estimate"} <= set(d)
        assert d["method"] == r.method in ("simulated", "estimated")
        assert d["predicted_peak_is_estimate"] == r.is_estimate
        rng = r.predicted_peak_reserved_range
        if r.method == "estimated":
            assert r.is_estimate
        if rng is not None:
            assert r.is_estimate and list(rng) == d["predicted_peak_reserved_range"]
            assert rng[0] < rng[1] and rng[0] <= r.predicted_peak_reserved_bytes <= rng[1]
        assert ("estimate" in format_peak(r)) == r.is_estimate
