"""free_kept on a real leak: the zoo's free_kept pair (tests/workloads/zoo_one.py,
``leak``) appends ``logits.detach().clone()`` to a list every iteration; the list goes
when the loop's function returns, before the snapshot, so the clones are freed in the
recording's closing frees, not "never".  advise offers free_kept there, with a
simulated prediction within 5 % of the same program run without the list (its plain
recording, ``_b8``), and offers it nowhere on that plain program."""

from __future__ import annotations

import functools
import json

import numpy as np

from tests.conftest import DATA
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import evidence, scaling
from vramscope.viewer.model.remedies.advise import advise
from vramscope.viewer.model.remedies.catalogue import kept
from vramscope.viewer.model.whatif.predictions import prepare

ZOO = DATA / "zoo"
BEFORE = "pair_free_kept_dec_gpt2_sdpa_adamw_fp32_before"
PLAIN = "dec_gpt2_sdpa_adamw_fp32_b8"


def _truth(name: str) -> dict:
    return json.loads((ZOO / f"{name}.truth.json").read_text())


@functools.lru_cache(maxsize=None)
def _case(name: str):
    return prepare(load_snapshot(ZOO / f"{name}.pickle.xz"))


@functools.lru_cache(maxsize=None)
def _advice(name: str):
    return advise(_case(name), _truth(name)["batch_size"])


def _kept(name: str) -> tuple[object, np.ndarray]:
    case = _case(name)
    evd = evidence.gather(case)
    return case, kept.kept_each_iteration(case, evd, scaling.judge(case, 8, evd))


def test_the_clones_freed_at_the_close_are_kept_each_iteration():
    case, k = _kept(BEFORE)
    leak = _truth(BEFORE)["leak"]
    # Exactly the list's clones, one per iteration, though none is "never freed".
    assert sorted(case.requests.size[k].tolist()) == sorted(n for _, n in leak["kept_blocks"])
    assert int(case.requests.size[k].sum()) == leak["total_kept_bytes"]
    assert (evidence.gather(case).free_at[k] < len(case.requests)).all()


def test_the_plain_program_keeps_nothing():
    # Its last iteration's outputs are freed at the close too: one of a site, not kept.
    assert not _kept(PLAIN)[1].any()
    assert "free_kept" not in {r.remedy for r in _advice(PLAIN).remedies}


def test_free_kept_is_offered_and_predicts_the_run_without_the_list():
    r = next((r for r in _advice(BEFORE).remedies if r.remedy == "free_kept"), None)
    assert r is not None, [r.remedy for r in _advice(BEFORE).remedies]
    assert r.method == "simulated"
    real = _truth(PLAIN)["peak_reserved_bytes"]
    assert abs(r.predicted_peak_reserved_bytes / real - 1) <= 0.05, (
        r.predicted_peak_reserved_bytes,
        real,
    )
    assert r.predicted_peak_reserved_bytes < _truth(BEFORE)["peak_reserved_bytes"]
