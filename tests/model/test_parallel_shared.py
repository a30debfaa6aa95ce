"""A pooled result's large arrays come back through shared memory, not the pipe
(:mod:`vramscope.viewer.model.core.parallel`): the same values as serially, mapped in
this process, and no file left in ``/dev/shm`` after success, an error or a cancel;
:func:`~vramscope.viewer.model.core.parallel.pmap_async` runs beside this process and
gives the same results, two rounds at once included."""

from __future__ import annotations

import mmap
import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

from vramscope.viewer.model.core import parallel
from vramscope.viewer.model.core.errors import LoadCancelled
from vramscope.viewer.model.core.progress import Progress

pytestmark = pytest.mark.skipif(not parallel.can_fork(), reason="the pool forks (Linux only)")

BIG = 400_000  # int64: 3.2 MB, over SHARED_MIN_BYTES


def ours() -> list[str]:
    """The files this process's pools have in /dev/shm."""
    prefix = f"vramscope-{os.getpid()}-"
    return [n for n in os.listdir(parallel.SHARED_DIR) if n.startswith(prefix)]


def mapped(a: np.ndarray) -> bool:
    """``a``'s memory is a mapping (of a shared file), not an array of its own."""
    b = a
    while isinstance(b, (np.ndarray, memoryview)):
        b = b.base if isinstance(b, np.ndarray) else b.obj
    return isinstance(b, mmap.mmap)


def _result(k: int):
    # Large arrays (one twice, one Fortran-ordered), a small one, a view, other values.
    big = np.arange(BIG, dtype=np.int64) * k
    return {
        "k": k,
        "big": big,
        "again": big,
        "fortran": np.asfortranarray(np.arange(BIG, dtype=np.float64).reshape(800, 500) + k),
        "small": np.arange(10) + k,
        "strided": big[::3],
        "words": ["a", k],
    }


def same(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            x, y = a[key], b[key]
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), key
            assert x.flags.writeable, key
        else:
            assert a[key] == b[key], key
    assert a["fortran"].flags.f_contiguous


@pytest.fixture(autouse=True)
def none_left():
    assert ours() == []
    yield
    assert ours() == []


def test_large_arrays_come_back_mapped_and_equal_to_serial():
    pooled = parallel.pmap(_result, range(5), jobs=2)
    serial = parallel.pmap(_result, range(5), jobs=1)
    for a, b in zip(pooled, serial):
        same(a, b)
        assert mapped(a["big"]) and mapped(a["fortran"]) and not mapped(a["small"])
        # One array sent once: still one array here.
        assert a["again"] is a["big"]
    # Writable, and each result's own memory.
    pooled[0]["big"][:] = -1
    assert int(pooled[1]["big"][1]) == 1


def test_a_full_or_missing_shared_folder_falls_back_to_the_pipe(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "SHARED_DIR", str(tmp_path / "missing"))
    pooled = parallel.pmap(_result, range(3), jobs=2)
    for a, b in zip(pooled, parallel.pmap(_result, range(3), jobs=1)):
        same(a, b)
        assert not mapped(a["big"])


def _fail_first(k: int):
    if k == 0:
        raise ValueError("item 0")
    time.sleep(0.3)
    return _result(k)


def test_no_file_left_after_an_item_raises():
    # The other items run to their end after the error: results never read.
    with pytest.raises(ValueError, match="item 0"):
        parallel.pmap(_fail_first, range(4), jobs=2)


def _slow_big(k: int):
    time.sleep(0.4)
    return _result(k)


def test_no_file_left_after_a_cancel():
    ev = threading.Event()
    threading.Timer(0.1, ev.set).start()
    with pytest.raises(LoadCancelled):
        parallel.pmap(_slow_big, range(6), jobs=2, progress=Progress(None, ev))


def test_pmap_async_runs_beside_this_process_and_gives_the_same_results():
    serial = parallel.pmap(_result, range(4), jobs=1)
    with parallel.pmap_async(_result, range(4), jobs=2) as pending:
        assert pending.pooled
        here = sum(range(1000))  # this process works meanwhile
        got = pending.result()
    assert here == 499500
    for a, b in zip(got, serial):
        same(a, b)
    # From the worker: mapped (what no worker took by then, this process ran).
    assert mapped(got[0]["big"])


def test_one_item_is_worth_a_worker_beside_this_process(monkeypatch):
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    monkeypatch.setattr(parallel, "_available_memory", lambda: None)
    assert parallel.workers_beside(1, 10**7) == 1
    assert parallel.workers_beside(20, 10**7) == 7  # this process keeps a CPU
    assert parallel.workers_beside(20, parallel.MIN_PARALLEL_WORK - 1) == 0
    assert parallel.workers_beside(20, 10, jobs=3) == 2
    monkeypatch.setattr(parallel, "available_cpus", lambda: 1)
    assert parallel.workers_beside(4, 10**7) == 0
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    assert parallel.workers_beside(4, 10**7) == 0


