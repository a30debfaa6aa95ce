"""Library workspaces in the batch-size what-if: which allocations they are, their bounds,
and the estimated range of peak reserved, against real runs at other batch sizes.

The ResNet-18 truth sweep recorded the same program at batch 16, 32, 48 and 64 in fresh
processes; each made the same requests in the same order, so an allocation of one run is
matched to the same one of another by its position.  Measured there: the only allocations
whose size is not proportional to the batch are cuDNN's convolution workspaces (freed by
the very next request, not a whole number of bytes per sample), and with their real sizes
the replay of the scaled stream gives the real peak exactly.  Skipped while the recordings
are absent.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tests.workloads import batch_prediction_table as table
from vramscope.viewer.model.remedies import batch_scale
from vramscope.viewer.model.whatif import requests as rq

SWEEPS = table.sweeps()
RESNET = SWEEPS.get("resnet", {})
PAIRS = [(b0, b1) for b0 in sorted(RESNET) for b1 in sorted(RESNET) if b0 != b1]
ALL_PAIRS = [(fam, b0, b1) for fam, by in sorted(SWEEPS.items()) for b0 in sorted(by)
             for b1 in sorted(by) if b0 != b1]
needs_resnet = pytest.mark.skipif(len(RESNET) < 2, reason="ResNet-18 sweep not recorded")


def _pair(b0, b1):
    a, ja, _ = table.case_of(RESNET[b0])
    b, _, _ = table.case_of(RESNET[b1])
    assert (a.requests.kind == b.requests.kind).all(), "the runs made different streams"
    return a, ja, b.requests.size.astype(np.int64), Fraction(b1, b0)


@needs_resnet
@pytest.mark.parametrize("b0,b1", PAIRS or [(0, 0)], ids=lambda v: str(v))
def test_workspaces_are_the_allocations_that_do_not_scale_in_proportion(b0, b1):
    a, ja, real, f = _pair(b0, b1)
    pred = ja.scaled_sizes(f)
    alloc = (a.requests.kind == rq.ALLOC) & (ja.size > 512)
    off = alloc & (np.abs(pred - real) > 4096)  # more than a few alignment bytes
    w = ja.workspace
    assert w.sum() > 0
    # Every allocation that missed its proportional size by bytes is a judged workspace
    # (outside them, measured: BatchNorm's per-channel saved statistics, 2 KiB, judged to
    # scale; ResNet's pooled output at batch 32, 64 KiB, judged fixed by its size).
    assert ja.size[off & ~w].sum() <= 0.001 * ja.size[off].sum(), np.flatnonzero(off & ~w)[:10]
    # ... and most judged workspaces did miss it (by bytes), else the label is too wide.
    assert ja.size[w & off].sum() >= 0.8 * ja.size[w].sum()


@needs_resnet
@pytest.mark.parametrize("b0,b1", PAIRS or [(0, 0)], ids=lambda v: str(v))
def test_every_workspace_lies_within_its_bounds_at_the_other_batch(b0, b1):
    a, ja, real, f = _pair(b0, b1)
    lo, hi = batch_scale.workspace_bounds(ja, f)
    got = real[ja.workspace]
    assert ((got >= lo) & (got <= hi)).all(), \
        [(int(x), int(y), int(z)) for x, y, z in zip(lo, got, hi) if not y >= x or not y <= z]
    # The proportional size is inside; the bounds are no wider than half .. twice it,
    # widened to the recorded size.
    prop = ja.scaled_sizes(f)[ja.workspace]
    rec = ja.size[ja.workspace]
    assert (lo <= prop).all() and (hi >= prop).all() and (lo < hi).all()
    assert (lo >= np.minimum(prop // 2, rec)).all() and (hi <= np.maximum(2 * prop, rec)).all()


@needs_resnet
@pytest.mark.parametrize("b0,b1", PAIRS or [(0, 0)], ids=lambda v: str(v))
def test_with_the_real_workspace_sizes_the_replay_is_exact(b0, b1):
    """The whole miss of the point prediction is the workspaces' sizes: put the real
    run's sizes of just those allocations into the scaled stream and the replay gives
    the real peak reserved exactly."""
    a, ja, real, f = _pair(b0, b1)
    sizes = ja.scaled_sizes(f)
    w = ja.workspace
    sizes[w] = real[w]
    got = batch_scale._with_sizes(a, ja, f, sizes).simulate().peak_reserved_until_oom
    assert got == table.real_peak_reserved(RESNET[b1])


@pytest.mark.skipif(not ALL_PAIRS, reason="truth sweeps not recorded yet (tests/data/truth)")
@pytest.mark.parametrize("family,b0,b1", ALL_PAIRS or [("-", 0, 0)], ids=lambda v: str(v))
def test_the_real_peak_lies_in_the_estimated_range(family, b0, b1):
    src, dst = SWEEPS[family][b0], SWEEPS[family][b1]
    real = table.real_peak_reserved(dst)
    point = table.predict_peak(src, b1)
    est = table.predict_range(src, b1)
    if est is None:  # no workspace whose size is uncertain: the point is the answer
        assert point == real, (family, b0, b1, point, real)
        return
    assert est.low <= point <= est.high
    assert est.low <= real <= est.high, (family, b0, b1, est.low, real, est.high)
    assert est.to_dict()["estimate"] is True and est.workspaces > 0


@needs_resnet
def test_the_estimate_repeats_and_its_bounds_move_with_the_scale():
    case, j, _ = table.case_of(RESNET[max(RESNET)])
    one = batch_scale.estimate_range(case, j, Fraction(1, 2))
    assert one == batch_scale.estimate_range(case, j, Fraction(1, 2))  # seeded
    lo_half, hi_half = batch_scale.workspace_bounds(j, Fraction(1, 2))
    lo_one, hi_one = batch_scale.workspace_bounds(j, 1)
    rec = j.size[j.workspace]
    assert (lo_half <= lo_one).all() and (hi_one == 2 * rec).all() and (lo_one == rec // 2).all()
    # Downscaled, a workspace may keep its recorded size (its fixed part); upscaled, too.
    assert (hi_half >= rec).all() and (hi_half <= rec + 1).all()
    lo_two, hi_two = batch_scale.workspace_bounds(j, 2)
    assert (lo_two == rec).all() and (hi_two == 4 * rec).all()


@needs_resnet
def test_advise_labels_its_batch_answers_estimates_where_workspaces_are():
    from vramscope.viewer.model.remedies.advise import format_text

    a = table.advice_of(RESNET[max(RESNET)], 2 << 30)
    d = a.to_dict()
    assert d["largest_batch_is_estimate"] is True and d["batch_workspace_allocations"] > 0
    assert "estimate" in format_text(a).split("largest batch that fits")[1].splitlines()[0]
    small = next(r for r in a.remedies if r.remedy == "smaller_batch")
    assert "estimate" in small.detail
    gpt2 = SWEEPS.get("gpt2")
    if gpt2:
        g = table.advice_of(gpt2[min(gpt2)], 2 << 30).to_dict()
        assert g["largest_batch_is_estimate"] is False and g["largest_batch_that_fits"] == 12
