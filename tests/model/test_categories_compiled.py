"""Categories of torch.compile programs against the programs' own truth.

Under ``torch.compile`` the backward runs from AOTAutograd's compiled ``autograd.Function``
(``torch/_functorch/_aot_autograd/runtime_wrappers.py``) calling Inductor's generated module
(``/tmp/torchinductor_*/….py``, which reads as the program's own code), on autograd's
device thread: without those frames naming a backward, no backward phase was found, the
gradients it made were taken for inputs or unknown, and a few percent of the peak was
unknown.  Recordings: the zoo's compile family (tests/workloads/zoo.py; default mode and
max-autotune), each with its truth (the gradients' blocks, taken at the snapshot)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import DATA
from tests.native_gate import needs
from vramscope.viewer.model.categories import CATEGORY_NAMES, MemoryBreakdown
from vramscope.viewer.model.categories import native_passes as native
from vramscope.viewer.model.categories import stack_kinds as sk
from vramscope.viewer.model.categories.iterations import PH_BACKWARD, PH_FORWARD
from vramscope.viewer.model.core.frames import CAT_TORCH, CAT_USER
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline

ZOO = DATA / "zoo"
#: Default mode (gpt2, llama with fused AdamW, resnet18) and max-autotune (ViT).
COMPILED = (
    "cmp_default_gpt2_adamw_fp32_b4",
    "cmp_default_llama_fusedadamw_bf16_b8_t128",
    "cmp_default_resnet18_sgdm_bf16_b16",
    "cmp_mat_vit_tiny_adamw_bf16_b16",
)
#: reduce-overhead: CUDA graph trees.
CUDAGRAPHS = "cmp_ro_encoder_adamw_fp32_b8"
GRADIENT = CATEGORY_NAMES.index("gradient")


def _truth(name: str) -> dict:
    return json.loads((ZOO / f"{name}.truth.json").read_text())


def _breakdown(name: str) -> MemoryBreakdown:
    snap = load_snapshot(ZOO / f"{name}.pickle.xz", use_cache=False)
    return MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)


def _live_at_end(bd: MemoryBreakdown, blocks: list) -> np.ndarray:
    """Interval ids of the allocations alive at the end at the truth blocks' addresses."""
    iv = bd.intervals
    alive = np.flatnonzero(iv.end >= bd.n_events)
    addrs = np.array([a for a, _ in blocks], np.int64)
    return alive[np.isin(iv.addr[alive], addrs)]


@pytest.mark.parametrize("name", COMPILED)
def test_gradients_of_a_compiled_backward(name):
    """Every gradient block the program held at the end is a gradient, and the gradient
    bytes at the end are the program's within 2 %; the forward and the compiled backward
    are found in every complete training iteration."""
    t = _truth(name)
    assert t["compiled"] and t["loop"] == "plain" and t["set_to_none"]
    bd = _breakdown(name)
    ids = _live_at_end(bd, t["gradients"]["blocks"])
    assert int(bd.intervals.requested[ids].sum()) == t["gradients"]["bytes"]
    wrong = ids[bd.category[ids] != GRADIENT]
    assert not len(wrong), [bd.explain(int(i)) for i in wrong[:3]]
    got = bd.split_at(bd.n_events - 1)["gradient"]
    assert abs(got - t["gradients"]["bytes"]) <= 0.02 * t["gradients"]["bytes"]
    train = [it for it in bd.iterations if it.complete]
    assert len(train) >= 3 and all(it.kind == "train" for it in train)
    for it in train:
        ph = bd.phases.phase[it.start : it.end + 1]
        assert (ph == PH_FORWARD).any() and (ph == PH_BACKWARD).any()


@pytest.mark.parametrize("name", COMPILED)
def test_little_unknown_at_the_peak(name):
    """At the peak at most 2 % of the requested bytes is unknown (the compiled backward's
    allocations had no phase: 2-9 % was)."""
    bd = _breakdown(name)
    k = int(np.argmax(bd.requested))
    split = bd.split_at(k)
    assert split["unknown"] <= 0.02 * bd.requested[k], split


def test_gradients_alive_at_the_end_of_an_eager_recording():
    """A recording that ends after a backward with frees alone (the loop's last batch and
    outputs, freed with the stacks of their allocations: no evidence) ends inside the
    backward's run; its iteration is over, so what it made and still holds is the
    gradients (they were temporaries of a backward that never ended)."""
    name = "dec_llama_eager_sgdm_fp32_b8"
    t = _truth(name)
    assert t["loop"] == "plain" and not t["compiled"]
    bd = _breakdown(name)
    assert bd.phases.phase[-1] == PH_BACKWARD  # the closing frees continue its run
    ids = _live_at_end(bd, t["gradients"]["blocks"])
    assert int(bd.intervals.requested[ids].sum()) == t["gradients"]["bytes"]
    assert (bd.category[ids] == GRADIENT).all()
    assert bd.split_at(bd.n_events - 1)["gradient"] == t["gradients"]["bytes"]


