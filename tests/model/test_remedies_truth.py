"""Batch-size predictions against real runs (the truth kit, tests/workloads/truth/).

Each sweep recorded one workload at 3-4 batch sizes in fresh processes; from
one recording the peak reserved bytes at half and 1.5x its batch must come
within 5 % of the real runs' ``reserved_bytes.all.peak``.  The limit search
found the largest GPT-2 batch that fits 2 GiB by running it; ``advise`` must
name the same batch.  The recordings are in the repository (tests/data/truth): which pairs
are compared is decided at collection time, and a floor on their number fails when one
goes missing.
"""

from __future__ import annotations

import pytest

from tests.workloads import batch_prediction_table as table

SWEEPS = table.sweeps()
PAIRS = [
    (fam, b0, b1)
    for fam, by in sorted(SWEEPS.items())
    for b0 in sorted(by)
    for b1 in sorted(by)
    if b1 * 2 == b0 or b1 * 2 == b0 * 3
]
TOLERANCE = 0.05


# Known misses of the point figure.  ResNet-18 64 -> 32 missed
# (-6.1 %) while cuDNN's convolution workspaces were scaled in proportion; they are now
# a fixed weight part plus a per-sample part (viewer/model/remedies/workspaces.py), and
# what is left is the algorithm cuDNN picks at the other batch, which one recording
# cannot show (tests/model/test_remedies_workspaces.py measures both; the real peak of
# every pair lies in the estimate's range there).  A pair that misses for that reason
# goes here with a strict xfail, its reason and its numbers.  All are held out (recorded
# after the model was written, not tuned to).
SWITCHED_AT_64 = (
    "at batch 64 and above cuDNN (H100, 9.19, heuristics) picks backward-"
    "filter algorithms without a real workspace (0.4 MiB the largest at 64) "
    "where every batch up to 56 copies both operands (124.4 MiB at 32 for "
    "the 16->64-channel 1x1 convolution at 112x112): the recording has no "
    "allocation of that size to scale; the range holds the real peak"
)
KNOWN_MISSES: dict[tuple[str, int, int], str] = {
    # -8.3 % (1.80 GiB predicted, real 1.96 GiB), -8.1 %, -7.9 %.
    ("mobilenet", 64, 32): SWITCHED_AT_64,
    ("mobilenet", 80, 40): SWITCHED_AT_64,
    ("mobilenet", 96, 48): SWITCHED_AT_64,
    # -6.9 % (3.16 GiB predicted, real 3.39 GiB).
    ("efficientnet", 64, 32): "EfficientNet-B0 likewise: at batch 64 cuDNN picked algorithms "
    "whose largest workspace is 0.84 MiB per sample, 5.4 MiB per "
    "sample at 16 / 32 / 48; the range holds the real peak",
    # -5.5 % (2.30 GiB predicted, real 2.44 GiB).
    ("convnext", 32, 16): "ConvNeXt-T at batch 16 made another request stream than at 32 "
    "and 48 (4385 requests vs 4739 at 32: other kernels were "
    "picked), so scaling batch 32's requests misses it; 32 <-> 48 "
    "are within 1.3 %",
}


def _pair(fam, b0, b1):
    why = KNOWN_MISSES.get((fam, b0, b1))
    return (
        pytest.param(fam, b0, b1, marks=pytest.mark.xfail(reason=why, strict=True))
        if why
        else (fam, b0, b1)
    )


@pytest.mark.parametrize("family,src,dst", [_pair(*p) for p in PAIRS], ids=lambda v: str(v))
def test_peak_reserved_at_half_and_one_and_a_half_batch(family, src, dst):
    pred = table.predict_peak(SWEEPS[family][src], dst)
    real = table.real_peak_reserved(SWEEPS[family][dst])
    assert abs(pred / real - 1) <= TOLERANCE, (
        f"{family} b{src} -> b{dst}: predicted {pred}, real {real} ({pred / real - 1:+.1%})"
    )


def test_scale_one_predicts_its_own_peak_exactly():
    assert SWEEPS, "no sweep recording in tests/data/truth"
    for family, by in SWEEPS.items():
        for b, path in by.items():
            assert table.predict_peak(path, b) == table.real_peak_reserved(path), (family, b)


def _recorded(name: str):
    path = table.find(name)
    assert path is not None, f"{name} is not in tests/data/truth"
    return path


def test_advise_names_the_largest_batch_that_fits(tmp_path):
    import json
    import subprocess
    import sys

    truth = table.truth_of(_recorded("limit_sweep_gpt2_fit"))
    search = truth["search"]
    real = int(search["largest_batch_that_fits"])
    # The recording that ran out of memory (one batch too many) and the one that fit.
    for name in ("limit_sweep_gpt2_oom", "limit_sweep_gpt2_fit"):
        path = _recorded(name)
        b = int(table.truth_of(path)["batch_size"])
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "vramscope.viewer",
                "advise",
                str(path),
                "--batch",
                str(b),
                "--memory-limit",
                str(search["memory_limit_bytes"]),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["largest_batch_that_fits"] == real, (name, got["largest_batch_that_fits"], real)
        assert got["remedies"] and all(
            r["method"] in ("simulated", "estimated") for r in got["remedies"]
        )
    # From a sweep recording at another batch, without any limit in it.
    rows = [r for r in table.limit_rows() if r["from"].startswith("sweep_")]
    assert rows
    for r in rows:
        assert r["predicted"] == real, r


