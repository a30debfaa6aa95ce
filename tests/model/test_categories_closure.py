"""Forward, loss and backward run inside ``optimizer.step(closure)`` (PyTorch Lightning's
automatic optimisation, LBFGS-style loops): what the closure allocates is activations,
temporaries and gradients by the same rules as outside the step; only the optimizer's own
code makes optimizer state.  The batch judgement sees the same."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from vramscope.viewer.model import load_bytes, load_snapshot
from vramscope.viewer.model.categories import CATEGORY_NAMES, REASONS, MemoryBreakdown
from vramscope.viewer.model.categories import stack_kinds as sk
from vramscope.viewer.model.replay.timeline import build_timeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic_training as syn

VRAMSCOPE = str(Path(sys.executable).with_name("vramscope"))
NESTA = shared_data.EXTERNAL / "Nesta-gitU_discrete_diffusion-memory_snapshot.json.xz"


def _breakdown(data: bytes) -> MemoryBreakdown:
    snap = load_bytes(data)
    return MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)


@pytest.fixture(scope="module")
def closure_run():
    data, tr = syn.training_run(iterations=5, layers=4, closure=True)
    return data, tr, _breakdown(data)


def test_closure_loop_every_allocation_gets_its_meant_category(closure_run):
    _, tr, bd = closure_run
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


def test_closure_loop_iterations_and_phases_as_without_a_closure(closure_run):
    _, _, bd = closure_run
    plain = _breakdown(syn.training_run(iterations=5, layers=4)[0])
    assert len(bd.iterations) == len(plain.iterations) == 5
    assert all(it.complete and it.kind == "train" for it in bd.iterations)
    assert not any(it.phases_guessed for it in bd.iterations)
    assert [it.peak_phase for it in bd.iterations] == [it.peak_phase for it in plain.iterations]
    # At each iteration's peak the split is the plain loop's, byte for byte.
    for a, b in zip(bd.iterations, plain.iterations):
        assert bd.split_at(a.peak_event) == plain.split_at(b.peak_event)


def _one_alloc_kinds(frames: list[dict]) -> int:
    tr = syn.TrainingTrace()
    tr.alloc(1 << 20, frames, "unknown")
    snap = load_bytes(pickle.dumps(tr.snapshot(), protocol=4))
    kinds = sk.stack_kinds(snap)
    stack = int(snap.trace.stack[-1])
    return int(kinds[stack])


def test_a_users_own_optimizer_step_stays_the_optimizers():
    """A step written in the program's own file runs under ``optimizer.py``'s dispatch: what
    it allocates is the optimizer's, not a closure's; a module's forward under that step is
    the closure's wherever the step was written."""
    own_step = [
        syn._f(syn.USER, 120, "step"),
        syn._f(f"{syn.TORCH}/optim/optimizer.py", 533, "wrapper"),
        syn._f(syn.USER, 46, "main"),
    ]
    k = _one_alloc_kinds(own_step)
    assert k & sk.K_OPTIM and not k & sk.K_CLOSURE
    forward_in_own_step = syn.FORWARD(10)[:-1] + own_step
    k = _one_alloc_kinds(forward_in_own_step)
    assert k & sk.K_CLOSURE and not k & sk.K_OPTIM
    # The program's loss inside a concrete optimizer's step: the closure's.
    k = _one_alloc_kinds(syn.in_closure(syn.LOSS))
    assert k & sk.K_CLOSURE and not k & sk.K_OPTIM
    # The optimizer's own state and temporaries keep their kinds.
    k = _one_alloc_kinds(syn.OPT_INIT)
    assert k & sk.K_OPT_INIT and k & sk.K_OPTIM and not k & sk.K_CLOSURE


def test_a_compiled_optimizer_step_stays_the_optimizers():
    """``torch.compile`` of the step: Inductor's generated code (and Triton's launcher) run
    inside the step; they are not the program's closure."""
    frames = [
        syn._f("/tmp/torchinductor_root/ab/cabxyz.py", 120, "call"),
        syn._f("/usr/lib/python3.12/site-packages/triton/runtime/jit.py", 500, "run"),
        syn._f(f"{syn.TORCH}/_inductor/output_code.py", 600, "__call__"),
        syn._f(f"{syn.TORCH}/_dynamo/eval_frame.py", 700, "_fn"),
        syn._f(f"{syn.TORCH}/optim/adamw.py", 220, "step"),
        syn._f(f"{syn.TORCH}/optim/optimizer.py", 533, "wrapper"),
        syn._f(syn.USER, 46, "main"),
    ]
    k = _one_alloc_kinds(frames)
    assert k & sk.K_OPTIM and not k & sk.K_CLOSURE