def test_serial_pmap_async_runs_when_its_results_are_asked_for():
    ran = []
    with parallel.pmap_async(lambda k: ran.append(k) or k * k, range(3), jobs=1) as pending:
        assert not pending.pooled and ran == []
        assert pending.result() == [0, 1, 4] and ran == [0, 1, 2]


STATE: dict = {}


def test_two_rounds_at_once_each_see_what_was_built_before_it_started():
    STATE["x"] = np.arange(BIG)
    with parallel.pmap_async(lambda k: STATE["x"] * k, range(3), jobs=2) as first:
        # Built after the first round forked: its workers do not see it, the second's do.
        STATE["y"] = np.arange(BIG) + 5
        with parallel.pmap_async(
            lambda k: (STATE["x"] * k, STATE.get("y")), range(3), jobs=2
        ) as second:
            b = second.result()
        a = first.result()
    for k in range(3):
        assert np.array_equal(a[k], np.arange(BIG) * k)
        assert np.array_equal(b[k][0], a[k]) and np.array_equal(b[k][1], STATE["y"])


def test_leaving_the_block_early_stops_the_pool():
    with pytest.raises(RuntimeError), parallel.pmap_async(_slow_big, range(6), jobs=2):
        raise RuntimeError("the caller's own work failed")
    assert multiprocessing.active_children() == []


def test_pmap_async_progress_and_cancel():
    ev = threading.Event()
    seen = []
    with parallel.pmap_async(_slow_big, range(6), jobs=2) as pending:
        threading.Timer(0.1, ev.set).start()
        with pytest.raises(LoadCancelled):
            pending.result(Progress(lambda s, f: seen.append(s), ev), "allocator")
    assert seen and set(seen) == {"allocator"}


def _where(k: int):
    time.sleep(0.05)
    return os.getpid(), threading.current_thread().name, _result(k)


def test_pmap_async_on_threads_gives_the_same_results_here():
    serial = parallel.pmap(_result, range(4), jobs=1)
    with parallel.pmap_async(_where, range(4), jobs=3, threads=True) as pending:
        assert pending.pooled
        got = pending.result()
    assert {pid for pid, _, _ in got} == {os.getpid()}
    names = {name.startswith("vramscope-beside") or name for _, name, _ in got}
    assert names <= {True, "MainThread"} and True in names
    for (_, _, a), b in zip(got, serial):
        same(a, b)
        assert not mapped(a["big"])  # the item's own array, not a copy


def _stoppable(k, progress):
    for step in range(100):
        progress.update("simulate", step / 100)
        time.sleep(0.01)
    FINISHED_HERE.append(k)
    return k


FINISHED_HERE: list = []


def test_leaving_the_block_early_stops_the_threads():
    FINISHED_HERE.clear()
    with (
        pytest.raises(RuntimeError),
        parallel.pmap_async(_stoppable, range(6), jobs=3, threads=True, with_progress=True),
    ):
        time.sleep(0.1)
        raise RuntimeError("the caller's own work failed")
    # Each running item stopped at its next checkpoint, none ran its 1 s to the end.
    assert FINISHED_HERE == []
    assert not [t for t in threading.enumerate() if t.name.startswith("vramscope-beside")]


def test_threads_pay_from_less_work_than_a_pool(monkeypatch):
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    monkeypatch.setattr(parallel, "available_cpus", lambda: 4)
    small = parallel.MIN_THREAD_WORK
    assert small < parallel.MIN_PARALLEL_WORK
    assert parallel.workers_beside(5, small, threads=True) == 3
    assert parallel.workers_beside(5, small) == 0


def _who(k: int):
    time.sleep(0.2)
    return k, os.getpid(), threading.current_thread().name


@pytest.mark.parametrize("threads", [False, True])
def test_waiting_for_its_results_this_process_runs_what_no_worker_took(threads):
    with parallel.pmap_async(_who, range(6), jobs=2, threads=threads) as pending:
        got = pending.result()
    assert [k for k, _, _ in got] == list(range(6))
    here = [(pid, name) == (os.getpid(), "MainThread") for _, pid, name in got]
    # One worker beside this process: both ran items, this one the last.
    assert any(here) and not all(here) and here[-1]


def test_an_item_run_here_reports_its_progress_and_stops_at_a_cancel():
    ev = threading.Event()
    seen = []

    def update(stage, f):
        seen.append(f)
        if len(seen) > 20:
            ev.set()

    with parallel.pmap_async(_stoppable, range(4), jobs=2, with_progress=True) as pending:
        with pytest.raises(LoadCancelled):
            pending.result(Progress(update, ev), "simulate")
    assert 0 < max(seen) < 1
