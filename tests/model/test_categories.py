"""Memory categories, iterations and leaks on real snapshots and on a
training loop written as a trace with what every allocation is meant to be."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from vramscope.viewer.model import load_bytes, load_snapshot
from vramscope.viewer.model.categories import CATEGORY_NAMES, REASONS, MemoryBreakdown
from vramscope.viewer.model.replay.timeline import build_timeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic_training as syn

DATA = Path(__file__).resolve().parents[1] / "data"
EXTERNAL = shared_data.EXTERNAL


def breakdown(path: Path, device: int | None = None) -> MemoryBreakdown:
    snap = load_snapshot(path, use_cache=False)
    return MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), device)


def gpt2_parameter_bytes(layers: int, width: int, vocab: int = 50257, positions: int = 1024) -> int:
    """fp32 bytes of GPT2LMHeadModel's parameters (lm_head tied to the token embedding):
    embeddings, per block 2 LayerNorms + attention (qkv, proj) + MLP (4x), final LayerNorm."""
    per_block = 12 * width * width + 13 * width
    return 4 * (vocab * width + positions * width + layers * per_block + 2 * width)


# -- real recordings: what the model architecture fixes to the byte -------------------------
@pytest.mark.parametrize("name, layers", [("gpt2_oom", 12), ("whatif_default", 6)])
def test_gpt2_parameters_and_adamw_state_to_the_byte(name, layers):
    bd = breakdown(DATA / f"{name}.pickle")
    k = int(np.argmax(bd.requested))
    split = bd.split_at(k)
    params = gpt2_parameter_bytes(layers, 768)
    assert split["parameter"] == params
    assert split["optimizer_state"] == 2 * params  # AdamW: exp_avg and exp_avg_sq
    assert sum(split.values()) == bd.requested[k]  # the split adds up to the curve
    assert split["unknown"] == 0


def test_gpt2_oom_iterations_and_the_peak_in_the_cut_forward():
    bd = breakdown(DATA / "gpt2_oom.pickle")
    its = bd.iterations
    assert [it.complete for it in its] == [True] * 8 + [False]  # the OOM cut the 9th
    assert all(it.kind == "train" for it in its)
    assert its[-1].peak_phase == "forward"
    k = int(np.argmax(bd.requested))
    assert bd.phase_at(k) == "forward"
    # zero_grad(set_to_none=True) freed the gradients before this forward.
    split = bd.split_at(k)
    assert split["gradient"] == 0
    # The cut forward's tensors and the last step's outputs (kept by the program until
    # this forward returns) are activations, not temporaries.
    assert split["activation"] > 0.9 * (split["activation"] + split["temporary"])
    assert bd.reasons_at(k)["act_kept"] > 1 << 30
    assert bd.leaks == []


def test_resnet50_sgd_momentum_state_equals_the_parameters():
    """torchvision resnet50 has 25,557,032 parameters; SGD momentum keeps one buffer each.
    The parameter category also holds BatchNorm's buffers (running mean/var: sizes of
    gradients; num_batches_tracked: 53 int64 scalars, named buffers)."""
    bd = breakdown(DATA / "resnet50_train.pickle")
    k = int(np.argmax(bd.requested))
    split = bd.split_at(k)
    assert split["optimizer_state"] == 4 * 25_557_032
    assert 4 * 25_557_032 < split["parameter"] < 1.003 * 4 * 25_557_032
    reasons = bd.reasons_at(k)
    assert reasons["param_buffer"] == 53 * 8
    assert len(bd.iterations) == 4 and all(it.complete for it in bd.iterations)
    assert bd.leaks == []
    assert split["unknown"] == 0


def test_every_reason_belongs_to_its_category_and_guesses_are_marked():
    bd = breakdown(DATA / "whatif_default.pickle")
    cats = np.array([r.category for r in REASONS])
    assert (cats[bd.reason] == bd.category).all()
    # Python-only stacks: backward allocations come from autograd's thread (no Python
    # frames), so gradients are labelled as the guess they are.
    rid = [r.code for r in REASONS].index("grad_survives_backward_guess")
    assert REASONS[rid].guess
    grads = np.flatnonzero(bd.reason == rid)
    assert len(grads) and (bd.category[grads] == CATEGORY_NAMES.index("gradient")).all()
    k = int(bd.intervals.start[grads[-1]])  # right after the last gradient was made
    assert bd.guessed_bytes_at(k) >= bd.intervals.requested[grads[-1]]


def test_requested_curve_from_lifetimes_equals_the_replays():
    from vramscope.viewer.model.categories.breakdown import requested_curve

    bd = breakdown(DATA / "gpt2_oom.pickle")
    assert (requested_curve(bd.intervals, bd.n_events) == bd.requested).all()


def test_category_curves_equal_bytes_at_every_event():
    bd = breakdown(DATA / "resnet50_train.pickle")
    events = np.arange(0, bd.n_events, 97)
    curves = bd.category_curves(events)
    for j, k in enumerate(events.tolist()):
        assert curves[:, j].tolist() == bd.bytes_at(k).tolist()
    assert (curves.sum(axis=0) == bd.requested[events]).all()


def test_ring_buffer_recording_flags_its_guesses():
    """The 1M-event ring buffer starts inside training: the first iteration is cut, and
    what was allocated before recording is sized against the gradients (guesses)."""
    bd = breakdown(DATA / "transformer_long_python_1000k.pickle.xz")
    assert not bd.iterations[0].complete
    assert len(bd.iterations) > 600
    assert bd.leaks == []
    k = int(np.argmax(bd.requested))
    reasons = bd.reasons_at(k)
    assert reasons.get("pre_param_size_match", 0) > 0
    guessed = {r.code for r in REASONS if r.guess}
    pre = sum(v for code, v in reasons.items() if code.startswith("pre_"))
    assert all(code in guessed for code in reasons if code.startswith("pre_"))
    assert pre <= bd.guessed_bytes_at(k)


@shared_data.MARK
@pytest.mark.parametrize(
    "name",
    [
        "kkaitlyn111_cs336-a2-systems-memory_files_memory_ctx128_fullstep_.pickle.xz",
        "JasperSolt_EoR_NN-snapshot.pickle.xz",
        "cranberrii_ftcourse-memory_snapshot.pickle.xz",
        "LfieLike_SketchKV2-my_snapshot.pickle.xz",
        "Constructor-Sun_code_location-memory_snapshot.pickle.xz",
    ],
)
def test_other_peoples_files_split_adds_up(name):
    path = shared_data.require(EXTERNAL / name)
    snap = load_snapshot(path, use_cache=False)
    tl = build_timeline(snap, keyframes=False)
    for d in tl.devices:
        bd = MemoryBreakdown.build(snap, tl, d)
        k = int(np.argmax(bd.requested))
        assert (bd.requested == tl.replay(d).requested).all()
        assert sum(bd.split_at(k).values()) == bd.requested[k]


# -- a training loop written as a trace: every allocation's meaning is known ---------------
def synthetic(leak: bool):
    data, tr = syn.training_run(iterations=7, layers=4, leak=leak)
    snap = load_bytes(data)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
    return bd, tr


@pytest.mark.parametrize("leak", [False, True])
def test_synthetic_loop_every_allocation_gets_its_meant_category(leak):
    bd, tr = synthetic(leak)
    iv = bd.intervals
    meant = np.array(
        [CATEGORY_NAMES.index(tr.category_of_event[int(s) - 1]) for s in iv.start.tolist()]
    )
    wrong = np.flatnonzero(meant != bd.category)
    assert not len(wrong), [
        (
            int(iv.start[i]),
            CATEGORY_NAMES[meant[i]],
            CATEGORY_NAMES[bd.category[i]],
            REASONS[bd.reason[i]].code,
        )
        for i in wrong[:10]
    ]


def test_synthetic_loop_iterations_and_phases():
    bd, _ = synthetic(False)
    assert len(bd.iterations) == 7
    assert all(it.complete and it.kind == "train" for it in bd.iterations)
    # Later iterations peak when backward starts: activations and state both live.
    assert {it.peak_phase for it in bd.iterations[1:]} <= {"forward", "backward"}
    assert not any(it.phases_guessed for it in bd.iterations)


def test_synthetic_leak_named_at_its_line_with_exact_growth():
    bd, _ = synthetic(True)
    assert len(bd.leaks) == 1
    lk = bd.leaks[0]
    assert lk.frame == f"train.py:{syn.LEAK_LINE}" and lk.user_code
    assert lk.bytes_per_iteration == 3 * syn.MIB + 1000
    assert lk.live_bytes == 7 * (3 * syn.MIB + 1000)
    assert "keeps 3.00 MiB per iteration" in lk.sentence()


def test_synthetic_healthy_loop_reports_no_leak_despite_lazy_optimizer_state():
    bd, _ = synthetic(False)
    assert bd.leaks == []
    # The state made lazily in the first step is alive at the end: not a leak, state.
    end = bd.split_at(bd.n_events - 1)
    sizes = [(5 + j) * syn.MIB + 256 * j for j in range(4)]
    assert end["optimizer_state"] == 2 * sum(sizes)
    assert end["parameter"] == sum(sizes)
    assert end["gradient"] == sum(sizes)


def test_categories_of_the_blocks_of_a_layout_and_explanations():
    """The layout after an event (what the segment map draws) gets each block's category."""
    snap = load_snapshot(DATA / "resnet50_train.pickle", use_cache=False)
    tl = build_timeline(snap, keyframes=False)
    bd = MemoryBreakdown.build(snap, tl, 0)
    k = int(np.argmax(bd.requested))
    state = tl.snapshot_at(0, k)
    blocks = state.blocks
    allocated = np.flatnonzero(blocks.state == 0)
    cats = bd.categories_of_addresses(k, blocks.address[allocated])
    assert (cats >= 0).all()  # every allocated block is a live allocation
    by_cat = np.bincount(
        cats, weights=blocks.requested_size[allocated], minlength=len(CATEGORY_NAMES)
    )
    assert by_cat.astype(np.int64).tolist() == bd.bytes_at(k).tolist()
    free = np.flatnonzero(blocks.state == 2)[:5]
    assert (bd.categories_of_addresses(k, blocks.address[free]) == -1).all()
    i = int(np.flatnonzero(bd.category == CATEGORY_NAMES.index("optimizer_state"))[0])
    assert bd.explain(i).startswith("optimizer_state: made in the optimizer step")
