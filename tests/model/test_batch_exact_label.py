"""When a batch prediction may be called exact: against zoo recordings and the real runs.

An exact label promises the real peak within
:data:`~vramscope.viewer.model.remedies.scaling.EXACT_ERROR`.  A scratch buffer of one
operation that nothing in the recording sizes (:func:`~vramscope.viewer.model.remedies.
scaling.unexplained_scratch`) may keep its size at another batch or grow with it; where
it is large enough to move the peak past that promise, the prediction is an estimate whose
range reads it both ways.  So is a forward allocation kept as autocast's half-size copy
of a weight in a program whose forward makes no such copies (its size alone judged it).
Truth: the transformers ``Trainer`` BERT (a tuning program) recorded at batch 8 and 12,
the eager fp32 Llama at 4 and 8, the eager GPT-2 at 4, 8 and 12, and every zoo program's
own settings (tests/data/zoo).
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.remedies import batch_scale, evidence, scaling
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

ZOO = DATA / "zoo"
_CASES: dict[str, tuple] = {}


def loaded(name: str):
    """(case, judgement, truth) of a zoo recording, judged at its recorded batch."""
    if name not in _CASES:
        t = json.loads((ZOO / f"{name}.truth.json").read_text())
        case = prepare(load_snapshot(ZOO / f"{name}.pickle.xz"))
        evd = evidence.gather(case)
        _CASES[name] = (case, scaling.judge(case, int(t["batch_size"]), evd), t, evd)
    return _CASES[name]


def test_a_scratch_buffer_the_library_sizes_is_what_the_real_run_did_not_scale():
    """The doubt is real: at batch 12 the BERT program asks, at the request where batch 8
    made the large unexplained scratch, for its batch-8 size, not 1.5 times it."""
    case8, j8, _, evd8 = loaded("trn_bert_adamw_fp32_b8")
    case12, _, _, _ = loaded("trn_bert_adamw_fp32_b12")
    scratch = scaling.unexplained_scratch(case8.requests, evd8, j8)
    assert scratch.any()
    a8 = case8.requests.kind == rq.ALLOC
    a12 = case12.requests.kind == rq.ALLOC
    assert a8.sum() == a12.sum()  # the same program: one request for one request
    at = np.flatnonzero(scratch[a8])
    s8 = case8.requests.size[a8][at]
    s12 = case12.requests.size[a12][at]
    proportional = -((-s8 * 3) // 2)
    assert (s12 != proportional).any(), "every such buffer grew with the batch at 12"
    assert (s12 == s8).any()
    # They are a reduction's staging buffers at the GPU's cap (.reductions): the point
    # asks for what the run at 12 asked for.
    assert (j8.scaled_sizes(Fraction(3, 2))[a8][at] == s12).all()


@pytest.mark.parametrize(("src", "dst"), [(8, 12), (12, 8), (4, 8), (8, 4)])
def test_bert_across_batches_is_an_estimate_whose_range_holds_the_real_run(src, dst):
    """From batch 4 the scratch (125 MiB) is 132.8 MiB at 8, neither kept nor scaled: a
    size between its two readings, whose new segment moves the peak 142 MiB; the range
    draws such sizes."""
    case, j, t, _ = loaded(f"trn_bert_adamw_fp32_b{src}")
    real = loaded(f"trn_bert_adamw_fp32_b{dst}")[2]["peak_reserved_bytes"]
    f = Fraction(dst, src)
    pred = batch_scale.predict(case, j, f, None, None, int(t["batch_size"]))
    off = abs(pred.peak - real) / real
    assert pred.is_estimate, (pred.peak, real, off)
    assert pred.low <= real <= pred.high, (pred.low, real, pred.high)


# At 512 tokens the size-only rule finds half-size weight copies in the bf16 LoRA Llama,
# which makes none (bf16 weights under autocast): a known false positive, kept visible
# (strict, so a fix shows).
_FOOLED = {"peft_lora_llama_bf16base_b8_t512"}


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            p,
            marks=pytest.mark.xfail(
                strict=True, reason="half-size copies found where none are made"
            ),
        )
        if p.name[: -len(".pickle.xz")] in _FOOLED
        else p
        for p in sorted(ZOO.glob("*.pickle.xz"))
    ],
    ids=lambda p: p.name.split(".")[0],
)
def test_half_size_copies_are_seen_where_autocast_casts_fp32_weights(path):
    """Autocast's copies are seen exactly in the programs that run forward under autocast
    on fp32 weights (bf16 weights under autocast need no copy; a bf16 model whose trained
    part was cast to fp32 has some)."""
    name = path.name[: -len(".pickle.xz")]
    case, _, t, evd = loaded(name)
    fp32 = t.get("dtype") == "float32" or bool(t.get("settings", {}).get("train_only"))
    casts = t.get("autocast") is not None and fp32
    assert scaling.half_copies_seen(case.requests, evd) == casts


@pytest.mark.parametrize(("src", "dst"), [(8, 4), (4, 8)])
def test_fp32_llama_is_an_estimate_whose_range_holds_the_real_run(src, dst):
    """Its attention scores are half its embedding's size: without autocast the size alone
    said "a weight's copy, kept"."""
    case, j, t, _ = loaded(f"dec_llama_eager_sgdm_fp32_b{src}")
    real = loaded(f"dec_llama_eager_sgdm_fp32_b{dst}")[2]["peak_reserved_bytes"]
    f = Fraction(dst, src)
    pred = batch_scale.predict(case, j, f, None, None, int(t["batch_size"]))
    assert pred.is_estimate, (pred.peak, real)
    assert pred.low <= real <= pred.high, (pred.low, real, pred.high)


@pytest.mark.parametrize(
    ("program", "batches"),
    [
        ("dec_gpt2_sdpa_adamw_fp32", (4, 8, 12)),
        ("trn_bert_adamw_fp32", (8, 12)),
        ("dec_llama_eager_sgdm_fp32", (4, 8)),
    ],
)
def test_every_exact_label_is_within_the_exact_error(program, batches):
    """Every pair of recorded batches: labelled exact only within the promised error, and
    the GPT-2 (whose backward scratch buffers are small beside its peak) keeps exact labels
    where its predictions are the real peak: the rule does not call everything an estimate."""
    exact = 0
    for src in batches:
        case, j, t, _ = loaded(f"{program}_b{src}")
        for dst in batches:
            if dst == src:
                continue
            real = loaded(f"{program}_b{dst}")[2]["peak_reserved_bytes"]
            f = Fraction(dst, src)
            if batch_scale.is_estimate(j, f):
                continue
            exact += 1
            pred = batch_scale.predict(case, j, f, None, None, int(t["batch_size"]))
            assert abs(pred.peak - real) <= real * scaling.EXACT_ERROR, (src, dst, pred.peak, real)
    if program.startswith("dec_gpt2"):
        assert exact == len(batches) * (len(batches) - 1)
