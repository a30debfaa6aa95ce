"""The recorded run (the self-check's) simulated on a thread beside the settings' own
simulation (:meth:`Case.recorded_beside`, used by ``whatif``'s answer): the same
answer, text and JSON, as one after the other, and the same recorded run to the byte;
an error of the recorded run is the one raised, as serially."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import DATA
from tests.model.test_parallel_runs import same_result
from vramscope.viewer.commands import whatif as whatif_cmd
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core import parallel
from vramscope.viewer.model.core.errors import SnapshotError
from vramscope.viewer.model.whatif import native_sim, predictions, prepare

FILES = ["gpt2_oom.pickle", "whatif_expandable.pickle", "side_stream_pending.pickle"]
CONFS = [["max_split_size_mb:64"], ["expandable_segments:True"], [""]]


@pytest.fixture
def threads_seen(monkeypatch):
    """Which thread simulated each configuration (every case counts as big enough)."""
    monkeypatch.setattr(predictions, "BESIDE_MIN_REQUESTS", 0)
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    monkeypatch.setattr(parallel, "available_cpus", lambda: 2)
    seen: list[tuple[object, str]] = []
    real = predictions.simulate

    def spy(reqs, cfg, *args, **kwargs):
        seen.append((cfg, threading.current_thread().name))
        return real(reqs, cfg, *args, **kwargs)

    monkeypatch.setattr(predictions, "simulate", spy)
    return seen


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("confs", CONFS, ids=lambda c: c[0] or "defaults")
def test_beside_equals_serial(name, confs, threads_seen, monkeypatch):
    assert native_sim.use_native()
    snap = load_snapshot(DATA / name)
    beside = prepare(snap)
    got = whatif_cmd.answer(beside, confs)
    recorded_cfg = beside.recorded
    ran_beside = [t for cfg, t in threads_seen if cfg == recorded_cfg]
    if beside.config_of(confs[0]) == recorded_cfg:
        # The setting is the recorded run itself: simulated once, in this thread.
        assert ran_beside == [threading.current_thread().name]
    else:
        assert ran_beside == ["vramscope-recorded-run"]
        assert all(
            t == threading.current_thread().name for c, t in threads_seen if c != recorded_cfg
        )

    monkeypatch.setenv(parallel.JOBS_ENV, "1")  # one after the other
    threads_seen.clear()
    serial = prepare(snap)
    want = whatif_cmd.answer(serial, confs)
    assert {t for _, t in threads_seen} == {threading.current_thread().name}
    assert got.data == want.data
    assert got.text == want.text
    assert got.warnings == want.warnings
    same_result(beside.recorded_run(), serial.recorded_run())


def test_the_recorded_runs_error_is_raised_first(threads_seen, monkeypatch):
    snap = load_snapshot(DATA / "gpt2_oom.pickle")
    case = prepare(snap)
    real = predictions.simulate

    def broken(reqs, cfg, *args, **kwargs):
        if cfg == case.recorded:
            raise SnapshotError("the recorded run broke")
        return real(reqs, cfg, *args, **kwargs)

    monkeypatch.setattr(predictions, "simulate", broken)
    with pytest.raises(SnapshotError, match="the recorded run broke"):
        case.recorded_beside(lambda: case.simulate("max_split_size_mb:64"))

    def both(reqs, cfg, *args, **kwargs):
        raise SnapshotError("recorded" if cfg == case.recorded else "setting")

    monkeypatch.setattr(predictions, "simulate", both)
    with pytest.raises(SnapshotError, match=r"^recorded$"):
        case.recorded_beside(lambda: case.simulate("max_split_size_mb:64"))


def test_serial_where_it_does_not_pay(monkeypatch, threads_seen):
    """Small streams, one CPU, VRAMSCOPE_JOBS=1 or the Python model: no thread."""
    case = prepare(load_snapshot(DATA / "gpt2_oom.pickle"))
    assert case._beside_pays()
    for patch in (
        lambda m: m.setattr(predictions, "BESIDE_MIN_REQUESTS", len(case.requests) + 1),
        lambda m: m.setattr(parallel, "available_cpus", lambda: 1),
        lambda m: m.setenv(parallel.JOBS_ENV, "1"),
        lambda m: m.setenv(native_sim.PY_SIMULATOR_ENV, "1"),
    ):
        with monkeypatch.context() as m:
            patch(m)
            assert not case._beside_pays()
        assert case._beside_pays()
