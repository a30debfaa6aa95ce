"""Phases where the recording's frees carry their allocation's stack.

vramscope's capture records history with ``context="alloc"`` on torch >= 2.10 with
Python < 3.13 (a stack taken at a free can break a checkpointed backward there), and torch
then records each free with the stack its block was allocated with.  Such a free tells
nothing of when it happened: an activation freed in backward carries its forward frames.
Read as the moment's evidence, every backward was cut into dozens of forward and backward
runs (the zoo's GPT-2: 372 runs in three iterations).  Truth: the zoo's programs (real
H200 recordings, tests/workloads/zoo.py) ran one forward and one backward per step, or as
many as their gradient accumulation says (their truth files).
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from tests import shared_data
from tests.conftest import DATA
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.categories import MemoryBreakdown
from vramscope.viewer.model.categories.iterations import PH_BACKWARD, PH_FORWARD, moment_stacks
from vramscope.viewer.model.core.snapshot import Action
from vramscope.viewer.model.replay.timeline import build_timeline

ZOO = DATA / "zoo"
NAMES = [
    "dec_gpt2_sdpa_adamw_fp32_b8",
    "enc_bert_mlm_adamw_fp32_b8",
    "trn_bert_adamw_fp32_b8",
    "trn_gpt2_fusedadamw_bf16_accum2_b8",
    "tv_resnet18_sgdm_fp32_b32",
    "peft_lora_llama_bf16base_b8",
]


@functools.lru_cache(maxsize=None)
def _loaded(name: str):
    snap = load_snapshot(ZOO / f"{name}.pickle.xz")
    tl = build_timeline(snap, None, keyframes=False)
    dev = min(tl.devices)
    return snap, tl.replay(dev), MemoryBreakdown.build(snap, tl, dev)


def _truth(name: str) -> dict:
    return json.loads((ZOO / f"{name}.truth.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_the_recordings_frees_repeat_their_allocations_stacks(name):
    """The premise, on the files themselves: every requested free's stack is its
    allocation's (so none can say when it happened)."""
    _snap, rep, _bd = _loaded(name)
    frees = np.flatnonzero(rep.action == Action.FREE_REQUESTED)
    made = rep.alloc_of[frees]
    linked = made >= 0
    assert linked.sum() > 100
    assert (rep.stack[frees[linked]] == rep.stack[made[linked]]).all()
    assert (moment_stacks(rep)[frees[linked]] == -1).all()


@pytest.mark.parametrize("name", NAMES)
def test_each_step_runs_as_many_forwards_and_backwards_as_the_program_did(name):
    _snap, _rep, bd = _loaded(name)
    ph = bd.phases
    runs = ph.phase_runs()
    value = ph.phase[runs.start]
    t = _truth(name)
    passes = int(t["settings"].get("accum", 1))
    complete = [it for it in ph.iterations if it.end - it.start > 10]
    assert len(complete) >= int(t["iterations"])
    for it in complete[: int(t["iterations"])]:
        inside = (runs.start >= it.start) & (runs.start <= it.end)
        assert int((inside & (value == PH_FORWARD)).sum()) == passes, (name, it)
        assert int((inside & (value == PH_BACKWARD)).sum()) == passes, (name, it)


@shared_data.MARK
def test_a_free_with_a_stack_of_its_moment_keeps_its_evidence():
    """Files that record the moment's stack at frees (context="all") keep it: the shared
    snapshot of ResNet-50 training mixes both kinds, and only the repeated ones go."""
    path = shared_data.SHARED / "snapshots" / "resnet50_train.pickle"
    if not path.exists():
        shared_data.missing(str(path))
    snap = load_snapshot(path)
    tl = build_timeline(snap, None, keyframes=False)
    rep = tl.replay(min(tl.devices))
    frees = np.flatnonzero(rep.action == Action.FREE_REQUESTED)
    made = rep.alloc_of[frees]
    ok = made >= 0
    own = rep.stack[frees[ok]] != rep.stack[made[ok]]
    assert own.any() and (~own).any()
    kept = moment_stacks(rep)[frees[ok]]
    assert (kept[own] == rep.stack[frees[ok]][own]).all()
    assert (kept[~own] == -1).all()
