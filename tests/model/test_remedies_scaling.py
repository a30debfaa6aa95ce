"""Batch-size what-if: which allocations scale with the batch, and the scaled re-simulation.

The judgement is checked against what recordings show directly: in
``whatif_default`` every step drew another batch and sequence length
(its sidecar lists the shapes), so an allocation site whose sizes differ
between steps holds data-shaped tensors (must be judged to scale) and a
site whose sizes never change does not (must be judged fixed).
"""

from __future__ import annotations

import json
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import batch_scale, evidence, scaling
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

VARIED = DATA / "whatif_h200" / "whatif_default.pickle.xz"  # 6 steps of different shapes
RESNET = DATA / "resnet50_train.pickle"  # batch 32, 4 steps, bf16 autocast, SGD
GPT2_OOM = DATA / "gpt2_oom.pickle"  # OOM under a 10.49 GiB limit


@pytest.fixture(scope="module")
def case_of():
    memo = {}

    def get(path):
        if path not in memo:
            case = prepare(load_snapshot(str(path), use_cache=False))
            evd = evidence.gather(case)
            memo[path] = (case, evd)
        return memo[path]

    return get


def test_judgement_agrees_with_shapes_that_varied_between_steps(case_of):
    case, evd = case_of(VARIED)
    shapes = json.loads((VARIED.parent / "whatif_default.json").read_text())["workload"]
    assert "shapes [[8, 579], [2, 135]" in shapes  # steps really differ
    j = scaling.judge(case, None, evd)
    assert evd.n_iterations == 6
    alloc = np.flatnonzero(case.requests.kind == rq.ALLOC)
    by_site: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i in alloc.tolist():
        # Sites with Python frames (backward's allocations share one empty stack).
        # Workspaces made once at a site that also makes outputs are fixed: only
        # allocations freed inside the recording are compared.
        if (
            evd.site[i] < 0
            or evd.iteration[i] < 0
            or case.requests.size[i] <= 512
            or evd.provenance[i] in (evidence.PROV_NONE, evidence.PROV_AUTOGRAD)
            or evd.free_at[i] == len(case.requests)
        ):
            continue
        by_site[int(evd.site[i])][int(evd.iteration[i])].append(i)
    checked = {True: 0, False: 0}
    for its in by_site.values():
        if len(its) < 2:
            continue
        sizes = {tuple(sorted(case.requests.size[v].tolist())) for v in its.values()}
        varies = len(sizes) > 1
        for v in its.values():
            for i in v:
                assert bool(j.scales[i]) == varies, (j.reason(i), int(case.requests.size[i]))
                checked[varies] += 1
    assert checked[True] > 500 and checked[False] > 100, checked


