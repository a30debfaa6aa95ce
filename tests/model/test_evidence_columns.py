"""advise's evidence and batch judgement on a long recording: each column is worked out
once, without sorting the whole request stream.

Categories and reason codes are kept as small integer codes (:class:`evidence.Coded`),
the requests' sizes are indexed once (:class:`evidence.SizeIndex`), stacks are looked up
in a table by id.  Each shortcut must answer what the plain numpy expression answers, on
real recordings (eager, autocast, torch.compile, DDP) and on random columns; and the
evidence, the judgement and the split at the peak together sort the stream once: the
sort that indexes its sizes.
"""

from __future__ import annotations

import itertools
import sys
import threading

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import evidence, scaling, split
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

RECORDINGS = [
    DATA / "gpt2_oom.pickle",  # eager, an OOM
    DATA / "resnet50_train.pickle",  # bf16 autocast
    DATA / "zoo" / "cmp_ro_encoder_adamw_fp32_b8.pickle.xz",  # torch.compile
    DATA / "ddp_2ranks" / "vm_pid592_rank0_cuda0_exit_20261121-073430-452.pickle",  # DDP
]


@pytest.fixture(scope="module", params=RECORDINGS, ids=lambda p: p.name)
def recorded(request):
    case = prepare(load_snapshot(str(request.param), use_cache=False))
    return case, evidence.gather(case)


def test_codes_answer_as_the_labels(recorded):
    """A membership test on the codes is ``np.isin`` on the label strings, for every
    label and pairs of them; the public ``categories_of`` still gives the strings."""
    case, evd = recorded
    assert evd.categories is not None and evd.category_reasons is not None
    names = sorted(set(evd.categories.tolist())) + ["no such category"]
    for k in (1, 2):
        for chosen in itertools.combinations(names, k):
            want = np.isin(evd.categories, chosen)
            assert np.array_equal(evd.category_in(*chosen), want), chosen
    reasons = sorted(set(evd.category_reasons.tolist()))
    assert len(reasons) > 2
    for chosen in itertools.combinations(reasons, 2):
        want = np.isin(evd.category_reasons, chosen)
        assert np.array_equal(evd.reason_in(*chosen), want), chosen
    got = evidence.categories_of(case)
    assert got is not None
    cats, why, guess, _ = got
    assert cats.tolist() == evd.categories.tolist()
    assert why.tolist() == evd.category_reasons.tolist()
    assert evd.category_guess is not None and np.array_equal(guess, evd.category_guess)


def test_the_evidence_without_codes_answers_by_the_strings(recorded):
    """Evidence given its categories as strings (no codes) answers the same."""
    case, evd = recorded
    plain = evidence.gather(
        case, evd.categories, evd.category_reasons, evd.category_guess, evd.breakdown
    )
    assert plain.category_codes is None
    for names in (("parameter",), ("activation", "input"), ("gradient", "optimizer_state")):
        assert np.array_equal(plain.category_in(*names), evd.category_in(*names))
    assert np.array_equal(plain.reason_in("ddp_bucket"), evd.reason_in("ddp_bucket"))
    j, k = scaling.judge(case, 8, evd), scaling.judge(case, 8, plain)
    assert np.array_equal(j.rule, k.rule)
    assert np.array_equal(j.guessed, k.guessed)


def test_size_index_answers_as_numpy(recorded):
    """``isin`` and ``distinct`` of the index are ``np.isin`` and ``np.unique`` of the
    sizes, on a recording's stream and on random columns (empty, one value, repeats)."""
    case, _ = recorded
    rng = np.random.default_rng(7)
    columns = [
        case.requests.size.astype(np.int64),
        np.zeros(0, np.int64),
        np.array([4096], np.int64),
        rng.integers(0, 40, 5000) * 512,
        rng.integers(1, 1 << 40, 3000),
    ]
    for size in columns:
        index = evidence.SizeIndex(size)
        assert np.array_equal(index.values, np.unique(size))
        for _ in range(5):
            wanted = rng.choice(size, min(len(size), 7)) if len(size) else size
            for times in (1, 2):
                assert np.array_equal(index.isin(wanted, times), np.isin(size * times, wanted))
            mask = rng.random(len(size)) < 0.3
            assert np.array_equal(index.distinct(mask), np.unique(size[mask]))


