"""The sequence-length judgement and what-if against zoo recordings and their programs' truth."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.remedies import evidence, seq_scale
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

ZOO = DATA / "zoo"


def truth(name: str) -> dict:
    return json.loads((ZOO / f"{name}.truth.json").read_text())


def case_of(name: str):
    return prepare(load_snapshot(ZOO / f"{name}.pickle.xz"))


def _score_bytes(t: dict) -> int:
    """B x H x T x T attention scores in the program's autocast dtype (from its truth)."""
    s, cfg = t["settings"], t["model_config"]
    width = 2 if t.get("autocast") in ("bfloat16", "float16") else 4
    return s["batch"] * cfg["n_head"] * s["seq"] * s["seq"] * width


def test_eager_attention_scores_grow_with_the_square():
    name = "dec_gpt2_eager_adamw_bf16_b8"
    case = case_of(name)
    j = seq_scale.judge(case, 256)
    scores = _score_bytes(truth(name))
    evd = evidence.gather(case)
    alloc = case.requests.kind == rq.ALLOC
    fwd = alloc & (evd.phase == evidence.FORWARD) & (j.size == scores)
    # At T = 256 a GPT-2 layer's 6 x T x T scores have exactly the size of its T x 4D MLP
    # activation: the frames tell them apart, the size cannot.
    snap = case.snap
    in_attention = np.array(
        [
            s >= 0
            and "eager_attention_forward"
            in [snap.frames.name_of(f) for f in snap.stacks.frame_ids(int(s)).tolist()[:3]]
            for s in evd.site.tolist()
        ]
    )
    assert (fwd & in_attention).sum() >= 6  # one per layer at least
    assert (j.power[fwd & in_attention] == seq_scale.SQUARE).all()
    assert (fwd & ~in_attention).any()
    assert (j.power[fwd & ~in_attention] == seq_scale.LINEAR).all()
    assert j.attention == "eager" and j.is_sequence_model
    # Their gradients in backward too, and nothing fixed became a square.
    back = alloc & (evd.phase == evidence.BACKWARD) & (j.size == scores) & j.scales
    assert back.any() and (j.power[back] == seq_scale.SQUARE).all()
    state = alloc & ~j.scales
    assert not (j.power[state] == seq_scale.SQUARE).any()
    # The same model with sdpa attention (its flash kernel) has no square at all.
    sdpa = seq_scale.judge(case_of("dec_gpt2_sdpa_adamw_fp32_b8"), 256)
    assert sdpa.attention == "sdpa"
    assert not (sdpa.power == seq_scale.SQUARE).any()


def test_square_sizes_scale_by_the_square_and_linear_by_the_scale():
    case = case_of("dec_gpt2_eager_adamw_bf16_b8")
    j = seq_scale.judge(case, 256)
    twice = j.scaled_sizes(2)
    sq = j.power == seq_scale.SQUARE
    lin = j.power == seq_scale.LINEAR
    fixed = (j.power == seq_scale.FIXED) & (j.rule != 15)
    assert (twice[sq] == j.size[sq] * 4).all()
    assert (twice[lin] >= j.size[lin] * 2).all() and (twice[lin] <= j.size[lin] * 2 + 1).all()
    assert (twice[fixed] == j.size[fixed]).all()


@pytest.mark.parametrize(
    "program",
    [
        "dec_gpt2_eager_adamw_bf16",  # tuning, eager
        "dec_gpt2_sdpa_adamw_fp32",  # tuning, sdpa
        "peft_lora_llama_bf16base",  # held out, sdpa
        "peft_lora_gpt2_eagerattn_bf16",  # held out, eager
        "s2s_t5_adamw_fp32",  # held out, sdpa with a float bias (the math fallback)
    ],
)
@pytest.mark.parametrize("other,scale", [("t128", 0.5), ("t512", 2.0)])
def test_prediction_within_5_percent_or_its_range_holds_the_truth(program, other, scale):
    case = case_of(f"{program}_b8")
    j = seq_scale.judge(case, 256)
    est, point = seq_scale.estimate_range(case, j, scale)
    real = truth(f"{program}_b8_{other}")
    assert real["settings"]["seq"] == 256 * scale
    real_peak = int(real["peak_reserved_bytes"])
    assert est.high > est.low  # a range of non-zero width
    assert est.low <= point.peak_reserved <= est.high
    within = abs(point.peak_reserved - real_peak) <= 0.05 * real_peak
    assert within or est.low <= real_peak <= est.high, (point.peak_reserved, est, real_peak)


def test_a_cnn_has_no_sequence_axis():
    j = seq_scale.judge(case_of("tv_resnet18_sgdm_fp32_b16"))
    assert not j.is_sequence_model and j.attention is None


@pytest.mark.parametrize(
    "program",
    ["dec_gpt2_eager_adamw_bf16", "peft_lora_llama_bf16base", "peft_lora_gpt2_eagerattn_bf16"],
)
@pytest.mark.parametrize("fits,fails", [("b8_t128", "b8"), ("b8", "b8_t512")])
def test_largest_fitting_seq_is_on_the_safe_side_of_the_recorded_truth(program, fits, fails):
    """Under a limit between the real peaks of two recorded lengths, the longest sequence
    that fits is below the longer one (which did not fit), its range under the limit."""
    lengths = {"b8_t128": 128, "b8": 256, "b8_t512": 512}
    lo = int(truth(f"{program}_{fits}")["peak_reserved_bytes"])
    hi = int(truth(f"{program}_{fails}")["peak_reserved_bytes"])
    limit = (lo + hi) // 2
    case = case_of(f"{program}_b8")
    j = seq_scale.judge(case, 256)
    scale, seq, est = seq_scale.largest_fitting_seq(case, j, limit, 256)
    assert seq is not None and est is not None and est.high <= limit
    assert seq < lengths[fails]
    assert np.isclose(float(scale), seq / 256)
