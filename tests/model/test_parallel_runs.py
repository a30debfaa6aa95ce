"""Independent simulations on every core (:mod:`vramscope.viewer.model.core.parallel`):
the same answers as one after the other, in the same order, on real recordings - what-if
settings, advise's allocator settings, the draws of a batch estimate's range - and the
pool's own rules (when it runs serially, cancel, errors)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import DATA
from tests.workloads import batch_prediction_table as table
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core import parallel
from vramscope.viewer.model.core.errors import LoadCancelled
from vramscope.viewer.model.core.progress import Progress
from vramscope.viewer.model.whatif import RECOMMENDED, prepare

pytestmark = pytest.mark.skipif(not parallel.can_fork(), reason="the pool forks (Linux only)")


@pytest.fixture
def pool_forced(monkeypatch):
    """Small real cases on a pool of 2 (the size rule would run them serially), and a
    count of the pooled runs, so a test knows the pool ran."""
    monkeypatch.setenv(parallel.JOBS_ENV, "2")
    calls = []
    real = parallel._pooled

    def spy(*args, **kwargs):
        calls.append(args[2])  # the number of workers
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel, "_pooled", spy)

    class Threads(parallel._ThreadPool):  # the compiled model's runs: threads
        def __init__(self, fn, items, k, *rest):
            calls.append(k)
            super().__init__(fn, items, k, *rest)

    monkeypatch.setattr(parallel, "_ThreadPool", Threads)
    return calls


@pytest.fixture
def serial(monkeypatch):
    monkeypatch.setenv(parallel.JOBS_ENV, "1")


def same_result(a, b) -> None:
    """Every SimResult field equal: figures, curves, OOMs, segment events, final layout."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


# -- the pool's own rules --------------------------------------------------------------


def _square(x):
    return x * x


def _pid(_x):
    time.sleep(0.05)
    return os.getpid()


def test_results_in_the_items_order_on_the_pool_and_serially():
    items = list(range(37))
    order = []
    got = parallel.pmap(_square, items, jobs=2, on_result=lambda i, r: order.append(i))
    assert got == [x * x for x in items] == parallel.pmap(_square, items, jobs=1)
    assert sorted(order) == items  # every item reported once, as it finished


def test_the_pool_runs_in_other_processes_and_the_serial_path_here():
    pids = parallel.pmap(_pid, range(4), jobs=2)
    assert os.getpid() not in pids and len(set(pids)) == 2
    assert set(parallel.pmap(_pid, range(4), jobs=1)) == {os.getpid()}


def test_the_shared_case_is_not_pickled():
    # A closure over an unpicklable object (a lock): only the index goes to the workers.
    lock = threading.Lock()
    big = np.arange(1_000_000)
    got = parallel.pmap(lambda k: (lock.locked(), int(big[k::7].sum())), range(7), jobs=2)
    assert got == [(False, int(big[k::7].sum())) for k in range(7)]


def test_serial_when_the_pool_costs_more_than_it_saves(monkeypatch):
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    assert parallel.workers_for(9, parallel.MIN_PARALLEL_WORK - 1) == 1  # a small case
    assert parallel.workers_for(1, 10**7) == 1  # one item
    assert parallel.workers_for(9, 10**6) == 8
    assert parallel.workers_for(3, 10**6) == 3  # no more processes than items
    monkeypatch.setattr(parallel, "available_cpus", lambda: 1)
    assert parallel.workers_for(9, 10**7) == 1  # one CPU
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    assert parallel.workers_for(9, 10**7) == 1  # asked for
    assert parallel.workers_for(9, 10, jobs=4) == 4  # asked for: the size rule is skipped
    # Memory: no more workers than the free memory holds.
    monkeypatch.setattr(parallel, "_available_memory", lambda: 3 * 10**6 * parallel.BYTES_PER_WORK)
    assert parallel.workers_for(9, 10**6, jobs=8) == 3


def test_no_pool_inside_a_pool_worker():
    inner = parallel.pmap(lambda _x: parallel.workers_for(4, 10**7, jobs=2), range(2), jobs=2)
    assert inner == [1, 1] and parallel.workers_for(4, 10**7, jobs=2) == 2


FINISHED: list = []  # [folder]: where a _slow item that ran to its end says so (forked)


def _slow(x, progress):
    for k in range(200):
        progress.update("simulate", k / 200)
        time.sleep(0.01)
    (FINISHED[0] / str(x)).touch()
    return x


def test_cancel_stops_submitting_and_the_running_items(tmp_path):
    FINISHED[:] = [tmp_path]
    ev = threading.Event()
    seen = []

    def update(stage, fraction):
        seen.append(fraction)
        if fraction > 0:  # cancelled once an item's own progress came through
            ev.set()

    with pytest.raises(LoadCancelled):
        parallel.pmap(_slow, range(20), jobs=2, with_progress=True, progress=Progress(update, ev))
    # pmap waits for its workers before it raises: an item of 2 s that was not stopped
    # would have run to its end by now.
    assert not list(tmp_path.iterdir())
    assert seen and 0 < max(seen) < 0.5  # the items' own progress came through


def _fail_on_three(x):
    if x == 3:
        raise ValueError("item 3")
    return x


