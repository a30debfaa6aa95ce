"""The batch-scaled case: its base case with other requested sizes, nothing else changed.

A :class:`~vramscope.viewer.model.remedies.batch_scale.ScaledCase` is built by its own
constructor from the base case's fields; an attribute the base case carries that the
constructor forgot (the recorded window, the limit's source, ...) would change what the
scaled simulation or its report says, so every one is compared with the base's.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import batch_scale, evidence, scaling
from vramscope.viewer.model.whatif import prepare

WRAPPED = DATA / "truth" / "ring_wrap.pickle.xz"  # a wrapped trace: it has a recorded window
RESNET = DATA / "resnet50_train.pickle"  # batch 32


@pytest.mark.parametrize("path,batch", [(WRAPPED, None), (RESNET, 32)], ids=["wrapped", "resnet"])
def test_a_scaled_case_is_its_base_with_other_sizes(path, batch):
    case = prepare(load_snapshot(str(path), use_cache=False))
    j = scaling.judge(case, batch, evidence.gather(case))
    sizes = j.scaled_sizes(Fraction(1, 2)) + 512
    scaled = batch_scale.ScaledCase(case, sizes, Fraction(1, 2), j)
    assert type(scaled) is batch_scale.ScaledCase
    assert (scaled.base, scaled.scale, scaled.judgement) == (case, Fraction(1, 2), j)
    assert scaled.requests.size.dtype == np.int64
    assert scaled.requests.size.tolist() == sizes.tolist()
    # Every other column of the request stream is the base's own.
    for name in vars(case.requests):
        if name != "size":
            assert getattr(scaled.requests, name) is getattr(case.requests, name), name
    # Every attribute of the base case but its requests and its cached run is carried over.
    own = {"base", "scale", "judgement", "requests", "_recorded_run"}
    assert set(vars(case)) - own <= set(vars(scaled))
    for name in set(vars(case)) - own:
        assert getattr(scaled, name) is getattr(case, name), name
    assert scaled._recorded_run is None  # the scaled stream is simulated on its own
    assert scaled.recorded_peak == case.recorded_peak  # "vs recorded" keeps the recording's
    if path == WRAPPED:
        assert case.window is not None and case.window.started_late


def test_scaled_case_builds_the_same_case_at_its_scale():
    case = prepare(load_snapshot(str(RESNET), use_cache=False))
    j = scaling.judge(case, 32, evidence.gather(case))
    by_scale = batch_scale.scaled_case(case, j, 0.75)
    by_sizes = batch_scale.ScaledCase(case, j.scaled_sizes(Fraction(3, 4)), Fraction(3, 4), j)
    assert by_scale.scale == Fraction(3, 4)
    assert by_scale.requests.size.tolist() == by_sizes.requests.size.tolist()
    a, b = by_scale.simulate(), by_sizes.simulate()
    assert a.peak_reserved == b.peak_reserved != case.recorded_run().peak_reserved


def test_model_state_made_after_the_build_keeps_its_size_at_another_batch():
    """Llama in bf16 with its last layer and head cast to fp32 after it was built, before
    the first forward: those weights have their gradients' sizes and keep them at half
    the batch (they had been scaled as tensors kept every iteration: 5.9 % low).  The run
    at batch 4 predicted from batch 8 is the real one's peak within 2 %."""
    import json

    zoo = DATA / "zoo"
    case = prepare(load_snapshot(str(zoo / "dec_llama_partial_bf16base_b8.pickle.xz")))
    evd = evidence.gather(case)
    j = scaling.judge(case, 8, evd)
    made_first = scaling._before_first_forward(case.requests, evd)
    params = made_first & evd.category_in("parameter")
    assert params.sum() >= 12  # the fp32 copies: 12 of them
    assert not j.scales[params].any()
    real = json.loads((zoo / "dec_llama_partial_bf16base_b4.truth.json").read_text())
    got = batch_scale.scaled_case(case, j, Fraction(1, 2)).simulate().peak_reserved
    assert abs(got - real["peak_reserved_bytes"]) <= 0.02 * real["peak_reserved_bytes"]


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(2, 1)], ids=["half", "double"])
def test_a_predictions_run_is_the_run_of_its_scaled_stream(scale):
    """The smaller batch's remedy reads a prediction's run without building its scaled
    stream again: the same curve, demand and fit as the scaled stream's own run, under a
    limit it fits and under one it does not (the demand is then its run without it)."""
    from vramscope.viewer.model.remedies.catalogue.context import Run, run_of_prediction

    case = prepare(load_snapshot(str(RESNET), use_cache=False))
    j = scaling.judge(case, 32, evidence.gather(case))
    need = batch_scale.predict(case, j, scale, None, None, 32).peak
    ooms = []
    for limit in (need + (64 << 20), need // 2, None):
        pred = batch_scale.predict(case, j, scale, limit, None, 32)
        ooms.append(pred.result.first_oom is not None)
        ours = run_of_prediction(pred, case, limit)
        theirs = Run.of(pred.result, batch_scale.scaled_case(case, j, scale), limit)
        assert np.array_equal(ours.reserved, theirs.reserved)
        assert (ours.demand, ours.fits) == (theirs.demand, theirs.fits)
        assert np.array_equal(ours.curve_x, theirs.curve_x)
    assert ooms == [False, True, False]
