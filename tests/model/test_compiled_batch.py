"""Batch-size predictions from torch.compile (Inductor) recordings against real runs.

The truth kit recorded GPT-2 (fp32, AdamW) and ViT-S (fp32, AdamW) under torch.compile at
three batch sizes each, in fresh processes (tests/data/truth/compiled_*).  From each
recording the peak reserved bytes at every other batch of its family must come within
5 % of the real run's ``reserved_bytes.all.peak``, or be labelled an estimate whose range
holds it; and a prediction more than 2 % off is never labelled exact.  Which pairs are
compared is decided at collection time; a floor on their number fails when one goes
missing.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tests.workloads import batch_prediction_table as table

SWEEPS = table.compiled_sweeps()
PAIRS = [
    (fam, b0, b1)
    for fam, by in sorted(SWEEPS.items())
    for b0 in sorted(by)
    for b1 in sorted(by)
    if b1 != b0
]
TOLERANCE = 0.05  # a point prediction this close is good without a range
EXACT = 0.02  # a prediction labelled exact is never further off than this


def _problems(fam: str, b0: int, b1: int, p, real: int) -> list[str]:
    """What is wrong with the prediction ``p`` (a BatchPrediction) of ``real``."""
    err = p.peak / real - 1
    rng = p.range or (p.peak, p.peak)
    out = []
    if not p.is_estimate and abs(err) > EXACT:
        out.append(f"{fam} b{b0} -> b{b1}: labelled exact, {err:+.1%} off")
    if abs(err) > TOLERANCE and not (p.is_estimate and rng[0] <= real <= rng[1]):
        out.append(
            f"{fam} b{b0} -> b{b1}: {err:+.1%} off, estimate {p.is_estimate}, "
            f"range {rng}, real {real}"
        )
    if p.is_estimate and not rng[0] <= real <= rng[1]:
        out.append(f"{fam} b{b0} -> b{b1}: estimate whose range {rng} misses the real {real}")
    return out


@pytest.mark.parametrize("family,src,dst", PAIRS, ids=lambda v: str(v))
def test_every_compiled_pair_is_close_or_an_estimate_that_holds_the_real_peak(family, src, dst):
    p = table.prediction_of(SWEEPS[family][src], dst)
    real = table.real_peak_reserved(SWEEPS[family][dst])
    assert p.scale == Fraction(dst, src)
    assert not _problems(family, src, dst, p, real)


def test_the_recorded_batch_is_predicted_exactly_and_not_as_an_estimate():
    assert SWEEPS, "no compiled recording in tests/data/truth"
    for fam, by in SWEEPS.items():
        for b, path in by.items():
            p = table.prediction_of(path, b)
            assert p.peak == table.real_peak_reserved(path) and not p.is_estimate, (fam, b)


def _judgement(fam: str, b: int):
    return table.case_of(SWEEPS[fam][b])


@pytest.mark.parametrize("family", sorted(SWEEPS))
def test_autotuning_is_told_apart_and_its_benchmark_buffers_stay(family):
    """Inductor benchmarks its kernels the first time each runs: the buffer it flushes
    the L2 cache with has one size at every batch (the GPU's, not the batch's), and the
    copies it makes of a kernel's arguments are judged like what they copy."""
    from vramscope.viewer.model.remedies import scaling

    sizes = set()
    for b in sorted(SWEEPS[family]):
        _case, j, _ = _judgement(family, b)
        scratch = j.rule == scaling.TUNING_SCRATCH
        assert scratch.any() and j.tuning[scratch].all() and not j.scales[scratch].any()
        sizes |= set(j.size[scratch].tolist())
        copies = np.isin(j.rule, (scaling.TUNING_COPY_FIXED, scaling.TUNING_COPY_SCALED))
        assert copies.any() and j.tuning[copies].all()
    assert len(sizes) == 1, sizes


@pytest.mark.parametrize("family", sorted(SWEEPS))
def test_steady_iterations_scale_as_judged(family):
    """In an iteration after compilation (the last complete one) the program makes the
    same tensors at every batch: the bytes judged fixed (not by a size coincidence
    alone) are the same at another batch, and the iteration's bytes as judged (fixed kept,
    the rest scaled) are the other batch's, within 2 % (a few scratch buffers differ)."""
    from vramscope.viewer.model.whatif import requests as rq

    by = sorted(SWEEPS[family])
    got = {}
    for b in by:
        case, j, _ = _judgement(family, b)
        evd = table.evidence_of(SWEEPS[family][b])
        last = evd.n_iterations - 1
        m = (case.requests.kind == rq.ALLOC) & (evd.iteration == last) & (j.size > 512)
        got[b] = (
            int(j.size[m & ~j.scales & ~j.guessed].sum()),
            int(j.size[m & ~j.scales].sum()),
            int(j.size[m & j.scales].sum()),
        )
    for b0 in by:
        for b1 in by:
            sure0, fixed0, scaled0 = got[b0]
            sure1, fixed1, scaled1 = got[b1]
            assert abs(sure1 / sure0 - 1) <= 0.02, (family, b0, b1, got)
            as_judged = fixed0 + scaled0 * b1 / b0
            assert abs((fixed1 + scaled1) / as_judged - 1) <= 0.02, (family, b0, b1, got)


def test_the_checks_fail_without_inductors_frames(monkeypatch):
    """Without what Inductor's frames say (its backward read as forward, autotuning as
    any other allocation), the same checks find mispredictions labelled exact: they can
    fail."""
    from vramscope.viewer.model.remedies import batch_scale, scaling

    def frames_ignored(case, evd):
        n = len(evd.phase)
        return evd.phase.copy(), np.zeros(n, np.int8), np.zeros(n, bool)

    monkeypatch.setattr(scaling, "compiled_evidence", frames_ignored)
    found = []
    for fam, b0, b1 in PAIRS:
        case, _, truth = table.case_of(SWEEPS[fam][b0])
        j = scaling.judge(case, int(truth["batch_size"]), table.evidence_of(SWEEPS[fam][b0]))
        p = batch_scale.predict(case, j, Fraction(b1, b0), recorded_batch=b0)
        found += _problems(fam, b0, b1, p, table.real_peak_reserved(SWEEPS[fam][b1]))
    assert found


# Floors: the compiled recordings when these tests were written (2 families x 3 batches).
MIN_RECORDINGS = 6
MIN_PAIRS = 12


def test_enough_compiled_pairs_are_compared():
    assert sum(len(by) for by in SWEEPS.values()) >= MIN_RECORDINGS, SWEEPS
    assert len(PAIRS) >= MIN_PAIRS, PAIRS
    scales = {Fraction(b1, b0) for _, b0, b1 in PAIRS}
    assert Fraction(1, 2) in scales and Fraction(3, 2) in scales, scales