def test_one_of_and_stack_table_answer_as_numpy():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 16, 10000).astype(np.int8)
    for wanted in ((), (3,), (0, 15), tuple(range(9, 15)), (99,)):
        assert np.array_equal(evidence.one_of(codes, wanted), np.isin(codes, wanted))
    for site in (
        rng.integers(-1, 50, 2000).astype(np.int32),
        np.full(10, -1, np.int32),
        np.zeros(0, np.int32),
    ):
        stacks, top = evidence.stack_table(site)
        assert np.array_equal(stacks, np.unique(site[site >= 0]))
        assert top == (int(site.max()) + 1 if len(site) else 0)


def test_live_peak_is_the_streams(recorded):
    """The evidence's peak of live requested bytes is the stream's, counted allocation by
    allocation, and the judgement reads it."""
    case, evd = recorded
    reqs = case.requests
    n = len(reqs)
    alloc = np.flatnonzero(reqs.kind == rq.ALLOC)
    delta = np.zeros(n + 1, np.int64)
    np.add.at(delta, alloc, reqs.size[alloc])
    np.add.at(delta, evd.free_at[alloc], -reqs.size[alloc])
    init = reqs.initial
    before = int(init.blk_requested[init.blk_state == 0].sum()) if init.n_blocks else 0
    assert evd.live_peak_bytes == before + max(int(np.cumsum(delta).max()), 0)
    assert scaling.live_peak(reqs, evd) == evd.live_peak_bytes


def test_categories_made_beside_the_replay_are_the_serial_ones(recorded, monkeypatch):
    """The breakdown's first part made on a thread while the replay runs (as summary makes
    it; a long trace of one device does so): the same codes, reasons and guesses as the
    replay followed by the whole breakdown."""
    from vramscope.viewer.model.categories import breakdown

    case, _ = recorded
    serial = evidence._coded_categories(case)
    threads: list[str] = []
    real_prepare = breakdown.prepare

    def prepare_noted(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(breakdown, "OVERLAP_MIN_EVENTS", 0)
    monkeypatch.setattr(breakdown.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(breakdown, "prepare", prepare_noted)
    beside = evidence._coded_categories(case)
    assert serial is not None and beside is not None
    one_device = len(np.unique(case.snap.trace.device)) == 1
    assert (threads != [] and threading.main_thread().name not in threads) == one_device
    for a, b in zip(serial[:2], beside[:2]):
        assert a.values == b.values and np.array_equal(a.index, b.index)
    assert np.array_equal(serial[2], beside[2])


SORTS = ("isin", "unique", "argsort", "lexsort", "sort")


def test_the_stream_is_sorted_once(recorded, monkeypatch):
    """The evidence (beside its categories, whose replay and breakdown are the categories'
    own), the batch judgement and the split at the peak sort no column as long as the
    stream's allocations but its sizes, once, to index them; and, in a compiled program,
    the allocations by size to find what each of autotuning's copies copied."""
    case, _ = recorded
    coded = evidence._coded_categories(case)
    recorded_run = case.recorded_run()  # the what-if model's, simulated before
    monkeypatch.setattr(evidence, "_coded_categories", lambda case, progress=None: coded)
    allocs = int((case.requests.kind == rq.ALLOC).sum())
    long_sorts: list[tuple[str, str]] = []
    for name in SORTS:
        plain = getattr(np, name)

        def counted(*args, _plain=plain, _name=name, **kwargs):
            first = args[0][0] if _name == "lexsort" else args[0]
            caller = sys._getframe(1).f_code
            # Ours, not numpy's own calls inside another of these.
            ours = "/numpy/" not in caller.co_filename.replace("\\", "/")
            if ours and np.ndim(first) and len(first) >= allocs // 2:
                long_sorts.append((_name, caller.co_name))
            return _plain(*args, **kwargs)

        monkeypatch.setattr(np, name, counted)
    evd = evidence.gather(case)
    j = scaling.judge(case, 8, evd)
    at, event, _ = split.moment(case, evd, recorded_run)
    split.split_at(case, evd, j, at, event)
    assert long_sorts[:1] == [("sort", "__init__")]  # SizeIndex's
    copies = [call for call in long_sorts[1:] if call[1] == "_copied_from"]
    assert long_sorts[1:] == copies
    assert bool(copies) == bool(j.tuned.any())
