"""advise's simulations of edited streams (free what is kept, no_grad, the optimizer
pair, checkpointing, autocast) run on the pool beside the allocator settings, each built
where it runs: the same advice as one after the other, to the byte, curves included."""

from __future__ import annotations

import threading
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core import parallel
from vramscope.viewer.model.remedies.advise import RECORDED_RUN, advise, format_text
from vramscope.viewer.model.whatif import native_sim, prepare

pytestmark = pytest.mark.skipif(not parallel.can_fork(), reason="the pool forks (Linux only)")

# Each recording with the remedies (their specs' ids) whose runs it makes on the pool.
RECORDINGS = {
    "gpt2_leak": {"free_kept", "8bit_optimizer", "gradient_checkpointing", "bf16_autocast"},
    "vit_val_grad": {"no_grad_forward", "8bit_optimizer"},
    "gpt2_adamw_fp32": {"8bit_optimizer", "gradient_checkpointing", "bf16_autocast"},
}


@pytest.fixture
def pooled_items(monkeypatch):
    """The items of every round on a pool of processes or of threads beside this one, so
    a test knows which runs went through them."""
    seen: list[list] = []
    real = parallel._start

    def spy(*args, **kwargs):
        seen.append(list(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel, "_start", spy)

    class Threads(parallel._ThreadPool):
        def __init__(self, fn, items, *rest):
            seen.append(list(items))
            super().__init__(fn, items, *rest)

    monkeypatch.setattr(parallel, "_ThreadPool", Threads)
    return seen


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_advise_is_the_same_serial_and_on_the_pool(name, pooled_items, monkeypatch):
    case = prepare(load_snapshot(DATA / "truth" / f"{name}.pickle.xz"))
    # These recordings are small: the size rule would run them serially.
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    serial = advise(case)
    assert pooled_items == []
    monkeypatch.setenv(parallel.JOBS_ENV, "2")
    pooled = advise(case)
    # A pool task is named SPEC/RUN.
    specs = {k.split("/")[0] for items in pooled_items for k in items if isinstance(k, str)}
    assert RECORDINGS[name] <= specs, specs
    assert "allocator" in specs

    assert pooled.to_dict() == serial.to_dict()
    assert format_text(pooled) == format_text(serial)
    ids = [r.remedy for r in serial.remedies]
    assert len(ids) >= 3
    for a, b in zip(pooled.remedies, serial.remedies):
        for f in ("curve", "curve_x", "acts_on"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None) == (y is None), (a.remedy, f)
            if x is not None:
                assert x.dtype == y.dtype and np.array_equal(x, y), (a.remedy, f)


@pytest.mark.skipif(not native_sim.use_native(), reason="threads run the compiled model")
def test_the_runs_that_need_no_judgement_start_beside_it(monkeypatch):
    from vramscope.viewer.model.remedies.catalogue import context

    order: list[str] = []
    rounds: list[list] = []

    class Threads(parallel._ThreadPool):
        def __init__(self, fn, items, *rest):
            order.append("threads")
            rounds.append(list(items))
            super().__init__(fn, items, *rest)

    real_gather = context.evidence.gather

    def gather(*args, **kwargs):
        order.append("evidence")
        return real_gather(*args, **kwargs)

    monkeypatch.setattr(parallel, "_ThreadPool", Threads)
    monkeypatch.setattr(context.evidence, "gather", gather)
    monkeypatch.setenv(parallel.JOBS_ENV, "2")
    path = DATA / "truth" / "gpt2_leak.pickle.xz"
    beside = advise(prepare(load_snapshot(path)))
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    serial = advise(prepare(load_snapshot(path)))
    assert order[:2] == ["threads", "evidence"]
    early = rounds[0]  # (the batch prediction's draws follow on threads too)
    assert RECORDED_RUN in early and any(k.startswith("allocator/") for k in early), early
    assert beside.to_dict() == serial.to_dict()
    assert format_text(beside) == format_text(serial)


@pytest.mark.skipif(not native_sim.use_native(), reason="the draws run on threads")
def test_the_half_batch_is_predicted_beside_the_rest_of_the_advice(monkeypatch):
    """The recorded batch fits the GPU: the smaller batch's remedy is the half batch,
    whose prediction starts on a thread as soon as the judgement is made, beside the
    search and before the edited streams' pool (threads too: nothing forks while it
    runs); the advice is the serial one."""
    from vramscope.viewer.model.remedies import batch_scale

    order: list[str] = []
    threads_of_predict: list[bool] = []
    real_predict = batch_scale.predict

    class Threads(parallel._ThreadPool):
        def __init__(self, fn, items, *rest):
            order.append("pool " + ",".join(sorted({str(k).split("/")[0] for k in items})))
            super().__init__(fn, items, *rest)

    def predict(case, judgement, scale, *args, **kwargs):
        order.append("predict")
        on_thread = threading.current_thread() is not threading.main_thread()
        threads_of_predict.append((scale, on_thread))
        return real_predict(case, judgement, scale, *args, **kwargs)

    def no_fork(*args, **kwargs):
        raise AssertionError("advise forked a pool with the compiled model")

    monkeypatch.setattr(parallel, "_ThreadPool", Threads)
    monkeypatch.setattr(parallel, "_start", no_fork)
    monkeypatch.setattr(batch_scale, "predict", predict)
    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    path = DATA / "truth" / "gpt2_leak.pickle.xz"
    beside = advise(prepare(load_snapshot(path)))
    assert beside.largest_scale_that_fits is not None and beside.largest_scale_that_fits > 1
    assert any(r.remedy == "smaller_batch" and r.batch_scale == 0.5 for r in beside.remedies)
    # The half batch's on a thread; the safe answer's (at the search's point) here.
    assert [t for f, t in threads_of_predict if f == Fraction(1, 2)] == [True]
    assert not any(t for f, t in threads_of_predict if f != Fraction(1, 2))
    edited = next(i for i, o in enumerate(order) if o.startswith("pool ") and "free_kept" in o)
    assert order.index("predict") < edited, order
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    order.clear()
    threads_of_predict.clear()
    serial = advise(prepare(load_snapshot(path)))
    assert threads_of_predict and not any(t for _, t in threads_of_predict)
    assert beside.to_dict() == serial.to_dict()
    assert format_text(beside) == format_text(serial)


@pytest.mark.skipif(not native_sim.use_native(), reason="the draws run on threads")
def test_a_run_over_the_limit_predicts_nothing_ahead_of_the_search(monkeypatch):
    """The recorded batch does not fit the limit: the smaller batch's remedy is the
    search's answer, so nothing is predicted ahead of it (every prediction is made on
    this thread)."""
    from vramscope.viewer.model.remedies import batch_scale

    where: list[bool] = []
    real_predict = batch_scale.predict

    def predict(*args, **kwargs):
        where.append(threading.current_thread() is threading.main_thread())
        return real_predict(*args, **kwargs)

    monkeypatch.setattr(batch_scale, "predict", predict)
    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    path = DATA / "truth" / "gpt2_leak.pickle.xz"
    advice = advise(prepare(load_snapshot(path)), None, 600 << 20)
    assert advice.largest_scale_that_fits is not None
    assert where and all(where), where


@pytest.mark.skipif(not native_sim.use_native(), reason="threads run the compiled model")
def test_the_baseline_under_a_given_limit_runs_beside_the_judgement(monkeypatch):
    from vramscope.viewer.model.remedies.advise import LIMITED_RUN

    rounds: list[list] = []

    class Threads(parallel._ThreadPool):
        def __init__(self, fn, items, *rest):
            rounds.append(list(items))
            super().__init__(fn, items, *rest)

    monkeypatch.setattr(parallel, "_ThreadPool", Threads)
    path = DATA / "truth" / "gpt2_leak.pickle.xz"
    for limit in (600 << 20, 2 << 30):  # one the recorded run does not fit, one it does
        rounds.clear()
        monkeypatch.setenv(parallel.JOBS_ENV, "2")
        beside = advise(prepare(load_snapshot(path)), None, limit)
        monkeypatch.setenv(parallel.JOBS_ENV, "1")
        serial = advise(prepare(load_snapshot(path)), None, limit)
        assert LIMITED_RUN in rounds[0] and RECORDED_RUN in rounds[0]
        assert beside.to_dict() == serial.to_dict()
        assert format_text(beside) == format_text(serial)


@pytest.mark.skipif(not native_sim.use_native(), reason="the prediction runs on a thread")
def test_a_prediction_started_ahead_and_never_asked_for_is_stopped(monkeypatch):
    """The context's prediction ahead, when no remedy asks for it (the search found a
    smaller batch), ends with the context: no thread of it is left running."""
    from vramscope.viewer.model.core.progress import Progress
    from vramscope.viewer.model.remedies.catalogue import gather

    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    case = prepare(load_snapshot(DATA / "truth" / "gpt2_leak.pickle.xz"))
    before = set(threading.enumerate())
    ctx = gather(case, None, None, Progress())
    assert ctx.half_ahead is not None
    ctx.close()
    assert ctx.half_ahead is None
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []


def _specs_watched(monkeypatch, order: list[str], fail: str | None = None, on=None):
    """advise's catalogue with each spec's ``applies`` noted in ``order`` as it is made
    (``fail``: that spec's raises; ``on``: called with each spec's id first)."""
    import dataclasses

    from vramscope.viewer.model.remedies import advise as advise_module

    def watched(spec):
        def applies(ctx):
            order.append(f"applies {spec.id}")
            if on is not None:
                on(spec.id)
            if spec.id == fail:
                raise RuntimeError("a spec's test failed")
            return spec.applies(ctx)

        return dataclasses.replace(spec, applies=applies)

    monkeypatch.setattr(advise_module, "SPECS", tuple(map(watched, advise_module.SPECS)))


@pytest.mark.skipif(not native_sim.use_native(), reason="threads run the compiled model")
def test_an_edited_streams_runs_start_before_the_later_specs_tests(monkeypatch):
    """With cores to spare, checkpointing's three runs start on threads as soon as it is
    found to apply, before the tests of the specs after it (autocast's, ...); the advice
    is the serial one, to the byte."""
    order: list[str] = []

    class Threads(parallel._ThreadPool):
        def __init__(self, fn, items, *rest):
            order.append("pool " + ",".join(map(str, items)))
            super().__init__(fn, items, *rest)

    monkeypatch.setattr(parallel, "_ThreadPool", Threads)
    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    _specs_watched(monkeypatch, order)
    monkeypatch.setenv(parallel.JOBS_ENV, "4")
    path = DATA / "truth" / "gpt2_leak.pickle.xz"
    early = advise(prepare(load_snapshot(path)))
    runs = order.index("pool low,high,floor")
    assert (
        order.index("applies gradient_checkpointing") < runs < order.index("applies bf16_autocast")
    ), order
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    serial = advise(prepare(load_snapshot(path)))
    assert early.to_dict() == serial.to_dict()
    assert format_text(early) == format_text(serial)
    for a, b in zip(early.remedies, serial.remedies):
        assert a.remedy == b.remedy and np.array_equal(a.curve, b.curve)


@pytest.mark.skipif(not native_sim.use_native(), reason="threads run the compiled model")
def test_runs_started_early_stop_when_a_later_spec_fails(monkeypatch):
    """A spec's test that raises after checkpointing's runs started: the error reaches
    the caller and no thread of those runs is left running."""
    order: list[str] = []
    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    _specs_watched(monkeypatch, order, fail="bf16_autocast")
    monkeypatch.setenv(parallel.JOBS_ENV, "4")
    case = prepare(load_snapshot(DATA / "truth" / "gpt2_leak.pickle.xz"))
    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="a spec's test failed"):
        advise(case)
    assert "applies gradient_checkpointing" in order
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []


def test_the_runs_beside_the_judgement_take_two_rounds_not_every_core(monkeypatch):
    """Nine runs beside the judgement on a 16-core machine: five threads (two rounds),
    leaving the rest of the machine's memory bandwidth to the evidence; never more
    threads than CPUs; the user's own number of jobs wins."""
    from vramscope.viewer.model.remedies import advise as advise_module

    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    monkeypatch.setattr(parallel, "available_cpus", lambda: 16)
    jobs = advise_module._jobs_beside_judgement(9)
    assert jobs is not None and parallel.workers_beside(9, 10**6, jobs, threads=True) == 5
    assert advise_module._jobs_beside_judgement(40) == 16
    monkeypatch.setattr(parallel, "available_cpus", lambda: 2)
    assert parallel.workers_beside(9, 10**6, advise_module._jobs_beside_judgement(9), True) == 1
    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    assert advise_module._jobs_beside_judgement(9) is None


@pytest.mark.skipif(not native_sim.use_native(), reason="threads run the compiled model")
def test_a_cancel_stops_the_runs_started_early(monkeypatch):
    """Diagnose cancelled while checkpointing's runs, started early, still run: advise
    stops with LoadCancelled and leaves no thread of them behind."""
    from vramscope.viewer.model.core.errors import LoadCancelled
    from vramscope.viewer.model.core.progress import Progress

    progress = Progress()
    order: list[str] = []

    def cancel_after_checkpointing(spec_id: str) -> None:
        if spec_id == "bf16_autocast":
            progress.cancel()

    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    _specs_watched(monkeypatch, order, on=cancel_after_checkpointing)
    monkeypatch.setenv(parallel.JOBS_ENV, "4")
    case = prepare(load_snapshot(DATA / "truth" / "gpt2_leak.pickle.xz"))
    before = set(threading.enumerate())
    with pytest.raises(LoadCancelled):
        advise(case, progress=progress)
    assert "applies gradient_checkpointing" in order
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []
