"""Generation (``model.generate()`` with a KV cache under inference_mode): requests and
decode steps instead of one iteration per token, and the ``kv_cache`` category.

On a generation loop written as a trace (every allocation's meant category known), on
the ground-truth recordings of tests/workloads/truth (kind ``generate``: the program
read its cache's bytes after every forward pass), and on training recordings, which
must come out as before (no KV cache, the same iterations)."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from vramscope.viewer.model import load_bytes, load_snapshot
from vramscope.viewer.model.categories import (
    CATEGORY_NAMES,
    REASONS,
    MemoryBreakdown,
    describe_iterations,
)
from vramscope.viewer.model.replay.timeline import build_timeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic_training as syn

TRUTH = Path(__file__).resolve().parents[1] / "data" / "truth"
KV = CATEGORY_NAMES.index("kv_cache")
TF = "/usr/lib/python3.12/site-packages/transformers"
_f = syn._f


def _module_call(inner: list[dict], line: int) -> list[dict]:
    """``inner`` called from a module's forward (model.py ``line``) inside generate()."""
    return inner + [
        _f(f"{syn.TORCH}/nn/modules/module.py", 1790, "_call_impl"),
        _f(f"{syn.TORCH}/nn/modules/module.py", 1779, "_wrapped_call_impl"),
        _f(syn.MODEL, line, "forward"),
        _f(f"{syn.TORCH}/nn/modules/module.py", 1790, "_call_impl"),
        _f(f"{syn.TORCH}/nn/modules/module.py", 1779, "_wrapped_call_impl"),
        _f(f"{TF}/generation/utils.py", 2800, "_sample"),
        _f(f"{TF}/generation/utils.py", 2400, "generate"),
        _f(syn.USER, 70, "main"),
    ]


PROJ = _module_call([_f(f"{syn.TORCH}/nn/modules/linear.py", 125, "forward")], 30)
CACHE = _module_call([_f(f"{TF}/cache_utils.py", 120, "update")], 31)
LOGITS = _module_call([_f(f"{syn.TORCH}/nn/modules/linear.py", 125, "forward")], 50)
GEN = [
    _f(f"{TF}/generation/utils.py", 2850, "_sample"),
    _f(f"{TF}/generation/utils.py", 2400, "generate"),
    _f(syn.USER, 70, "main"),
]
PROMPT = [_f(syn.USER, 66, "main")]
END = [_f(syn.USER, 72, "main")]
HOOK = _module_call([_f(syn.USER, 12, "keep_features")], 40)


def generation_run(
    requests=((1, 16, 12), (4, 40, 9), (2, 100, 6)),
    layers: int = 3,
    width: int = 256,
    cut: bool = False,
):
    """A generate() loop per request (batch, prompt, new tokens): a concatenating cache
    (the prefill keeps its projection's storage; each decode step makes the longer key
    and value and frees the old ones inside the forward pass).  Returns (pickle bytes,
    the builder, per request the KV bytes after its last forward pass)."""
    tr = syn.TrainingTrace()
    for j in range(layers):
        tr.alloc(width * width * 4 + 1024 * j, syn.APPLY, "parameter")
        tr.alloc(3 * width * width * 4 + 1024 * j, syn.APPLY, "parameter")
    vocab = 5000
    kv_end = []
    for r, (b, t, new) in enumerate(requests):
        prompt = tr.alloc(b * t * 8, PROMPT, "input")
        cache: list[list[int]] = [[] for _ in range(layers)]
        logits = None
        tokens = None
        for step in range(new):
            t_in = t if step == 0 else 1
            if step:
                # The last logits' argmax and the longer ids: generate()'s own code.
                nxt = tr.alloc(b * 8, GEN, "temporary")
                tr.free(logits, GEN)
                ids = tr.alloc(b * (t + step) * 8, GEN, "input")
                tr.free(nxt, GEN)
                if tokens is not None:
                    tr.free(tokens, GEN)
                tokens = ids
            for j in range(layers):
                qkv = tr.alloc(b * t_in * 3 * width * 4, PROJ, "temporary")
                if step == 0:
                    cache[j] = [qkv]  # key and value: views of the projection
                    tr.category_of_event[max(tr.category_of_event)] = "kv_cache"
                else:
                    length = t + step
                    k = tr.alloc(b * length * width * 4, CACHE, "kv_cache")
                    v = tr.alloc(b * length * width * 4, CACHE, "kv_cache")
                    for old in cache[j]:
                        tr.free(old, CACHE)
                    cache[j] = [k, v]
                    tr.free(qkv, PROJ)
                tmp = tr.alloc(b * t_in * 4 * width * 4, PROJ, "temporary")
                tr.free(tmp, PROJ)
            logits = tr.alloc(b * vocab * 4, LOGITS, "activation")
        kv_end.append(sum(tr.live[a][1] for c in cache for a in c))
        if cut and r == len(requests) - 1:
            break
        tr.free(logits, GEN)
        if tokens is not None:
            tr.free(tokens, GEN)
        for c in cache:
            for a in c:
                tr.free(a, END)
        tr.free(prompt, END)
    return pickle.dumps(tr.snapshot(), protocol=4), tr, kv_end


def build(data: bytes) -> MemoryBreakdown:
    snap = load_bytes(data)
    return MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False))


def last_forward_end(bd: MemoryBreakdown, it) -> int:
    """The last event of the last forward pass of iteration ``it``."""
    ph = bd.phases.phase[it.start : it.end + 1]
    return it.start + int(np.flatnonzero(ph == 1)[-1])


# -- a generation loop written as a trace ---------------------------------------------------
def test_synthetic_requests_replace_the_per_token_iterations():
    data, _, _ = generation_run()
    bd = build(data)
    its = bd.iterations
    assert [it.kind for it in its] == ["generate"] * 3
    assert [it.decode_steps for it in its] == [11, 8, 5]
    assert all(it.complete for it in its)
    d = its[0].to_dict()
    assert d["kind"] == "generate" and d["decode_steps"] == 11
    assert (
        describe_iterations([it.to_dict() for it in its])
        == "3 generation requests (prefill + 11, 8 and 5 decode steps)"
    )
    assert bd.leaks == []


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut"])
def test_synthetic_every_allocation_gets_its_meant_category(cut):
    data, tr, _ = generation_run(cut=cut)
    bd = build(data)
    iv = bd.intervals
    made = np.flatnonzero(iv.start >= 1)
    meant = np.array(
        [CATEGORY_NAMES.index(tr.category_of_event[int(s) - 1]) for s in iv.start[made]]
    )
    wrong = np.flatnonzero(meant != bd.category[made])
    assert not len(wrong), [
        (
            int(iv.start[made[i]]),
            CATEGORY_NAMES[meant[i]],
            CATEGORY_NAMES[bd.category[made[i]]],
            REASONS[bd.reason[made[i]]].code,
        )
        for i in wrong[:10]
    ]


def test_synthetic_kv_cache_at_each_requests_last_step_is_the_programs():
    data, _, kv_end = generation_run()
    bd = build(data)
    for it, want in zip(bd.iterations, kv_end):
        assert bd.split_at(last_forward_end(bd, it))["kv_cache"] == want
    # Between requests (before the next prefill) the cache is gone.
    it = bd.iterations[1]
    prefill = it.start + int(np.flatnonzero(bd.phases.phase[it.start : it.end + 1] == 1)[0])
    assert bd.split_at(prefill - 1)["kv_cache"] == 0


def test_synthetic_without_frames_nothing_is_called_generation():
    data, _, _kv_end = generation_run()
    snap = pickle.loads(data)
    for trace in snap["device_traces"]:
        for e in trace:
            e["frames"] = []
    for seg in snap["segments"]:
        for blk in seg["blocks"]:
            blk["frames"] = []
    bd = build(pickle.dumps(snap, protocol=4))
    # Without frames there is no forward pass to speak of: nothing is called generation,
    # and nothing becomes KV cache by accident.
    assert all(it.kind != "generate" for it in bd.iterations)
    assert not (bd.category == KV).any()


def test_an_eval_loop_and_a_hook_keeping_features_are_not_generation():
    """A forward hook that keeps each pass's features (replaced in the next pass) links
    the passes like a cache, but its bytes do not grow: still evaluation."""
    tr = syn.TrainingTrace()
    tr.alloc(4 << 20, syn.APPLY, "parameter")
    kept = None
    for _ in range(8):
        x = tr.alloc(1 << 20, PROMPT, "input")
        t = tr.alloc(2 << 20, PROJ, "temporary")
        feat = tr.alloc(3 << 20, HOOK, "activation")
        if kept is not None:
            tr.free(kept, HOOK)
        kept = feat
        tr.free(t, PROJ)
        out = tr.alloc(1 << 19, LOGITS, "activation")
        tr.free(out, END)
        tr.free(x, END)
    bd = build(pickle.dumps(tr.snapshot(), protocol=4))
    assert len(bd.iterations) == 8 and all(it.kind == "eval" for it in bd.iterations)
    assert not (bd.category == KV).any()


# -- training recordings: as before ----------------------------------------------------------
@pytest.mark.parametrize("name, iterations", [("gpt2_adamw_fp32", 6), ("resnet_sgd_fp32", 6)])
def test_training_recordings_have_no_kv_cache_and_the_same_iterations(name, iterations):
    path = TRUTH / f"{name}.pickle.xz"
    snap = load_snapshot(path, use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False))
    assert not (bd.category == KV).any()
    assert len(bd.iterations) == iterations
    assert all(it.kind == "train" and "decode_steps" not in it.to_dict() for it in bd.iterations)


