"""advise offers no remedy the program already applies, judged from the recording alone:
checkpointing is on where the forward ran inside ``torch.utils.checkpoint``; gradients
are set to None where their blocks are freed and made again each iteration (zeroed in
place, the same blocks outlive the iterations).  The plain counterpart of each program
is still offered the remedy.  Recordings: the zoo's (tests/workloads/zoo.py) and the
truth runs (tests/workloads/truth), each with the program's own settings beside it."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model.core.progress import Progress
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import evidence
from vramscope.viewer.model.remedies.advise import advise
from vramscope.viewer.model.remedies.catalogue import context, optimizer
from vramscope.viewer.model.whatif.predictions import prepare

ZOO = DATA / "zoo"
TRUTH = DATA / "truth"


def _path(name: str) -> Path:
    p = ZOO / f"{name}.pickle.xz"
    return p if p.exists() else TRUTH / f"{name}.pickle.xz"


def _truth(name: str) -> dict:
    return json.loads(_path(name).with_suffix("").with_suffix(".truth.json").read_text())


def _checkpoints(name: str) -> bool:
    t = _truth(name)
    return bool(t.get("settings", {}).get("ckpt") or t.get("grad_checkpointing"))


@functools.lru_cache(maxsize=None)
def _case(name: str):
    return prepare(load_snapshot(_path(name)))


@functools.lru_cache(maxsize=None)
def _offered(name: str) -> set[str]:
    return {r.remedy for r in advise(_case(name)).remedies}


# (program that checkpoints, the same model without it)
CHECKPOINTED = [
    ("pair_gradient_checkpointing_enc_bert_mlm_adamw_fp32_after", "enc_bert_mlm_adamw_fp32_b8"),
    ("ckpt_gpt2_b13", "sweep_gpt2_b12"),
]


@pytest.mark.parametrize("ckpt,plain", CHECKPOINTED, ids=[c for c, _ in CHECKPOINTED])
def test_checkpointing_is_not_offered_to_a_program_that_checkpoints(ckpt, plain):
    assert _checkpoints(ckpt) and not _checkpoints(plain)
    assert "gradient_checkpointing" not in _offered(ckpt)
    assert "gradient_checkpointing" in _offered(plain)


def _gradient_grads_at_a_forward_instant(name: str) -> np.ndarray | None:
    """set_to_none's ``applies`` asked at a forward instant of the second iteration (the
    recorded peaks of these runs lie in backward, where the remedy does not act)."""
    case = _case(name)
    ctx = context.gather(case, None, None, Progress())
    evd = ctx.evd
    second = (evd.iteration == 1) & (evd.phase == evidence.FORWARD)
    assert second.any(), name
    at = int(np.flatnonzero(second)[-1])
    return optimizer._grads_applies(dataclasses.replace(ctx, at=at))


def test_set_to_none_is_offered_only_where_gradients_are_zeroed_in_place():
    in_place = "pair_set_to_none_dec_gpt2_sdpa_adamw_fp32_before"
    set_none = "dec_gpt2_sdpa_adamw_fp32_b8"
    assert _truth(in_place)["settings"]["set_to_none"] is False
    assert _truth(set_none)["settings"].get("set_to_none", True) is not False
    assert _gradient_grads_at_a_forward_instant(in_place) is not None
    assert _gradient_grads_at_a_forward_instant(set_none) is None


# Programs calling zero_grad(set_to_none=True) at the top of each iteration whose peak
# the phases place in a forward pass with the last step's gradients live (a compiled
# backward runs Python frames; a validation forward with grad after the step).
SET_TO_NONE = ["compiled_gpt2_b08", "compiled_vit_b16", "gpt2_val_grad"]


@pytest.mark.parametrize("name", SET_TO_NONE)
def test_set_to_none_is_not_offered_to_a_program_that_sets_to_none(name):
    assert "set_to_none" not in _offered(name)


def test_a_lightning_loop_freeing_cublas_workspaces_at_teardown_keeps_them_workspaces():
    """Lightning's teardown frees cuBLAS's workspaces after the last step; until then they
    lived all along, as a workspace does.  Taken for gradients (the backward handle's is
    made in backward), they made set_to_none look applicable although the loop already
    sets gradients to None."""
    name = "lit_vit_tiny_adamw_fp32_b32"
    assert _truth(name)["set_to_none"] is True
    case = _case(name)
    _cat, why, _guess, _bd = evidence.categories_of(case)
    big = case.requests.size == 32 << 20
    assert big.sum() >= 2
    made = big & (why != "")
    assert set(why[made].tolist()) == {"workspace_guess"}
    assert "set_to_none" not in _offered(name)


# Programs whose weights are bf16 (autocast would run nothing in lower precision), and
# programs in fp32: the element size told from a width that a norm vector and a square
# attention projection share.
HALF_WEIGHTS = ["dec_qwen2_adamw_bf16weights_b8"]
FULL_WEIGHTS = [
    "dec_gpt2_sdpa_adamw_fp32_b8",
    "dec_llama_eager_sgdm_fp32_b8",
    "enc_bert_mlm_adamw_fp32_b8",
    "trn_bert_adamw_fp32_b8",
    "tv_resnet18_sgdm_fp32_b32",
    "s2s_t5_adamw_fp32_b8",
]


@pytest.mark.parametrize("name", HALF_WEIGHTS + FULL_WEIGHTS)
def test_weights_in_half_precision_are_told_from_the_sizes(name):
    from vramscope.viewer.model.remedies.catalogue.activations import weights_in_half_precision

    half = _truth(name)["dtype"] in ("bfloat16", "float16")
    case = _case(name)
    assert weights_in_half_precision(case, evidence.gather(case)) is half


def test_autocast_is_not_offered_to_a_model_in_bf16():
    assert _truth(HALF_WEIGHTS[0])["autocast"] is None  # no autocast: the weights do it
    assert "bf16_autocast" not in _offered(HALF_WEIGHTS[0])
    assert _truth("dec_gpt2_sdpa_adamw_fp32_b8")["autocast"] is None
    assert "bf16_autocast" in _offered("dec_gpt2_sdpa_adamw_fp32_b8")


def test_autocast_over_a_frozen_bf16_base_is_seen_from_its_adapters_copies():
    """LoRA on a bf16 base under autocast: the frozen base is used as it is, only the
    trained fp32 adapters are copied to bf16 in the forward; those copies are the
    evidence.  The same LoRA on an fp32 base without autocast is still offered it."""
    lora_bf16 = "peft_lora_llama_bf16base_b8"
    assert _truth(lora_bf16)["settings"]["amp"] == "bf16"
    assert _truth(lora_bf16)["settings"]["dtype"] == "bfloat16"
    assert "bf16_autocast" not in _offered(lora_bf16)
    lora_fp32 = "peft_lora_gpt2_fp32_b8"
    assert not _truth(lora_fp32)["settings"].get("amp")
    assert "bf16_autocast" in _offered(lora_fp32)


def test_autocast_is_seen_over_a_partly_trained_bf16_model():
    """A bf16 model with its last layer and head trained in fp32 under autocast (a
    tuning-family program with the LoRA programs' trait: a frozen half-precision base):
    the trained weights' copies say autocast is on."""
    name = "dec_llama_partial_bf16base_b8"
    assert _truth(name)["settings"]["amp"] == "bf16"
    assert "bf16_autocast" not in _offered(name)


def test_an_activation_of_half_an_adapters_size_is_no_autocast_copy():
    """IA3 on an fp32 T5 without autocast: a few forward allocations happen to have half
    the size of some of its scaling vectors, fewer than the vectors and of a small part of
    the trained bytes; autocast is still offered."""
    name = "peft_ia3_t5_adafactor_fp32_b8"
    t = _truth(name)
    assert not t["settings"].get("amp") and t["autocast"] is None
    assert "bf16_autocast" in _offered(name)
