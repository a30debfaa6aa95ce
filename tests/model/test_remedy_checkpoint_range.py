"""gradient_checkpointing's range against the zoo's real checkpointed runs (the same
program with the repeated blocks checkpointed, tests/workloads/zoo.py PAIRS): the range
has non-zero width, holds its point and the real peak reserved, and stays below the
recorded peak.  Its floor is the run with no block's saved activations at all: a
checkpointed forward saves none, and the block recomputed first in backward may come
after the head's peak (GPT-2's 16000-word logits and loss), so keeping the last block's
(the point's lower run) was above the real run."""

from __future__ import annotations

import functools
import json

import pytest

from tests.conftest import DATA
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies.advise import advise
from vramscope.viewer.model.whatif.predictions import prepare

ZOO = DATA / "zoo"
PAIRS = [
    ("dec_gpt2_sdpa_adamw_fp32_b8", "dec_gpt2_sdpa_adamw_fp32"),
    ("timm_vit_tiny_adamw_bf16_b32", "timm_vit_tiny_adamw_bf16"),
]


def _truth(name: str) -> dict:
    return json.loads((ZOO / f"{name}.truth.json").read_text())


@functools.lru_cache(maxsize=None)
def _remedy(name: str):
    adv = advise(prepare(load_snapshot(ZOO / f"{name}.pickle.xz")), _truth(name)["batch_size"])
    return next((r for r in adv.remedies if r.remedy == "gradient_checkpointing"), None)


@pytest.mark.parametrize(("before", "program"), PAIRS, ids=[p[1] for p in PAIRS])
def test_the_range_holds_the_checkpointed_run(before, program):
    r = _remedy(before)
    assert r is not None, f"no gradient_checkpointing on {before}"
    assert r.method == "estimated"
    lo, hi = r.predicted_peak_reserved_range
    real = _truth(f"pair_gradient_checkpointing_{program}_after")["peak_reserved_bytes"]
    assert lo < hi
    assert lo <= r.predicted_peak_reserved_bytes <= hi
    assert lo <= real <= hi, (lo, real, hi)
    assert hi <= _truth(before)["peak_reserved_bytes"]
    assert "no block's saved activations at all" in r.detail