def test_leaked_outputs_are_judged_kept_each_iteration_and_scale():
    import numpy as np

    from vramscope.viewer.model.remedies import scaling

    src = _recorded("gpt2_leak")
    case, j, truth = table.case_of(src)
    leak = truth["leak"]
    kept = {int(p) for p, _ in leak["kept_blocks"]}
    rows = np.flatnonzero(case.snap.trace.device == case.device)
    addr = case.snap.trace.addr[rows[case.requests.event]]
    leaked = (
        np.isin(addr, list(kept))
        & (case.requests.kind == 0)
        & (table.evidence_of(src).free_at == len(case.requests))
    )
    assert leaked.sum() == len(kept) == 8
    # Every kept output scales with the batch; most are judged kept every iteration
    # (the last ones: cut off by the recording's end, or an activation by category).
    assert j.scales[leaked].all()
    assert (j.rule[leaked] == scaling.KEPT_EACH).sum() >= len(kept) // 2
    advice = table.advice_of(src)
    free = next(r for r in advice.remedies if r.remedy == "free_kept")
    assert free.method == "simulated" and free.saving_bytes > 0
    assert free.where and free.where.endswith(f":{leak['line']}")
    # It drops all eight kept outputs: the allocated peak goes down by at least
    # seven of them (the last one may be made after the peak).
    assert int(free.acts_on.sum()) == len(kept)


# Only runs that made as many allocations can be matched allocation by allocation; where
# the libraries took another path (e.g. GPT-2 at 16: cuBLAS) they did not.  Told from the
# sidecars' counters at collection time, so that the floor below counts what is compared.
JUDGE_PAIRS = [
    (fam, b0, b1)
    for fam, by in sorted(SWEEPS.items())
    for b0 in sorted(by)
    for b1 in sorted(by)
    if b1 == 2 * b0 and table.request_counts(by[b0])[0] == table.request_counts(by[b1])[0]
]


@pytest.mark.parametrize("family,src,dst", JUDGE_PAIRS, ids=lambda v: str(v))
def test_judgement_against_the_same_program_at_twice_the_batch(family, src, dst):
    """The same program at twice the batch makes the same requests in the same order:
    whatever was judged fixed has the same size there, whatever was judged to scale
    (above the 512 B minimum block) has another.  Checked by bytes, per allocation."""
    import numpy as np

    from vramscope.viewer.model.whatif import requests as rq

    a, ja, _ = table.case_of(SWEEPS[family][src])
    b, _, _ = table.case_of(SWEEPS[family][dst])
    ia = np.flatnonzero(a.requests.kind == rq.ALLOC)
    ib = np.flatnonzero(b.requests.kind == rq.ALLOC)
    assert len(ia) == len(ib), (
        f"{family} b{src} and b{dst} counted as many allocations but made {len(ia)} and {len(ib)}"
    )
    sa, sb = a.requests.size[ia], b.requests.size[ib]
    big = sa > 512
    scales = ja.scales[ia]
    right = np.where(scales, sa != sb, sa == sb) & big
    share = sa[right].sum() / sa[big].sum()
    assert share >= 0.99, f"{family} b{src}: {share:.2%} of the bytes judged right"


NO_CONV = [
    (fam, b0, b1)
    for fam, by in sorted(SWEEPS.items())
    if fam in ("gpt2", "vit")
    for b0 in sorted(by)
    for b1 in sorted(by)
    if b0 != b1
]


@pytest.mark.parametrize("family,src,dst", NO_CONV, ids=lambda v: str(v))
def test_transformers_are_predicted_exactly_at_every_batch(family, src, dst):
    """GPT-2 makes no cuDNN workspace and ViT only its patch embedding's (its size moves
    no segment): the prediction is the real peak reserved to the byte."""
    assert table.predict_peak(SWEEPS[family][src], dst) == table.real_peak_reserved(
        SWEEPS[family][dst]
    )


# Floors: the cases compared when these tests were written (39 sweep recordings in 8
# families).  The recordings are in the repository: fewer cases means one was lost, and
# the parametrised tests above would still pass on what is left.
MIN_SWEEP_RECORDINGS = 39
MIN_PAIRS = 35
MIN_JUDGE_PAIRS = 7
MIN_NO_CONV = 18


def test_enough_pairs_are_compared():
    assert sum(len(by) for by in SWEEPS.values()) >= MIN_SWEEP_RECORDINGS, {
        fam: sorted(by) for fam, by in SWEEPS.items()
    }
    assert len(PAIRS) >= MIN_PAIRS, PAIRS
    assert len(JUDGE_PAIRS) >= MIN_JUDGE_PAIRS, JUDGE_PAIRS
    assert len(NO_CONV) >= MIN_NO_CONV, NO_CONV