def test_a_torch_install_under_a_folder_named_torch_is_not_torch_itself():
    """Lightning installed in ``/opt/torch/.venv/...site-packages/pytorch_lightning``: its
    closure frames are a library's, not torch's."""
    venv = "/opt/torch/.venv/lib/python3.12/site-packages"
    frames = [
        syn._f(f"{venv}/pytorch_lightning/loops/optimization/automatic.py", 1, "closure"),
        syn._f(f"{venv}/torch/optim/adam.py", 2, "step"),
        syn._f(f"{venv}/torch/optim/optimizer.py", 3, "wrapper"),
        syn._f(syn.USER, 46, "main"),
    ]
    k = _one_alloc_kinds(frames)
    assert k & sk.K_CLOSURE and not k & sk.K_OPTIM


def _whatif(path: Path, scale: float) -> dict:
    out = subprocess.run(
        [VRAMSCOPE, "whatif", str(path), "--batch-scale", str(scale), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    ans = json.loads(out.stdout)
    return ans[0] if isinstance(ans, list) else ans


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_batch_whatif_of_a_closure_loop_is_the_plain_loops(tmp_path, scale):
    """The same program with its forward inside the step: what scales with the batch is
    the same allocations, so the predicted run is the same."""
    plain = tmp_path / "plain.pickle"
    plain.write_bytes(syn.training_run(iterations=4, layers=4)[0])
    closure = tmp_path / "closure.pickle"
    closure.write_bytes(syn.training_run(iterations=4, layers=4, closure=True)[0])
    a, b = _whatif(plain, scale), _whatif(closure, scale)
    assert b["peak_reserved_bytes"] == a["peak_reserved_bytes"]
    assert b["peak_allocated_bytes"] == a["peak_allocated_bytes"]


@shared_data.needs(NESTA)
def test_lightning_file_forward_sites_are_activations_not_optimizer_state():
    """A Lightning program (training_step inside ``optimizer.step(closure)``) that ran out of
    memory in its forward: what its model's forward sites hold at the peak is activations,
    and optimizer state is not the largest category."""
    snap = load_snapshot(NESTA, use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), None)
    k = int(np.argmax(bd.requested))
    split = bd.split_at(k)
    assert max(split, key=lambda c: split[c]) == "activation"
    assert split["optimizer_state"] < split["activation"] / 10
    # The allocations live at the peak that a module's forward made, inside the step.
    iv = bd.intervals
    live = np.flatnonzero((iv.start <= k) & (iv.end > k))
    kinds = bd.phases.stack_kinds[iv.stack[live]]
    forward = live[((kinds & sk.K_MODULE_CALL) != 0) & ((kinds & sk.K_CLOSURE) != 0)]
    fwd_bytes = int(iv.requested[forward].sum())
    assert fwd_bytes > 0.9 * int(bd.requested[k])
    cats = {CATEGORY_NAMES[c] for c in bd.category[forward].tolist()}
    assert cats <= {"activation", "temporary"}
    act = forward[bd.category[forward] == CATEGORY_NAMES.index("activation")]
    assert int(iv.requested[act].sum()) > 0.9 * fwd_bytes


@shared_data.needs(NESTA)
def test_lightning_file_advise_sees_what_scales_with_the_batch():
    """advise's 'of which' line: what its forward holds scales with the batch (it said 0 B
    when the closure's forward was taken for the optimizer's work), and the 8-bit optimizer
    is not its first remedy."""
    out = subprocess.run(
        [VRAMSCOPE, "advise", str(NESTA), "--json"], capture_output=True, text=True, check=False
    )
    ans = json.loads(out.stdout)
    d = ans[0] if isinstance(ans, list) else ans
    split = d["split_at_peak"]
    total = split["scales_with_batch"] + split["model_state"] + split["other_fixed"]
    assert split["scales_with_batch"] > 0.9 * total
    assert d["largest_scale_that_fits"] is not None and d["largest_scale_that_fits"] > 0
    assert d["remedies"] and d["remedies"][0]["remedy"] != "8bit_optimizer"