def test_an_item_that_raises_raises_here():
    with pytest.raises(ValueError, match="item 3"):
        parallel.pmap(_fail_on_three, range(8), jobs=2)
    with pytest.raises(ValueError, match="item 3"):
        parallel.pmap(_fail_on_three, range(8), jobs=1)


# -- real recordings -------------------------------------------------------------------

FILES = ["fragmentation_oom", "gpt2_oom", "whatif_default", "cuda_graph_pool"]


@pytest.mark.parametrize("name", FILES)
def test_whatif_recommend_is_the_same_on_the_pool(name, pool_forced, monkeypatch):
    from vramscope.viewer.commands.whatif import predict_all

    snap = load_snapshot(DATA / f"{name}.pickle")
    confs = ["recorded"] + [c for c in RECOMMENDED]
    limits = [None, 1 << 30]  # the recorded limit, and one that makes some settings OOM
    for limit in limits:
        case = prepare(snap)
        pooled = predict_all(case, confs, limit)
        monkeypatch.setenv(parallel.JOBS_ENV, "1")
        one_by_one = predict_all(prepare(snap), confs, limit)
        monkeypatch.setenv(parallel.JOBS_ENV, "2")
        assert [p.conf for p in pooled] == [p.conf for p in one_by_one] == confs
        for a, b in zip(pooled, one_by_one):
            assert (a.config, a.limit) == (b.config, b.limit)
            same_result(a.result, b.result)
            assert a.to_dict(case) == b.to_dict(case)
    assert pool_forced == [2, 2]


def test_whatif_cli_output_is_the_same_on_the_pool(tmp_path):
    import subprocess
    import sys

    path = DATA / "fragmentation_oom.pickle"
    outs = []
    for jobs in ("1", "2"):
        env = dict(os.environ, VRAMSCOPE_JOBS=jobs)
        outs.append(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "vramscope.viewer",
                    "whatif",
                    str(path),
                    "--recommend",
                    "--json",
                ],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout
        )
    assert outs[0] == outs[1] and outs[0].count('"conf"') == len(RECOMMENDED)


@pytest.fixture(scope="module")
def resnet():
    sweep = table.sweeps().get("resnet")
    if not sweep:
        pytest.skip("the ResNet-18 batch sweep recordings are not here")
    return table.case_of(sweep[max(sweep)])


def test_the_batch_estimate_range_is_the_same_on_the_pool(resnet, pool_forced, monkeypatch):
    from vramscope.viewer.model.remedies import batch_scale

    case, j, _ = resnet
    for scale in (Fraction(1, 2), Fraction(3, 2)):
        pooled = batch_scale.estimate_range(case, j, scale, None, 2 << 30)
        monkeypatch.setenv(parallel.JOBS_ENV, "1")
        one_by_one = batch_scale.estimate_range(case, j, scale, None, 2 << 30)
        monkeypatch.setenv(parallel.JOBS_ENV, "2")
        assert pooled == one_by_one and pooled is not None and pooled.workspaces > 0
    assert pool_forced and all(k == 2 for k in pool_forced)


def test_advise_is_the_same_on_the_pool(resnet, pool_forced, monkeypatch):
    from vramscope.viewer.model.remedies.advise import advise, format_text

    case, _, _ = resnet
    pooled = advise(case, None, 2 << 30)
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    one_by_one = advise(case, None, 2 << 30)
    assert pooled.to_dict() == one_by_one.to_dict()
    assert format_text(pooled) == format_text(one_by_one)
    for a, b in zip(pooled.remedies, one_by_one.remedies):
        for f in ("curve", "curve_x", "acts_on"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None and y is None) or np.array_equal(x, y), (a.remedy, f)
    # The allocator settings and the estimate's draws went through the pool.
    assert len(pool_forced) >= 2


def test_advise_progress_and_cancel_on_the_pool(resnet, pool_forced):
    from vramscope.viewer.model.remedies.advise import advise

    case, _, _ = resnet
    ev = threading.Event()
    stages = []

    def seen(stage, f):
        stages.append(stage)
        if stage == "allocator" and f > 0:
            ev.set()

    with pytest.raises(LoadCancelled):
        advise(case, None, 2 << 30, Progress(seen, ev))
    assert "allocator" in stages


def test_a_batch_prediction_is_the_same_with_its_point_run_beside_its_draws(
    resnet, pool_forced, monkeypatch
):
    from vramscope.viewer.model.remedies import batch_scale

    case, j, _ = resnet
    for scale in (Fraction(1, 2), Fraction(3, 2)):
        for limit in (2 << 30, 1 << 30):
            beside = batch_scale.predict(case, j, scale, limit)
            monkeypatch.setenv(parallel.JOBS_ENV, "1")
            one_by_one = batch_scale.predict(case, j, scale, limit)
            monkeypatch.setenv(parallel.JOBS_ENV, "2")
            assert beside.estimate == one_by_one.estimate and beside.estimate is not None
            assert (beside.peak, beside.batch, beside.scale) == (
                one_by_one.peak,
                one_by_one.batch,
                one_by_one.scale,
            )
            same_result(beside.result, one_by_one.result)
    assert pool_forced