def test_cuda_graph_recording_backward():
    """reduce-overhead: the run that records the backward's CUDA graph allocates the
    gradients in the graph's private pool, from the same compiled backward (under
    cudagraph_trees' recording frames): they are gradients.  (Later replays write
    them in place without the allocator: it counts them free, as memory_stats does.)"""
    t = _truth(CUDAGRAPHS)
    assert t["compiled"] == "reduce-overhead"
    bd = _breakdown(CUDAGRAPHS)
    iv = bd.intervals
    addrs = np.array([a for a, _ in t["gradients"]["blocks"]], np.int64)
    last = {}
    for i in np.flatnonzero(np.isin(iv.addr, addrs) & (iv.start >= 0)).tolist():
        a = int(iv.addr[i])
        if a not in last or iv.start[i] > iv.start[last[a]]:
            last[a] = i
    ids = np.array(sorted(last.values()), np.int64)
    assert len(ids) == len(addrs)
    assert (bd.category[ids] == GRADIENT).all(), [
        bd.explain(int(i)) for i in ids[bd.category[ids] != GRADIENT][:3]
    ]
    assert (bd.phases.phase[iv.start[ids]] == PH_BACKWARD).all()


def test_aot_autograd_frames():
    """AOTAutograd's backward entry points name a backward; its forward wrappers, the
    generated Inductor module and autograd.Function.apply (forward and backward alike) do
    not."""
    rw = "/usr/lib/python3/site-packages/torch/_functorch/_aot_autograd/runtime_wrappers.py"
    for name in ("backward", "_backward_impl"):
        assert sk.frame_kind(rw, name, CAT_TORCH) & sk.K_BACKWARD, name
    old = rw.replace("runtime_wrappers.py", "jit_compile_runtime_wrappers.py")
    assert sk.frame_kind(old, "call_compiled_backward", CAT_TORCH) & sk.K_BACKWARD
    for name in ("forward", "runtime_wrapper", "inner_fn"):
        assert not sk.frame_kind(rw, name, CAT_TORCH) & sk.K_BACKWARD, name
    fn = "/usr/lib/python3/site-packages/torch/autograd/function.py"
    assert not sk.frame_kind(fn, "apply", CAT_TORCH) & sk.K_BACKWARD
    gen = "/tmp/torchinductor_root/ct/ctu22nqikmulvozzok6gd4efdq4i64.py"
    assert not sk.frame_kind(gen, "call", CAT_USER) & sk.K_BACKWARD


def test_cuda_graphs_hold_the_gradients_their_replays_write():
    """After the recording iteration the backward graph's replays write the gradients in
    its private pool, where the allocator counts them free: the graphs' held outputs at
    the end are the program's gradients within 2 %, none of them counted allocated; an
    instant inside the recording iteration, or one in the same phase as the program's
    freeing (which side of the replay is not recorded), holds none."""
    t = _truth(CUDAGRAPHS)
    bd = _breakdown(CUDAGRAPHS)
    end = bd.n_events - 1
    held = bd.graph_held_at(end)
    assert set(held) == {"gradient"}, held
    assert abs(held["gradient"] - t["gradients"]["bytes"]) <= 0.02 * t["gradients"]["bytes"]
    assert bd.split_at(end)["gradient"] == 0
    co = bd.capture_outputs()
    recording = int(co.pool_last_iter.max())
    it = bd.iterations[recording]
    assert not any(bd.graph_held_at(k) for k in range(it.start, it.end + 1, 25))
    first = bd.iterations[recording + 1].start
    assert not bd.graph_held_at(first)  # the step's start: before the program frees


def test_no_graph_held_memory_without_cuda_graphs():
    bd = _breakdown(COMPILED[0])
    assert not len(bd.capture_outputs().ids)
    assert bd.graph_held_at(bd.n_events - 1) == {}


@needs(native.available(), "the catcore extension is not built")
@pytest.mark.parametrize("name", [COMPILED[1], CUDAGRAPHS])
def test_c_and_numpy_agree_on_compiled_programs(name, monkeypatch):
    """The C passes and their numpy references give the same phases and categories."""
    fast = _breakdown(name)
    monkeypatch.setattr(native, "_cat", None)
    slow = _breakdown(name)
    for col in ("category", "reason"):
        assert np.array_equal(getattr(fast, col), getattr(slow, col)), col
    for col in ("evidence", "phase", "guessed"):
        assert np.array_equal(getattr(fast.phases, col), getattr(slow.phases, col)), col


def test_parameters_cast_to_fp32_after_the_model_was_built_are_parameters():
    """Part of a bf16 model cast to fp32 for training after it was built
    (``p.data = p.data.float()``, as peft's k-bit preparation does) is made by the
    program's own line, before its first forward, with no module's stack: by the sizes of
    the gradients it gets, parameters (they were unknown): the whole model's bytes, but
    for the rotary embedding's buffers (128 bytes: a module's buffer is a parameter here)."""
    name = "dec_llama_partial_bf16base_b8"
    t = _truth(name)
    assert t["settings"]["train_only"] and t["parameters_trainable"]["bytes"] > 0
    bd = _breakdown(name)
    k = int(np.argmax(bd.requested))
    split = bd.split_at(k)
    assert 0 <= split["parameter"] - t["parameters"]["bytes"] <= 1024, split
    assert split["unknown"] <= 0.02 * bd.requested[k], split
