"""Library workspaces in the batch-size what-if: which allocations they are, their estimated
size (a fixed weight part plus a per-sample part), their bounds, and the estimated range of
peak reserved, against real runs at other batch sizes.

The ResNet-18 truth sweep recorded the same program at batch 16, 32, 48 and 64 in fresh
processes; each made the same requests in the same order, so an allocation of one run is
matched to the same one of another by its position.  Measured there: the only allocations
whose size is not proportional to the batch are cuDNN's convolution workspaces (freed by
the very next request, not a whole number of bytes per sample), and with their real sizes
the replay of the scaled stream gives the real peak exactly.  Which runs made the same
request stream is read from their sidecars at collection time, and a floor on the number of
pairs compared fails when a recording goes missing.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from tests.workloads import batch_prediction_table as table
from vramscope.viewer.model.remedies import batch_scale, scaling, workspaces
from vramscope.viewer.model.whatif import requests as rq

SWEEPS = table.sweeps()
RESNET = SWEEPS.get("resnet", {})
# Allocations are matched by position, so only runs that made the same request stream are
# paired; measured: at batch 8 and 24 cuDNN took another path (1745 requests, 1739 at the
# others).  Decided from the sidecars here, not by skipping at run time, so that the count
# below sees every pair that is compared.
PAIRS = [
    (b0, b1)
    for b0 in sorted(RESNET)
    for b1 in sorted(RESNET)
    if b0 != b1 and table.request_counts(RESNET[b0]) == table.request_counts(RESNET[b1])
]
ALL_PAIRS = [
    (fam, b0, b1)
    for fam, by in sorted(SWEEPS.items())
    for b0 in sorted(by)
    for b1 in sorted(by)
    if b0 != b1
]
MOBILENET = SWEEPS.get("mobilenet", {})
# Floors: the pairs compared when these tests were written (ResNet-18 at 8/16/24/32/48/64/96:
# 8 <-> 24 and the 5 others among themselves; every ordered pair of batches within each
# family of the 39 sweep recordings).  The recordings are in the repository: fewer pairs
# means one was lost, and the tests below would still pass on what is left.
MIN_PAIRS = 22
MIN_ALL_PAIRS = 192


def test_enough_pairs_are_compared():
    assert len(PAIRS) >= MIN_PAIRS, f"{len(PAIRS)} ResNet-18 pairs with one request stream"
    assert len(ALL_PAIRS) >= MIN_ALL_PAIRS, f"{len(ALL_PAIRS)} sweep pairs"
    assert {32, 64} <= set(MOBILENET), sorted(MOBILENET)


# Known misses on the held-out recordings (resnet b8/24/96, mobilenet; recorded after the
# model was written, not tuned to), each measured:
AT_8 = (
    "at batch 8 cuDNN asked for workspaces whose sizes are multiples of 512 B and of "
    "the batch (18874368 B = 18 MiB): not told from per-sample tensors, so scaled "
    "in proportion (56.6 MiB predicted at 24, real 19.1 MiB), and one of 1024 B "
    "(a norm weight's size: judged fixed) that is 9.8 MiB at 24"
)
ADDRESSES = (
    "with every size of the real run at 96 the replay of this stream is still "
    "40 MiB (1 %) low: the real run's segments came at other addresses, and the "
    "allocator's best fit breaks ties by address; a recording at another batch "
    "cannot show where cudaMalloc puts them"
)
KNOWN = {
    "in_proportion": {(8, 24): AT_8},
    "bounds": {
        (24, 8): "the workspace of 9846928 B at batch 24 is 1024 B at batch 8 "
        "(below half its estimate): " + AT_8
    },
    "replay": {(8, 24): AT_8, **{(b, 96): ADDRESSES for b in (16, 32, 48, 64)}},
    "range": {},
}


def _known(kind: str, pairs: list) -> list:
    """``pairs`` as parameters, the measured misses of ``kind`` as strict xfails."""
    out = []
    for p in pairs:
        why = KNOWN[kind].get(tuple(p))
        out.append(pytest.param(*p, marks=pytest.mark.xfail(reason=why, strict=True)) if why else p)
    return out


def _pair(b0, b1):
    a, ja, _ = table.case_of(RESNET[b0])
    b, _, _ = table.case_of(RESNET[b1])
    # The counters promised the same stream: it must be, request by request.
    assert len(a.requests) == len(b.requests) and (a.requests.kind == b.requests.kind).all(), (
        f"batch {b0} and {b1} counted the same requests but made different streams "
        f"({len(a.requests)} and {len(b.requests)} requests)"
    )
    return a, ja, b.requests.size.astype(np.int64), Fraction(b1, b0)


@pytest.mark.parametrize("b0,b1", _known("in_proportion", PAIRS), ids=lambda v: str(v))
def test_workspaces_are_the_allocations_that_do_not_scale_in_proportion(b0, b1):
    a, ja, real, f = _pair(b0, b1)
    pred = _proportional(ja, f)
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


def _proportional(j, f):
    """Sizes with every scaled allocation proportional (no fixed workspace part)."""
    return dataclasses.replace(j, fixed=None).scaled_sizes(f)


@pytest.mark.parametrize("b0,b1", PAIRS, ids=lambda v: str(v))
def test_the_estimated_workspace_sizes_are_nearer_the_real_ones_than_proportional(b0, b1):
    """A workspace's fixed weight part plus its per-sample part, found in one recording,
    gives the size the real run at the other batch made, to the byte (within the
    decomposition's 2 KiB), for every workspace whose algorithm cuDNN kept.  Measured on
    the 22 pairs with the same request stream (batch 16/32/48/64/96, and 8 <-> 24):
    87..126 of 150..171 workspaces exact (in proportion 9..12), and the summed miss
    22..80 % of the proportional one (the rest: another algorithm at the other batch,
    e.g. layer1's forward doubling its per-sample part from 32 to 48)."""
    _a, ja, real, f = _pair(b0, b1)
    w = ja.workspace
    est, prop, got = ja.scaled_sizes(f)[w], _proportional(ja, f)[w], real[w]
    exact = np.abs(est - got) < 2048
    assert exact.sum() >= w.sum() // 2, (int(exact.sum()), int(w.sum()))
    assert (np.abs(prop - got) < 2048).sum() < exact.sum() // 4
    miss, miss_prop = np.abs(est - got).sum(), np.abs(prop - got).sum()
    assert miss < 0.85 * miss_prop, (int(miss), int(miss_prop))


def test_a_workspace_is_its_weight_copies_plus_activations():
    """The decomposition of measured sizes (ResNet-18, batch 32): layer1's backward-filter
    workspace holds 15 partial gradients of its 64x64x3x3 weight plus twice its output
    gradient; layer4's backward-data one the 512x512x3x3 weight once plus twice its
    input gradient; sizes nothing explains are left alone."""
    w1, o1 = 64 * 64 * 9 * 4, 32 * 64 * 56 * 56 * 4
    assert workspaces._decompose(53592743, [o1], w1, np.array([w1])) == (15 * w1 + 679, 2.0)
    w4, o4 = 512 * 512 * 9 * 4, 32 * 512 * 7 * 7 * 4
    assert workspaces._decompose(15859728, [o4], w4, np.array([w4])) == (w4 + 16, 2.0)
    # Forward: no weight gradient beside it; any parameter's size, once.
    assert workspaces._decompose(25837584, [o1], 0, np.array([w4, w1])) == (w1 + 16, 1.0)
    # In proportion when the activations explain it alone (a 1x1 convolution, stride 2).
    assert workspaces._decompose(9633939, [o4], 0, np.array([w4])) == (147, 3.0)
    assert workspaces._decompose(21365247, [o4], w4, np.array([w4])) is None
    assert workspaces._decompose(21365247, [], w4, np.array([w4])) is None


def test_most_workspaces_are_explained_by_their_weight_and_activations():
    case, j, _ = table.case_of(RESNET[32])
    m = workspaces.fixed_parts(
        case,
        table.evidence_of(RESNET[32]),
        j.workspace,
        j.scales,
        np.isin(j.rule, (scaling.STATE_SIZE, scaling.CATEGORY_FIXED, scaling.MODULE_STATE)),
        32,
    )
    w = j.workspace
    assert np.array_equal(m.fixed, j.fixed)
    assert (m.how[w] == workspaces.DECOMPOSED).mean() > 0.8
    assert (m.how[~w] == workspaces.NONE).all() and (m.fixed[~w] == 0).all()
    assert (m.fixed[w] < j.size[w]).all()


@pytest.mark.parametrize("b0,b1", _known("bounds", PAIRS), ids=lambda v: str(v))
def test_every_workspace_lies_within_its_bounds_at_the_other_batch(b0, b1):
    _a, ja, real, f = _pair(b0, b1)
    lo, hi = batch_scale.workspace_bounds(ja, f)
    w = ja.uncertain_workspace
    got = real[w]
    assert ((got >= lo) & (got <= hi)).all(), [
        (int(x), int(y), int(z)) for x, y, z in zip(lo, got, hi) if not y >= x or not y <= z
    ]
    # The estimated size is inside; the bounds are no wider than half .. twice it,
    # widened to the recorded size, and above to a copy of the operands.
    est = ja.scaled_sizes(f)[w]
    rec = ja.size[w]
    _, band_hi, copy = batch_scale.workspace_sizes(ja, f)
    assert (lo <= est).all() and (hi >= est).all() and (lo < hi).all()
    assert (band_hi == np.maximum(2 * est, rec)).all() and (hi == np.maximum(band_hi, copy)).all()
    assert (lo >= np.minimum(est // 2, rec)).all()
    assert (copy > 0).mean() > 0.9  # every convolution's operands are found but a few


@pytest.mark.parametrize("b0,b1", _known("replay", PAIRS), ids=lambda v: str(v))
def test_with_the_real_workspace_sizes_the_replay_is_exact(b0, b1):
    """The whole miss of the point prediction is the workspaces' sizes: put the real
    run's sizes of just those allocations into the scaled stream and the replay gives
    the real peak reserved exactly."""
    a, ja, real, f = _pair(b0, b1)
    sizes = ja.scaled_sizes(f)
    w = ja.workspace
    sizes[w] = real[w]
    got = batch_scale.ScaledCase(a, sizes, f, ja).simulate().peak_reserved_until_oom
    assert got == table.real_peak_reserved(RESNET[b1])


@pytest.mark.parametrize("family,b0,b1", _known("range", ALL_PAIRS), ids=lambda v: str(v))
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


def test_the_estimate_repeats_and_its_bounds_move_with_the_scale():
    case, j, _ = table.case_of(RESNET[max(RESNET)])
    one = batch_scale.estimate_range(case, j, Fraction(1, 2))
    assert one == batch_scale.estimate_range(case, j, Fraction(1, 2))  # seeded
    lo_half, hi_half, _ = batch_scale.workspace_sizes(j, Fraction(1, 2))
    lo_one, hi_one, _ = batch_scale.workspace_sizes(j, 1)
    rec, fixed = j.size[j.workspace], j.fixed[j.workspace]
    assert (lo_half <= lo_one).all() and (hi_one == 2 * rec).all() and (lo_one == rec // 2).all()
    # Downscaled, a workspace may keep its recorded size, and twice its fixed part
    # (another algorithm doubling the estimate).
    assert (hi_half >= rec).all() and (hi_half <= rec + fixed + 1).all()
    # Upscaled, it may shrink (measured: 21.7 MiB at batch 32, 19.2 MiB at 48) down to
    # half the estimate, and grow to twice it.
    lo_two, hi_two, _ = batch_scale.workspace_sizes(j, 2)
    assert (lo_two == np.minimum((2 * rec - fixed) // 2, rec)).all() and (lo_two < rec).any()
    assert (hi_two == 2 * (2 * rec - fixed)).all()


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


def test_a_per_sample_sized_scratch_beside_a_weight_may_be_a_workspace():
    """At batch 64 cuDNN's backward-filter workspaces of MobileNetV3 are 262144 B and
    65536 B: multiples of the batch and of 512 B, so the point estimate scales them as
    per-sample tensors, but they are scratch beside a convolution's weight gradient and
    the range lets cuDNN pick the operand-copying algorithm it used at batch 32 (124.4
    MiB), which the batch-64 recording cannot show."""
    _case, j, _ = table.case_of(MOBILENET[64])
    size = j.size
    maybe = np.flatnonzero(j.maybe_workspace)
    assert len(maybe) and not (j.maybe_workspace & j.workspace).any()
    assert 262144 in size[maybe] and 65536 in size[maybe]
    assert (j.transient[maybe]).all() and (j.scales[maybe]).all()
    # The point estimate keeps them proportional (not decomposed)...
    f = Fraction(1, 2)
    assert (j.scaled_sizes(f)[maybe] == size[maybe] // 2).all()
    assert (j.fixed[maybe] == 0).all()
    # ... their operands are the convolution's input and output gradient (205520896 B =
    # 64 x 64 x 112 x 112 fp32 twice at the largest), and the bounds at half the batch
    # take in the largest workspace the real batch-32 run asked for.
    i = maybe[size[maybe] == 262144][0]
    assert j.operands[i] == 2 * 205520896
    _lo, hi = batch_scale.workspace_bounds(j, f)
    _real32, j32, _ = table.case_of(MOBILENET[32])
    assert hi.max() >= j32.size[j32.uncertain_workspace].max() == 130484351
    # Transformers have no such scratch: their predictions stay exact.
    for b, path in SWEEPS.get("gpt2", {}).items():
        assert not table.case_of(path)[1].maybe_workspace.any(), b
