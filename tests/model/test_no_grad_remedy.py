"""The no_grad_forward remedy (viewer/model/remedies/no_grad.py) against real runs.

A forward pass without ``torch.no_grad()`` whose graph no backward uses (a validation
forward reduced with ``.item()``) is found in the recording and re-simulated with its
saved tensors freed where a no-grad forward frees them.  The pairs of
tests/workloads/truth/record_all.py (``*_val_grad`` / ``*_val_nograd``, kind
``train_validate``) hold the prediction against the same program run with no_grad.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import edit, evidence, no_grad
from vramscope.viewer.model.remedies.advise import advise
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

ROOT = Path(__file__).resolve().parents[2]
TRUTH = ROOT / "tests" / "data" / "truth"
REMEDY = "no_grad_forward"
TOLERANCE = 0.05
RECORD = (
    "recorded on the GPU machine by `python3 tests/workloads/truth/record_all.py --out "
    "$OUT --only gpt2_val,vit_val` and unpacked into tests/data/truth (unpack.py)"
)


def _record_all():
    spec = importlib.util.spec_from_file_location(
        "record_all", ROOT / "tests" / "workloads" / "truth" / "record_all.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


VAL_PAIRS = [p for p in _record_all().PAIRS if p[2] == REMEDY]
HERE = [
    p
    for p in VAL_PAIRS
    if (TRUTH / f"{p[0]}.pickle.xz").exists() and (TRUTH / f"{p[1]}.pickle.xz").exists()
]
IDS = [p[0] for p in VAL_PAIRS]


def _here(a: str, b: str) -> None:
    if (a, b) not in {(x[0], x[1]) for x in HERE}:
        pytest.skip(f"{a} / {b} not in tests/data/truth yet: {RECORD}")


@functools.lru_cache(maxsize=None)
def _case(name: str):
    return prepare(load_snapshot(str(TRUTH / f"{name}.pickle.xz"), use_cache=False))


@functools.lru_cache(maxsize=None)
def _advice(name: str):
    return advise(_case(name))


def _remedy(adv, rid: str = REMEDY):
    return next((r for r in adv.remedies if r.remedy == rid), None)


def _peak_reserved(name: str) -> int:
    return int(
        json.loads((TRUTH / f"{name}.json").read_text())["memory_stats"]["reserved_bytes.all.peak"]
    )


# -- the pairs recorded for it ---------------------------------------------------------


def test_the_validation_pairs_are_recorded():
    assert len(VAL_PAIRS) == 2, VAL_PAIRS  # GPT-2 and ViT, each without and with no_grad
    if not HERE:
        pytest.skip(f"none of the {len(VAL_PAIRS)} pairs is here yet: {RECORD}")
    assert len(HERE) == len(VAL_PAIRS), f"only {HERE} of {VAL_PAIRS}"


@pytest.mark.parametrize("a,b,change,line_key", VAL_PAIRS, ids=IDS)
def test_offered_without_no_grad_near_the_real_no_grad_run_at_the_validation_line(
    a, b, change, line_key
):
    _here(a, b)
    adv = _advice(a)
    ranked = [r.remedy for r in adv.remedies]
    got = _remedy(adv)
    assert got is not None, f"advise offers no {REMEDY} on {a}: {ranked}"
    assert REMEDY in ranked[:2], ranked
    assert got.method == "simulated" and got.acts_on is not None and got.acts_on.any()
    real = _peak_reserved(b)
    assert abs(got.predicted_peak_reserved_bytes / real - 1) <= TOLERANCE, (
        f"{a}: predicted {got.predicted_peak_reserved_bytes}, real {real} with no_grad"
    )
    assert got.predicted_peak_reserved_bytes < adv.recorded_peak_reserved_bytes
    line = json.loads((TRUTH / f"{a}.truth.json").read_text())["code_lines"][line_key]
    assert got.where == f"{line['file']}:{line['line']}", (got.where, line)
    assert "allocations" in got.detail and "forward passes" in got.detail


@pytest.mark.parametrize("a,b,change,line_key", VAL_PAIRS, ids=[p[1] for p in VAL_PAIRS])
def test_not_offered_on_the_same_program_with_no_grad(a, b, change, line_key):
    _here(a, b)
    assert _remedy(_advice(b)) is None
    assert no_grad.find(_case(b), evidence.gather(_case(b), categories=None)) == []


# -- recordings without the pattern ----------------------------------------------------


@pytest.mark.parametrize("name", ["gpt2_adamw_fp32", "eval_no_grad"])
def test_not_offered_on_training_or_on_evaluation_under_no_grad(name):
    assert _remedy(_advice(name)) is None


def test_eval_keeping_its_outputs_is_free_kept_s_not_this():
    """Outputs (and so graphs) kept in a list are never freed in the window: no graph
    drop to see, so this remedy stays out and free_kept (keep .item(), use no_grad) stays."""
    adv = _advice("eval_keeps_outputs")
    assert _remedy(adv) is None
    kept = _remedy(adv, "free_kept")
    assert kept is not None and "no_grad" in kept.change
    assert adv.remedies[0].remedy == "free_kept"


@pytest.mark.slow
def test_no_other_recording_has_a_dropped_graph():
    """Training (fp32, bf16 autocast, checkpointing), sweeps, OOMs, eval under no_grad,
    CUDA-graph warm-ups, a million-event trace: no finding anywhere but the runs recorded
    without no_grad for it."""
    without = {p[0] for p in VAL_PAIRS}
    paths = [
        p
        for p in sorted(glob.glob(str(TRUTH / "*.pickle.xz")))
        if os.path.basename(p)[: -len(".pickle.xz")] not in without
    ]
    assert len(paths) >= 60
    paths += sorted(glob.glob(str(TRUTH.parent / "*.pickle*")))
    hits = {}
    for path in paths:
        case = prepare(load_snapshot(path, use_cache=False))
        found = no_grad.find(case, evidence.gather(case, categories=None))
        if found:
            hits[os.path.basename(path)] = [(f.where, f.count) for f in found]
    assert hits == {}


# -- an evaluation loop without no_grad that drops its outputs -------------------------


def _eval_dropping_outputs():
    """eval_keeps_outputs (GPT-2 batch 8, no no_grad, (loss, logits) kept in a list) with
    what each iteration kept freed at that iteration's end: the loop of
    ``loss.item()`` without no_grad, whose graphs go when the outputs do."""
    case = _case("eval_keeps_outputs")
    evd = evidence.gather(case, categories=None)
    reqs = case.requests
    n = len(reqs)
    alloc = reqs.kind == rq.ALLOC
    fw = np.flatnonzero(alloc & (evd.phase == evidence.FORWARD))
    starts = fw[evd.site[fw] == evd.site[fw[0]]]  # each iteration begins with its batch
    assert len(starts) == 6
    never = fw[evd.free_at[fw] == n]
    ends = np.r_[starts[1:] - 1, n - 1]
    k = ends[np.searchsorted(starts, never, side="right") - 1]
    return edit.freed_after(case, list(zip(never.tolist(), k.tolist())))


def test_an_eval_loop_dropping_its_graphs_is_predicted_as_the_real_no_grad_run():
    dropped = _eval_dropping_outputs()
    adv = advise(dropped)
    got = _remedy(adv)
    assert got is not None and adv.remedies[0] is got
    assert _remedy(adv, "free_kept") is None  # nothing is kept any more
    real = _peak_reserved("eval_no_grad")  # the same program under no_grad: 478 MiB
    assert abs(got.predicted_peak_reserved_bytes / real - 1) <= TOLERANCE, (
        got.predicted_peak_reserved_bytes,
        real,
    )
    # The line that ran the model (models.py's forward of the recorded program).
    assert got.where is not None and got.where.endswith("/truth/models.py:54")
    (f,) = no_grad.find(dropped, evidence.gather(dropped, categories=None))
    assert f.forwards == 6 and f.count >= 6 * 100


# -- the edit itself ---------------------------------------------------------------------


def test_freed_earlier_moves_frees_and_nothing_else():
    dropped = _eval_dropping_outputs()
    evd = evidence.gather(dropped, categories=None)
    (f,) = no_grad.find(dropped, evd)
    allocs, after = f.moves
    assert len(allocs) and (after > allocs).all() and (after < evd.free_at[allocs]).all()
    moved = no_grad.freed_earlier(dropped, allocs, after)
    a, b = dropped.requests, moved.requests
    assert len(a) == len(b)
    assert np.array_equal(np.bincount(a.kind, minlength=6), np.bincount(b.kind, minlength=6))
    # Allocations keep their order and sizes; each free still frees its allocation, later.
    assert np.array_equal(a.size[a.kind == rq.ALLOC], b.size[b.kind == rq.ALLOC])
    frees = np.flatnonzero((b.kind == rq.FREE) & (b.ref >= 0))
    assert (b.kind[b.ref[frees]] == rq.ALLOC).all() and (b.ref[frees] < frees).all()
    assert len(np.unique(b.ref[frees])) == len(frees)
    assert (np.diff(b.event) >= 0).all()  # the curve's x stays in order
    # Each moved free comes right after its request (``after`` is an allocation), behind
    # only other frees moved there.
    e2 = evidence.gather(moved, categories=None)
    a_rows, b_rows = np.flatnonzero(a.kind == rq.ALLOC), np.flatnonzero(b.kind == rq.ALLOC)
    new_alloc = b_rows[np.searchsorted(a_rows, allocs)]
    new_after = b_rows[np.searchsorted(a_rows, after)]
    freed = e2.free_at[new_alloc]
    assert (freed > new_after).all()
    not_free = np.cumsum(b.kind != rq.FREE)
    assert (not_free[freed] == not_free[new_after]).all()
    assert moved.simulate().peak_reserved < dropped.simulate().peak_reserved
    # Nothing to move, or a free asked to move later than recorded: the same stream.
    same = no_grad.freed_earlier(dropped, allocs[:1], evd.free_at[allocs[:1]] + 1)
    assert np.array_equal(same.requests.kind, a.kind) and np.array_equal(same.requests.ref, a.ref)
    assert no_grad.freed_earlier(dropped, allocs[:0], after[:0]) is dropped


def test_free_points_follow_the_repeated_blocks_and_keep_the_head():
    """One forward (drop 0): blocks of sites 1, 2 (two allocations, one call), 3, made
    twice; a one-off 9 in the body; the head 4, 5 after the last block."""
    site = np.array([1, 9, 2, 2, 3, 1, 2, 2, 3, 4, 5, 7], np.int32)
    rows = np.arange(11)
    alloc_rows = np.arange(12)
    free_at = np.full(12, 20, np.int64)
    drop = np.zeros(11, np.int64)
    a, k = no_grad.free_points(site, rows, drop, alloc_rows, free_at)
    got = dict(zip(a.tolist(), k.tolist()))
    # The first block goes at the same line's next call (the second block's).
    assert got[0] == 5 and got[2] == 6 and got[3] == 6 and got[4] == 8
    # A one-off in the body, and the last block (its lines do not come again): after the
    # next allocation.
    assert got[1] == 2 and all(got[r] == r + 1 for r in (5, 6, 7, 8))
    # The head (after the last block: the outputs) keeps its recorded free.
    assert 9 not in got and 10 not in got


@pytest.mark.slow
@pytest.mark.parametrize("val_no_grad", [False, True])
def test_the_workload_runs_on_the_cpu_and_marks_the_validation_line(tmp_path, val_no_grad):
    """record_one.py's train_validate kind off the GPU (an MLP: no snapshot): the truth
    file says what ran, and code_lines["validate"] is the line that calls the model."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    spec = {
        "name": "mlp_val",
        "kind": "train_validate",
        "family": "mlp",
        "batch": 4,
        "iters": 2,
        "optimizer": "SGD",
        "optimizer_kwargs": {"lr": 0.01},
        "val_batch": 8,
        "val_no_grad": val_no_grad,
        "val_eval_mode": True,
    }
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "workloads" / "truth" / "record_one.py"),
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--spec",
            json.dumps(spec),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    t = json.loads((tmp_path / "mlp_val.truth.json").read_text())
    assert t["kind"] == "train_validate" and not t["peaks_reset_per_iteration"]
    v = t["validate"]
    assert v["batch_size"] == 8 and v["no_grad"] is val_no_grad and v["eval_mode"] is True
    assert len(v["losses"]) == 2 and set(v) >= {"peak_reserved_bytes", "peak_allocated_bytes"}
    line = t["code_lines"]["validate"]
    assert "model(" in line["code"] and line["code"].endswith(".item()")
    assert Path(line["file"]).read_text().splitlines()[line["line"] - 1].strip() == line["code"]