def test_eval_recordings_stay_iterations():
    for name in ("eval_no_grad", "eval_keeps_outputs"):
        path = TRUTH / f"{name}.pickle.xz"
        snap = load_snapshot(path, use_cache=False)
        bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False))
        truth = json.loads((TRUTH / f"{name}.truth.json").read_text())
        assert len(bd.iterations) == truth["iterations"]
        assert all(it.kind == "eval" for it in bd.iterations), name
        assert not (bd.category == KV).any(), name


# -- the ground-truth recordings of generate() -------------------------------------------------
GEN_FILES = sorted(
    p
    for p in TRUTH.glob("*.truth.json")
    if json.loads(p.read_text()).get("kind") == "generate"
    and (TRUTH / p.name.replace(".truth.json", ".pickle.xz")).is_file()
)
# The recordings record_all.py makes (generate_specs): once they are in the repository,
# fewer means one was lost.
EXPECTED_RECORDINGS = ("generate_gpt2_fp32", "generate_llama_bf16")


def _gen_name(p: Path) -> str:
    return p.name[: -len(".truth.json")]


def test_the_generation_recordings_are_there():
    if not GEN_FILES:
        pytest.skip(
            "no generate recordings in tests/data/truth yet (record_all.py "
            "--only generate_ on the GPU machine)"
        )
    assert sorted(_gen_name(p) for p in GEN_FILES) == sorted(EXPECTED_RECORDINGS)


_CACHE: dict = {}


def recorded(path: Path) -> tuple[MemoryBreakdown, dict]:
    if path not in _CACHE:
        snap = load_snapshot(path.with_name(_gen_name(path) + ".pickle.xz"), use_cache=False)
        bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False))
        _CACHE[path] = (bd, json.loads(path.read_text()))
    return _CACHE[path]


@pytest.mark.parametrize("path", GEN_FILES, ids=_gen_name)
def test_recorded_requests_are_found_with_their_decode_steps(path):
    bd, truth = recorded(path)
    reqs = truth["generation"]
    its = bd.iterations
    assert len(its) == len(reqs) == truth["iterations"], [it.to_dict() for it in its]
    assert [it.kind for it in its] == ["generate"] * len(reqs)
    assert [it.decode_steps for it in its] == [q["decode_steps"] for q in reqs]
    # The trace's clock is the program's (unix microseconds): each request's last forward
    # pass lies inside the request as the program timed it.
    time_us = bd.phases.time_us if hasattr(bd.phases, "time_us") else _times(path)
    for it, q in zip(its, reqs):
        t = int(time_us[last_forward_end(bd, it)])
        assert q["start_us"] <= t <= q["end_us"], (it.index, t, q["start_us"], q["end_us"])


def _times(path: Path) -> np.ndarray:
    snap = load_snapshot(path.with_name(_gen_name(path) + ".pickle.xz"), use_cache=False)
    tl = build_timeline(snap, keyframes=False)
    return np.asarray(tl.replay(min(tl.devices)).time_us)


@pytest.mark.parametrize("path", GEN_FILES, ids=_gen_name)
def test_recorded_kv_cache_at_each_requests_last_step_within_2_percent(path):
    bd, truth = recorded(path)
    for it, q in zip(bd.iterations, truth["generation"]):
        got = bd.split_at(last_forward_end(bd, it))["kv_cache"]
        want = q["kv_cache_bytes"]
        assert abs(got - want) <= 0.02 * want, (it.index, got, want)


@pytest.mark.parametrize("path", GEN_FILES, ids=_gen_name)
def test_recorded_generation_reports_no_leak(path):
    bd, _ = recorded(path)
    assert bd.leaks == [], [lk.sentence() for lk in bd.leaks]


@pytest.mark.parametrize("path", GEN_FILES, ids=_gen_name)
def test_recorded_unknown_under_5_percent_of_the_peak(path):
    bd, _ = recorded(path)
    k = int(np.argmax(bd.requested))
    split = bd.split_at(k)
    assert split["unknown"] <= 0.05 * bd.requested[k], split


@pytest.mark.parametrize("path", GEN_FILES, ids=_gen_name)
def test_a_requests_peak_is_named_in_its_own_phases(path):
    """prefill: the request's first forward pass; decode: a later one; sampling: between
    forward passes (the phase at the peak event says which)."""
    bd, _ = recorded(path)
    phase = bd.phases.phase
    for it in bd.iterations:
        at = int(phase[it.peak_event])
        span = phase[it.start : it.end + 1]
        first_fwd = np.flatnonzero(span == 1)
        assert len(first_fwd)
        # The end of the request's first run of forward events.
        after = np.flatnonzero(span[first_fwd[0] :] != 1)
        prefill_end = it.start + first_fwd[0] + (int(after[0]) if len(after) else len(span))
        want = (
            "sampling"
            if at == 0
            else "prefill"
            if at == 1 and it.peak_event < prefill_end
            else "decode"
            if at == 1
            else None
        )
        assert it.peak_phase == want, (it.index, it.peak_phase, want)