def test_resnet_judgement_reasons(case_of):
    case, evd = case_of(RESNET)
    j = scaling.judge(case, 32, evd)
    reqs = case.requests
    snap = case.snap

    def rules_where(pred):
        out = set()
        for i in np.flatnonzero(reqs.kind == rq.ALLOC).tolist():
            if pred(i):
                out.add(scaling.RULES[j.rule[i]])
        return out

    def innermost(i):
        fr = snap.stacks.frame_ids(int(evd.site[i])) if evd.site[i] >= 0 else []
        py = [f for f in fr.tolist() if snap.frames.filename_of(f).endswith(".py")]
        if not py:
            return ""
        return f"{snap.frames.filename_of(py[0]).rsplit('/', 1)[-1]}:{snap.frames.name_of(py[0])}"

    # Parameters moved by .cuda(): fixed as module state; the SGD step: fixed.
    assert rules_where(lambda i: innermost(i) == "module.py:<lambda>") <= {
        "module_state",
        "state_category",
        "tiny",
    }
    assert rules_where(lambda i: innermost(i).startswith("sgd.py")) <= {
        "optimizer",
        "state_category",
        "tiny",
    }
    assert all(
        not j.scales[i]
        for i in np.flatnonzero(reqs.kind == rq.ALLOC).tolist()
        if innermost(i) == "module.py:<lambda>" or innermost(i).startswith("sgd.py")
    )
    # The two cuBLAS workspaces (32 MiB, made once in library code, kept): fixed, by the
    # categories' workspace reason when that package is there, else as kept once.
    kept = np.flatnonzero((reqs.size == 33554432) & (evd.free_at == len(reqs)))
    assert len(kept) == 2 and not j.scales[kept].any()
    assert {scaling.RULES[r] for r in j.rule[kept]} <= {"kept_once", "state_category"}
    # The input batch (32 x 3 x 224 x 224 fp32), made every step by the program: scales;
    # the last one is still referenced when the recording ends (cut off, not kept).
    inputs = np.flatnonzero((reqs.size == 32 * 3 * 224 * 224 * 4) & (reqs.kind == rq.ALLOC))
    assert len(inputs) == 4 and j.scales[inputs].all()
    assert scaling.RULES[j.rule[inputs[-1]]] in ("cut_off", "data_category")
    # Under bf16 autocast each convolution first makes a bf16 copy of its fp32 weight
    # (half a parameter's size: fixed), then its output (scales with the batch).
    conv = np.array(
        [
            i
            for i in np.flatnonzero(reqs.kind == rq.ALLOC).tolist()
            if innermost(i) == "conv.py:_conv_forward" and reqs.size[i] % 32 == 0
        ]
    )
    weights = j.rule[conv] == scaling.STATE_SIZE
    assert len(conv) > 100 and 0.3 < weights.mean() < 0.7
    assert j.scales[conv[~weights]].all()
    states = scaling.state_sizes(case, evd)
    assert np.isin(reqs.size[conv[weights]] * 2, states).all()
    # Every reason is a sentence the user can read.
    assert j.reason(int(inputs[-1])).startswith("scales (")
    assert j.reason(int(kept[0])).startswith("fixed (")


