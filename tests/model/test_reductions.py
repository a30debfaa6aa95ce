"""ATen's reductions' staging buffers at another batch: in proportion up to the GPU's cap.

Truth: the transformers ``Trainer`` BERT (a tuning program) recorded on an H200 at batch
4, 8 and 12 (tests/data/zoo): its masked-LM bias gradient stages 125 MiB at batch 4 and
132.8 MiB (the cap: 125 columns x 34 blocks x 32 KiB) at both 8 and 12.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core.gpu_specs import multiprocessors
from vramscope.viewer.model.remedies import batch_scale, evidence, reductions, scaling
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

ZOO = DATA / "zoo"
BERT = "trn_bert_adamw_fp32"
_CASES: dict[int, tuple] = {}


def bert(batch: int):
    """(case, judgement, truth) of the Trainer BERT at ``batch``."""
    if batch not in _CASES:
        t = json.loads((ZOO / f"{BERT}_b{batch}.truth.json").read_text())
        case = prepare(load_snapshot(ZOO / f"{BERT}_b{batch}.pickle.xz"))
        _CASES[batch] = (case, scaling.judge(case, batch, evidence.gather(case)), t)
    return _CASES[batch]


def largest(batch: int) -> tuple[np.ndarray, int]:
    """The staging buffers of the largest size at ``batch``: (their index among the
    judgement's buffers, that size)."""
    case, j, _ = bert(batch)
    sizes = case.requests.size[j.staging.rows]
    return np.flatnonzero(sizes == sizes.max()), int(sizes.max())


def test_the_staging_buffers_and_their_cap_are_read_from_the_recording():
    case, j, _ = bert(8)
    st = j.staging
    assert st is not None and len(st.rows)
    reqs = case.requests
    # Each buffer is followed by its semaphores, freed before it.
    assert (reqs.kind[st.rows + 1] == rq.ALLOC).all()
    assert (reqs.size[st.rows + 1] == 4 * st.columns).all()
    assert (reqs.size[st.rows] == st.columns * st.blocks * reductions.BLOCK_BYTES).all()
    at, size = largest(8)
    assert size == 139264000
    assert (st.columns[at] == 125).all() and st.capped[at].all()
    at4, size4 = largest(4)
    assert size4 == 125 << 20
    assert not bert(4)[1].staging.capped[at4].any()


@pytest.mark.parametrize(("src", "dst"), [(4, 8), (8, 12), (4, 12)])
def test_a_larger_batch_grows_a_buffer_to_the_cap_and_no_further(src, dst):
    """The size the real run at ``dst`` asked for, at the same request."""
    _, j, _ = bert(src)
    at, _ = largest(src)
    got = j.staging.point(Fraction(dst, src))[at]
    assert (got == largest(dst)[1]).all(), got


def test_a_smaller_batch_keeps_a_capped_buffer_and_its_range_reaches_the_real_size():
    _, j, _ = bert(8)
    at, size8 = largest(8)
    f = Fraction(1, 2)
    point, other = j.staging.point(f)[at], j.staging.other(f)[at]
    real = largest(4)[1]
    assert (point == size8).all()
    assert (np.minimum(point, other) <= real).all() and (real <= np.maximum(point, other)).all()


@pytest.mark.parametrize(("src", "dst"), [(4, 8), (8, 12), (12, 8), (8, 4)])
def test_bert_predicted_within_two_percent_and_inside_its_range(src, dst):
    """Scaled in proportion, the capped buffer put batch 12 15 % high and batch 8 (from 4)
    11 % low; its range still reads the buffer both ways.  Towards a smaller batch the
    capped buffer is kept (where the cap began is not in one recording): 132.8 MiB where
    batch 4 asks for 125, 2 % on the peak."""
    case, j, _ = bert(src)
    real = bert(dst)[2]["peak_reserved_bytes"]
    pred = batch_scale.predict(case, j, Fraction(dst, src), None, None, src)
    assert abs(pred.peak - real) <= (0.02 if dst > src else 0.05) * real, (pred.peak, real)
    assert pred.low <= real <= pred.high, (pred.low, real, pred.high)


def test_without_the_gpu_nothing_is_judged_from_it():
    case, _, _ = bert(8)
    snap = case.snap
    saved = dict(snap.sidecar)
    try:
        snap.sidecar.pop("gpu", None)
        snap.sidecar.pop("gpu_multiprocessors", None)
        assert scaling.judge(case, 8, evidence.gather(case)).staging is None
    finally:
        snap.sidecar.clear()
        snap.sidecar.update(saved)


def test_the_gpu_is_read_from_what_the_capture_recorded_first_then_its_name():
    assert multiprocessors({"gpu": "NVIDIA H200"}) == (132, 2048)
    assert multiprocessors({"gpu": "NVIDIA H100 PCIe"}) == (114, 2048)
    assert multiprocessors({"gpu": "NVIDIA A10G"}) == (80, 1536)
    recorded = {
        "gpu": "NVIDIA H200",
        "gpu_multiprocessors": 66,
        "gpu_threads_per_multiprocessor": 1024,
    }
    assert multiprocessors(recorded) == (66, 1024)
    assert multiprocessors({"gpu": "Some Future GPU"}) is None
    assert multiprocessors(None) is None


def test_a_buffer_of_more_blocks_than_the_modelled_gpu_takes_has_no_cap():
    """A GPU that holds fewer blocks than the recording shows (another launch): nothing is
    known of its cap, and the buffer grows in proportion."""
    case, _, _ = bert(8)
    snap = case.snap
    saved = dict(snap.sidecar)
    try:
        snap.sidecar["gpu_multiprocessors"] = 66  # half an H200: cap 17 < the 34 recorded
        snap.sidecar["gpu_threads_per_multiprocessor"] = 2048
        st = scaling.judge(case, 8, evidence.gather(case)).staging
    finally:
        snap.sidecar.clear()
        snap.sidecar.update(saved)
    at, size = largest(8)
    assert not st.capped[at].any()
    assert (st.point(Fraction(3, 2))[at] == size * 3 // 2).all()


def test_the_rule_table_names_the_staging_buffers_on_lines_of_their_own():
    """What the point does with them is what the table says: the 132.8 MiB buffer at the
    cap is fixed, not one of the per-iteration allocations that scale."""
    from vramscope.viewer.model.remedies import explain

    case, j, _ = bert(8)
    evd = evidence.gather(case)
    rows = {(r["rule"], r["scales"]): r for r in explain.rule_table(case, j, evd)}
    at_cap = rows[("staging_at_cap", False)]
    assert at_cap["allocations"] == int(j.staging.capped.sum())
    assert at_cap["examples"][0]["requested_bytes"] == 139264000
    below = rows[("reduction_staging", True)]
    assert below["allocations"] == int((~j.staging.capped).sum())
    per_iteration = rows[("per_iteration", True)]
    assert all(ex["requested_bytes"] != 139264000 for ex in per_iteration["examples"])
    assert sum(r["allocations"] for r in rows.values()) == int(
        (case.requests.kind == rq.ALLOC).sum() + (case.requests.kind == rq.OOM).sum()
    )
    text = explain.format_rule_table(list(rows.values()))
    assert "fixed  staging_at_cap" in text
