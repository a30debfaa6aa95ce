"""Sharded training (FSDP2 ``fully_shard``) against what each rank's program knew.

Real runs on two H200s (tests/workloads/truth/fsdp2_record.py, torchrun, one recording
per rank): a decoder built on the meta device, sharded, ``to_empty`` on the GPU, bf16
mixed precision, AdamW, at batch 2, 4 and 8; transformers' GPT-2 built on the GPU and
then sharded, fp32, SGD with momentum, parameters kept unsharded between forward and
backward; and the same GPT-2 under FSDP1 (FullyShardedDataParallel's FlatParameter,
``use_orig_params``), bf16 mixed precision, AdamW.  Each
rank wrote its local parameter shards (the storages behind ``to_local()``), its optimizer
state, its gradient shards before ``zero_grad`` and the unsharded parameter storages a hook
inside each block saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vramscope.viewer.model.categories import CATEGORY_NAMES, MemoryBreakdown
from vramscope.viewer.model.categories.iterations import PH_BACKWARD
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline

TRUTH = Path(__file__).resolve().parents[1] / "data" / "truth"
RANKS = sorted(p.name[: -len(".truth.json")] for p in TRUTH.glob("fsdp*_rank*.truth.json"))
TOLERANCE = 0.02


def test_every_run_and_rank_is_here():
    # FSDP2: the decoder at batch 2, 4 and 8 and GPT-2; FSDP1: GPT-2; two ranks each.
    assert len(RANKS) == 10, RANKS


_CACHE: dict[str, tuple] = {}


def _load(name: str):
    if name not in _CACHE:
        truth = json.loads((TRUTH / f"{name}.truth.json").read_text())
        snap = load_snapshot(TRUTH / f"{name}.pickle.xz", use_cache=False)
        tl = build_timeline(snap, keyframes=False)
        bd = MemoryBreakdown.build(snap, tl, int(truth["device"]))
        _CACHE[name] = (truth, snap, bd)
    return _CACHE[name]


def _bytes_of(bd: MemoryBreakdown, category: str, blocks, at: int) -> tuple[int, int]:
    """(bytes of ``blocks`` live after event ``at`` that carry ``category``, bytes of
    ``blocks`` live there at all)."""
    iv = bd.intervals
    live = np.flatnonzero((iv.start <= at) & (iv.end > at))
    addr = np.asarray(bd.snap.trace.addr)[bd.snap.trace.device == bd.device]
    # The address of each interval: the address its allocating event names.
    starts = iv.start[live]
    ok = starts >= 0
    a = np.full(len(live), -1, np.int64)
    a[ok] = addr[starts[ok]]
    want = {int(p) for p, _ in blocks}
    hit = np.isin(a, list(want))
    cat = CATEGORY_NAMES.index(category)
    size = iv.requested[live]
    return int(size[hit & (bd.category[live] == cat)].sum()), int(size[hit].sum())


@pytest.mark.parametrize("name", RANKS)
def test_parameter_shards_and_optimizer_state_per_rank(name):
    truth, _snap, bd = _load(name)
    end = bd.n_events - 1
    split = bd.split_at(end)
    for ours, key in (("parameter", "parameters"), ("optimizer_state", "optimizer_state")):
        want = truth[key]["bytes"]
        assert abs(split[ours] / want - 1) <= TOLERANCE, (name, ours, split[ours], want)
        named, live = _bytes_of(bd, ours, truth[key]["blocks"], end)
        assert live == want and named == want, (name, ours, named, live, want)
    total = sum(split.values())
    assert split["unknown"] <= 0.05 * total, split


@pytest.mark.parametrize("name", RANKS)
def test_unknown_is_at_most_five_percent_at_the_peak(name):
    _truth, _snap, bd = _load(name)
    k = int(np.argmax(bd.requested))
    split = bd.split_at(k)
    assert split["unknown"] <= 0.05 * sum(split.values()), split


@pytest.mark.parametrize("name", RANKS)
def test_gradient_shards_before_the_last_step(name):
    """The last iteration's gradient shards are live when its optimizer step starts and
    are named gradients, byte for byte what the program read from ``.grad``."""
    truth, snap, bd = _load(name)
    iv = bd.intervals
    last = bd.iterations[-1]
    rows = np.flatnonzero(snap.trace.device == bd.device)
    made = (iv.start >= last.start) & (iv.start <= last.end)
    ids = np.flatnonzero(made)
    ids = ids[
        np.isin(snap.trace.addr[rows[iv.start[ids]]], [p for p, _ in truth["gradients"]["blocks"]])
    ]
    assert len(ids), "none of the gradient shards was made in the last iteration"
    # Just before zero_grad frees the first of them (after the optimizer step).
    at = int(iv.end[ids].min()) - 1
    assert at >= int(iv.start[ids].max())
    phases = bd.phases.phase[last.start : at + 1]
    assert (phases == PH_BACKWARD).any()
    named, live = _bytes_of(bd, "gradient", truth["gradients"]["blocks"], at)
    want = truth["gradients"]["bytes"]
    # The shards are views of one flat reduce-scatter output per block: the blocks
    # the program saw are those outputs, whole.
    assert live >= want * (1 - TOLERANCE) and named == live, (named, live, want)


@pytest.mark.parametrize("name", RANKS)
def test_gathered_parameters_and_communication_buffers_are_named(name):
    truth, snap, bd = _load(name)
    iv = bd.intervals
    rows = np.flatnonzero(snap.trace.device == bd.device)
    made = iv.start >= 0
    addr = np.full(len(iv), -1, np.int64)
    addr[made] = snap.trace.addr[rows[iv.start[made]]]
    gathered = CATEGORY_NAMES.index("parameter_gathered")
    seen = {(int(p), int(n)) for p, n in truth["gathered_parameters"]["blocks"]}
    ours = {
        (int(a), int(s))
        for a, s in zip(addr[bd.category == gathered], iv.requested[bd.category == gathered])
    }
    assert seen and seen <= ours, sorted(seen - ours)[:5]
    # In backward the blocks' parameters are gathered again (or kept) and the gradients
    # go through a reduce-scatter buffer: both named, none left as activations.
    comm = CATEGORY_NAMES.index("communication")
    assert (bd.category == comm).any()
    in_backward = made & (bd.phases.phase[np.maximum(iv.start, 0)] == PH_BACKWARD)
    assert (bd.category[in_backward] == comm).any()


@pytest.mark.parametrize("name", RANKS)
def test_sharding_note_says_what_more_ranks_would_hold(name):
    truth, _snap, bd = _load(name)
    end = bd.n_events - 1
    sh = bd.sharding(end)
    assert sh is not None and sh.world_size == truth["world_size"] == 2
    state = truth["parameters"]["bytes"] + truth["optimizer_state"]["bytes"]
    # FSDP2's gradient shards are freed by zero_grad(set_to_none); FSDP1 keeps its
    # FlatParameter's sharded gradient (and on one rank the last blocks' unsharded ones,
    # whose reduce-scatter had not freed them when the snapshot was taken).
    grads = sh.shards["gradient"]
    assert (grads >= truth["gradients"]["bytes"]) if name.startswith("fsdp1") else grads == 0, grads
    state += grads
    assert sh.model_state == state
    assert sh.model_state_with(4) == state // 2
    assert sh.gathered_peak > 0 and sh.communication_peak > 0
    assert "over 2 ranks" in sh.note() and "with 4 ranks" in sh.note()


def test_a_run_without_fsdp_has_no_sharding():
    name = "gpt2_adamw_fp32"
    snap = load_snapshot(TRUTH / f"{name}.pickle.xz", use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False))
    assert bd.sharding(bd.n_events - 1) is None
    for c in ("parameter_gathered", "communication"):
        assert not (bd.category == CATEGORY_NAMES.index(c)).any()


DECODER = {2: "fsdp2_decoder_b2", 4: "fsdp2_decoder", 8: "fsdp2_decoder_b8"}


@pytest.mark.parametrize("rank", [0, 1])
def test_per_rank_batch_prediction_against_the_same_run_at_other_batches(rank):
    """The decoder ran at batch 2, 4 and 8 (fresh torchrun each): from each rank's
    recording the peak reserved at the other two batches is within 2 % of that rank's real
    peak (gathered parameters and communication buffers do not scale; the activations
    do), or an estimate whose range holds it."""
    from fractions import Fraction

    from tests.workloads import batch_prediction_table as table
    from vramscope.viewer.model.remedies import batch_scale

    ran = 0
    for b0, n0 in DECODER.items():
        case, j, _ = table.case_of(TRUTH / f"{n0}_rank{rank}.pickle.xz")
        for b1, n1 in DECODER.items():
            if b1 == b0:
                continue
            p = batch_scale.predict(case, j, Fraction(b1, b0), None, None, b0)
            real = table.real_peak_reserved(TRUTH / f"{n1}_rank{rank}.pickle.xz")
            rng = p.range
            assert abs(p.peak / real - 1) <= 0.02 or (
                p.is_estimate and rng is not None and rng[0] <= real <= rng[1]
            ), (b0, b1, p.peak, real, rng)
            ran += 1
    assert ran == 6


@pytest.mark.parametrize("name", RANKS)
def test_mixed_precision_is_offered_only_where_the_run_gathers_in_full_precision(name):
    """bf16 autocast is a remedy for the fp32 GPT-2 under FSDP2, not for the runs whose
    MixedPrecisionPolicy / MixedPrecision already gather parameters in bf16 (the program
    wrote which it used)."""
    from vramscope.viewer.model.remedies.advise import advise
    from vramscope.viewer.model.whatif.predictions import prepare

    truth, snap, _bd = _load(name)
    a = advise(prepare(snap, device=int(truth["device"])))
    offered = any(r.remedy == "bf16_autocast" for r in a.remedies)
    assert offered is (truth["mixed_precision"] == "none"), (name, offered)
    assert a.sharding is not None and a.sharding["world_size"] == 2
    assert any(n.startswith("sharded (FSDP) over 2 ranks") for n in a.notes)