def test_scaled_sizes_are_exact_per_sample_multiples(case_of):
    case, evd = case_of(RESNET)
    j = scaling.judge(case, 32, evd)
    half = j.scaled_sizes(Fraction(16, 32))
    scales = j.scales
    assert scales.any() and (~scales).any()
    assert np.array_equal(half[~scales], j.size[~scales])
    # Scaled sizes are exact halves of per-sample tensors.
    plain = scales & (j.fixed == 0)
    assert np.array_equal(half[plain], (j.size[plain] + 1) // 2)
    assert (j.size[plain] % 2 == 0).all()
    # A workspace with a fixed weight part (viewer/model/remedies/workspaces.py) keeps it
    # and halves the rest, rounded up to a whole byte (cuDNN asks for odd sizes); only
    # workspaces have one.
    part = scales & (j.fixed > 0)
    assert part.any() and not (part & ~j.workspace).any()
    assert (j.fixed[part] < j.size[part]).all()
    assert np.array_equal(half[part], j.fixed[part] + (j.size[part] - j.fixed[part] + 1) // 2)
    assert ((j.size[part] - j.fixed[part]) % 2 == 1).any()
    # Without the batch, sizes are rounded up to whole bytes.
    odd = scaling.Judgement(
        rule=np.array([scaling.PER_ITERATION, scaling.TINY], np.int8),
        size=np.array([1001, 1001], np.int64),
        batch=None,
    )
    assert odd.scaled_sizes(1.5).tolist() == [1502, 1001]


def test_what_scales_is_worked_out_once_and_cannot_be_changed_by_a_reader(case_of):
    """Every rule, remedy and prediction asks the judgement what scales: one array, made
    once, that no reader can write into (the uncertain workspaces are a copy of it)."""
    case, evd = case_of(RESNET)
    j = scaling.judge(case, 32, evd)
    assert j.scales is j.scales
    assert np.array_equal(j.scales, evidence.one_of(j.rule, scaling.SCALED_RULES))
    with pytest.raises(ValueError):
        j.scales[0] = not j.scales[0]
    before = j.scales.copy()
    uncertain = j.uncertain
    assert uncertain.flags.writeable and not (uncertain & ~before).any()
    assert np.array_equal(j.scales, before)


def test_scale_one_reproduces_the_recording_and_peaks_grow_with_the_batch(case_of):
    case, evd = case_of(RESNET)
    j = scaling.judge(case, 32, evd)
    same = batch_scale.scaled_case(case, j, 1).simulate()
    assert same.peak_reserved == case.recorded_run().peak_reserved == 2084569088
    peaks = [
        batch_scale.scaled_case(case, j, f).simulate().peak_reserved_until_oom
        for f in (Fraction(1, 2), Fraction(1), Fraction(3, 2), Fraction(2))
    ]
    assert peaks == sorted(peaks) and len(set(peaks)) == 4
    # The scaled case keeps the recording as the baseline of "vs recorded".
    sc = batch_scale.scaled_case(case, j, 0.5)
    assert sc.recorded_peak == case.recorded_peak
    with pytest.raises(ValueError):
        batch_scale.scaled_case(case, j, 0)


def test_largest_batch_that_fits_is_the_boundary(case_of):
    case, evd = case_of(RESNET)
    j = scaling.judge(case, 32, evd)
    limit = 3 * 1024**3
    found = batch_scale.largest_fitting_scale(case, j, limit, recorded_batch=32)
    assert found.batch is not None and 32 < found.batch < 64
    at = batch_scale.scaled_case(case, j, Fraction(found.batch, 32)).simulate(None, limit)
    over = batch_scale.scaled_case(case, j, Fraction(found.batch + 1, 32)).simulate(None, limit)
    assert at.first_oom is None and over.first_oom is not None
    assert found.peak_reserved == at.peak_reserved_until_oom <= limit


def test_oom_recording_fits_at_a_smaller_scale(case_of):
    case, evd = case_of(GPT2_OOM)
    j = scaling.judge(case, None, evd)
    assert case.recorded_run().first_oom is not None
    found = batch_scale.largest_fitting_scale(case, j, precision=0.02)
    assert found.scale is not None and Fraction(1, 2) < found.scale < 1
    assert batch_scale.scaled_case(case, j, found.scale).simulate().first_oom is None
    # Just above the answer it does not fit (the bisection's upper end).
    above = min(f for f, ok, _ in found.tried if not ok and f > found.scale)
    assert (above - found.scale) / above <= 0.02


def test_rules_without_the_categories_package(case_of):
    """The judgement stands on its own rules when no categories are given."""
    case, _ = case_of(RESNET)
    evd = evidence.gather(case, categories=None)
    j = scaling.judge(case, 32, evd)
    reqs = case.requests
    kept = np.flatnonzero(j.rule == scaling.KEPT_ONCE)
    assert sorted(reqs.size[kept].tolist()) == [33554432, 33554432]
    inputs = np.flatnonzero((reqs.size == 32 * 3 * 224 * 224 * 4) & (reqs.kind == rq.ALLOC))
    assert [scaling.RULES[r] for r in j.rule[inputs]] == ["per_iteration"] * 3 + ["cut_off"]
    with_cat = scaling.judge(case, 32, case_of(RESNET)[1])
    # Both judgements predict nearly the same run at half the batch.
    a = batch_scale.scaled_case(case, j, 0.5).simulate().peak_reserved
    b = batch_scale.scaled_case(case, with_cat, 0.5).simulate().peak_reserved
    assert abs(a / b - 1) < 0.05


def test_removing_allocations_from_the_stream(case_of):
    from vramscope.viewer.model.remedies import edit

    case, _evd = case_of(RESNET)
    reqs = case.requests
    same = edit.without(case, np.zeros(len(reqs), bool))
    assert len(same.requests) == len(reqs)
    a, b = same.simulate(), case.recorded_run()
    assert a.peak_reserved == b.peak_reserved and a.events == b.events
    # Without the four input batches (and their frees) the allocated peak drops by at
    # most one of them (only one is live at a time) and at least by nothing.
    inputs = (reqs.size == 32 * 3 * 224 * 224 * 4) & (reqs.kind == rq.ALLOC)
    gone = edit.without(case, inputs)
    assert len(gone.requests) == len(reqs) - 4 - 3  # 4 allocations, 3 frees in the window
    r = gone.simulate()
    assert b.peak_allocated - 32 * 3 * 224 * 224 * 4 <= r.peak_allocated < b.peak_allocated
    assert not (gone.requests.ref >= len(gone.requests)).any()


def test_autocast_workspaces_keep_the_half_precision_weight_beside_them(case_of):
    """Under bf16 autocast a convolution's workspace holds the bf16 copy of its weight
    (made just before it in forward; its gradient beside it in backward) plus its
    output's multiples: ResNet-50 layer4, 7929872 B = 4718592 (512x512x3x3 in bf16) +
    2 x 1605632 (32 x 512 x 7 x 7 bf16) + 16."""
    from vramscope.viewer.model.remedies import workspaces

    case, evd = case_of(RESNET)
    j = scaling.judge(case, 32, evd)
    w = j.workspace
    assert w.sum() > 100
    # Nearly all are explained by a weight (or its copy) and their activations.
    assert (j.fixed_how[w] == workspaces.DECOMPOSED).mean() > 0.9
    bf16 = w & (case.requests.size == 7929872) & (evd.phase == evidence.FORWARD)
    assert bf16.any() and (j.fixed[bf16] == 512 * 512 * 9 * 2 + 16).all()
    half = j.scaled_sizes(Fraction(1, 2))[bf16]
    assert (half == 512 * 512 * 9 * 2 + 16 + 1605632).all()


def test_copied_from_is_the_latest_live_source_of_the_copys_size():
    """An autotuning copy's source is the latest allocation of its size made before it and
    still alive at it; checked against a walk over every candidate, on streams with many
    sizes shared, freed candidates in the way (longer runs than the walk's batched steps),
    frees at the copy itself, and copies with none."""
    from types import SimpleNamespace

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        size = rng.integers(1, int(rng.integers(1, 6)) + 1, n) * 512
        life = rng.integers(1, int(rng.integers(1, 80)) + 1, n)
        free_at = np.minimum(np.arange(n) + life, n)
        is_copy = rng.random(n) < rng.random()
        copies = np.flatnonzero(is_copy)
        sources = ~is_copy & (rng.random(n) < 0.9)
        want = []
        for i in copies.tolist():
            alive = [j for j in range(i) if sources[j] and size[j] == size[i] and free_at[j] > i]
            want.append(alive[-1] if alive else -1)
        got = scaling._copied_from(SimpleNamespace(size=size), free_at, copies, sources)
        assert got.tolist() == want
    # A live source behind more freed ones of its size than the walk takes in its batched
    # steps, and a copy with only freed ones behind it.
    m = scaling._WALK_STEPS * 3
    size = np.full(m + 4, 1024)
    free_at = np.concatenate([[m + 4], np.arange(2, m + 2), [m + 4, m + 4, m + 4]])
    sources = np.ones(m + 4, bool)
    sources[[m + 1, m + 3]] = False
    copies = np.array([m + 1, m + 3])
    got = scaling._copied_from(SimpleNamespace(size=size), free_at, copies, sources)
    assert got.tolist() == [0, m + 2]


def _cut_off_by_site(reqs, evd, never) -> np.ndarray:
    """cut_off's rule written out one allocation at a time (the reference)."""
    n = len(reqs)
    made_and_freed: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        if reqs.kind[i] == rq.ALLOC and evd.free_at[i] < n:
            made_and_freed[int(evd.site[i])].append(i)
    out = np.zeros(n, bool)
    for i in np.flatnonzero(never):
        rows = made_and_freed.get(int(evd.site[i]), [])
        out[i] = bool(rows) and min(rows) < i and max(rows) < i
    if evd.n_iterations:
        out |= never & (evd.iteration >= evd.n_iterations)
    return out


@pytest.mark.parametrize("path", [RESNET, GPT2_OOM], ids=lambda p: p.name)
def test_cut_off_is_its_rule_one_allocation_at_a_time(case_of, path):
    case, evd = case_of(path)
    reqs = case.requests
    never = (reqs.kind == rq.ALLOC) & (evd.free_at >= len(reqs))
    # Also with every allocation asked about: the sites' own history decides.
    for asked in (never, reqs.kind == rq.ALLOC):
        got = scaling.cut_off(reqs, evd, asked)
        assert np.array_equal(got, _cut_off_by_site(reqs, evd, asked))
    assert got.any() and not got.all()  # (both answers occur: the comparison bites)
