"""The recorder's behaviour, on a fake GPU (see capture_fakes) and on CPU-only torch."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading

import pytest
from capture_fakes import FakeBackend, FakeOutOfMemoryError
from capture_helpers import (
    child_env,
    figures_from_snapshot,
    figures_from_stats,
    run_python,
    sidecar,
    snapshots,
    warning_lines,
)

import vramscope.capture as capture
from vramscope.capture import Recorder, backend, record
from vramscope.capture.backend import HistorySettings

HAS_SIGUSR1 = hasattr(signal, "SIGUSR1")


# -- no CUDA ------------------------------------------------------------------


def test_import_is_cheap_and_does_not_import_torch(tmp_path):
    code = "import sys, vramscope.capture; print('torch' in sys.modules)"
    r = run_python(["-c", code], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_cpu_only_torch_one_warning_and_code_runs(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without CUDA")
    ran = []
    with record(out=tmp_path / "s") as rec:
        ran.append(1)
        assert not rec.active
    with record(out=tmp_path / "s"):
        ran.append(2)

    @record(out=tmp_path / "s")
    def f():
        ran.append(3)
        return "result"

    assert f() == "result"
    capture.start(out=tmp_path / "s")
    assert capture.dump() is None
    capture.stop()
    assert ran == [1, 2, 3]
    warnings = warning_lines(capsys.readouterr().err)
    assert len(warnings) == 1, warnings
    assert "CUDA" in warnings[0]
    assert not (tmp_path / "s").exists()


def test_without_torch_one_warning_mentioning_torch_and_cuda(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None\n"  # makes `import torch` fail
        "from vramscope.capture import record, dump\n"
        "with record():\n    x = 41\n"
        "with record():\n    x += 1\n"
        "assert dump() is None\n"
        "print(x)\n"
    )
    r = run_python(["-c", code], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "42"
    warnings = warning_lines(r.stderr)
    assert len(warnings) == 1, r.stderr
    assert "torch" in warnings[0] and "CUDA" in warnings[0]


def test_misuse_raises():
    with pytest.raises(ValueError):
        record(stacks="cpp")
    with pytest.raises(ValueError):
        record(context="everything")
    with pytest.raises(ValueError):
        record(max_entries=0)
    with pytest.raises(ValueError):
        record(max_entries=True)
    with pytest.raises(TypeError):
        record(out=3)
    with pytest.raises(ValueError):
        record(dump_signal="SIGNOPE")
    with pytest.raises(ValueError):
        capture.dump(path="x.json")


def test_starting_twice_is_misuse(fake, tmp_path):
    rec = record(out=tmp_path).start()
    with pytest.raises(RuntimeError):
        rec.start()
    rec.stop()


# -- recording and restoring on the fake GPU ----------------------------------------


def test_record_block_records_then_dumps_and_restores(fake, tmp_path, capsys):
    out = tmp_path / "snaps"
    with record(out=out, max_entries=1234, stacks="all", context="alloc") as rec:
        assert fake.history == HistorySettings("alloc", "all", 1234)
        a = fake.alloc(20 << 20, requested=(20 << 20) - 100)
        fake.alloc(2 << 20)
        fake.free(a)
        assert rec.active
    assert fake.history is None  # off again, as before
    [path] = snapshots(out)
    assert rec.paths == [path]
    assert "_exit_" in path.name and "_cuda0_" in path.name
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert [e["action"] for e in snap["device_traces"][0]] == ["alloc", "alloc", "free_completed"]
    side = sidecar(path)
    assert side["reason"] == "exit" and side["name"] == path.stem
    assert side["recording"] == {
        "enabled": True,
        "max_entries": 1234,
        "stacks": "all",
        "context": "alloc",
    }
    assert side["gpu"] == "Fake GPU 80GB" and side["torch"] == "2.99.0+fake"
    # What sizes ATen's reductions' staging buffers (the viewer's batch what-if reads it).
    assert (side["gpu_multiprocessors"], side["gpu_threads_per_multiprocessor"]) == (100, 2048)
    assert side["n_trace"] == 3 and side["n_segments"] == 2
    assert side["bytes"] == path.stat().st_size
    assert figures_from_snapshot(path, 0) == figures_from_stats(side["memory_stats"])
    assert "exception" not in side
    err = capsys.readouterr().err
    assert f"vramscope: wrote {path} (exit)" in err
    assert not warning_lines(err)


def test_nesting_restores_outer_settings_then_off(fake, tmp_path):
    with record(out=tmp_path / "outer", max_entries=10):
        with record(out=tmp_path / "inner", max_entries=5, stacks="all"):
            assert fake.history == HistorySettings("all", "all", 5)
        assert fake.history == HistorySettings("all", "python", 10)
    assert fake.history is None
    assert len(snapshots(tmp_path / "outer")) == 1 and len(snapshots(tmp_path / "inner")) == 1


def test_history_enabled_by_someone_else_stays_on(tmp_path):
    fb = FakeBackend(history_enabled=True)
    backend.set_backend(fb)
    with record(out=tmp_path):
        assert fb.history == HistorySettings("all", "python", 100_000)
    assert fb.history is not None  # not switched off under the user's feet


def test_history_enabled_by_someone_else_before_cuda_init_stays_on(tmp_path):
    fb = FakeBackend(initialized=False, history_enabled=True)
    backend.set_backend(fb)
    with record(out=tmp_path):
        fb.alloc(1 << 20)
        assert fb.history == HistorySettings("all", "python", 100_000)
    assert fb.history is not None


def test_recording_waits_for_cuda_init(tmp_path):
    # Starting must not start CUDA (CUDA_VISIBLE_DEVICES / alloc conf set later
    # by the script must still apply): settings go in when torch inits CUDA.
    fb = FakeBackend(initialized=False)
    backend.set_backend(fb)
    with record(out=tmp_path, max_entries=77):
        assert fb.history_calls == [] and len(fb.deferred) == 1
        fb.alloc(1 << 20)  # first CUDA use initialises it
        assert fb.history == HistorySettings("all", "python", 77)
        assert fb.observers, "OOM observer attached at CUDA init"
    assert fb.history is None
    assert len(snapshots(tmp_path)) == 1


def test_failing_deferred_start_never_breaks_cuda_init(tmp_path, capsys):
    # An exception in torch's queued calls would surface as DeferredCudaCallError
    # at the user's first CUDA call: the deferred start must swallow it.
    fb = FakeBackend(initialized=False)
    backend.set_backend(fb)

    def broken(settings):
        raise RuntimeError("allocator says no")

    fb.record_history = broken
    with record(out=tmp_path, dump_on_exit=False):
        fb.alloc(1 << 20)  # initialises CUDA, runs the deferred start
    assert "allocator says no" in capsys.readouterr().err


def test_block_without_cuda_use_writes_nothing_and_leaves_cuda_alone(tmp_path, capsys):
    fb = FakeBackend(initialized=False)
    backend.set_backend(fb)
    with record(out=tmp_path):
        pass
    fb.init_cuda()  # the program uses CUDA later: the stale deferred call must do nothing
    assert fb.history_calls == [] and fb.history is None
    assert snapshots(tmp_path) == []
    err = capsys.readouterr().err
    assert "has not used CUDA" in err and not warning_lines(err)


def test_cuda_build_without_gpu_warns_once(tmp_path, capsys):
    fb = FakeBackend(initialized=False, available=False)
    backend.set_backend(fb)
    for _ in range(3):
        with record(out=tmp_path):
            pass
    warnings = warning_lines(capsys.readouterr().err)
    assert len(warnings) == 1 and "CUDA is not available" in warnings[0]


def test_exception_still_dumps_and_propagates(fake, tmp_path):
    with pytest.raises(KeyError, match="boom"):
        with record(out=tmp_path):
            fake.alloc(1 << 20)
            raise KeyError("boom")
    [path] = snapshots(tmp_path, "exit")
    assert sidecar(path)["exception"] == "KeyError: 'boom'"
    assert fake.history is None


# -- OOM ------------------------------------------------------------------------


def test_oom_dumps_at_that_moment_and_propagates_unchanged(fake, tmp_path):
    fake.limit = 50 << 20
    seen = {}
    with pytest.raises(FakeOutOfMemoryError) as info:
        with record(out=tmp_path) as rec:
            fake.alloc(40 << 20)
            try:
                fake.alloc(20 << 20)
            except FakeOutOfMemoryError as exc:
                # Written before the exception reached user code.
                seen["during"] = snapshots(tmp_path, "oom")
                raise exc
    assert str(info.value).startswith("CUDA out of memory. Tried to allocate 20971520 bytes")
    [oom_path] = seen["during"]
    assert rec.last_oom_path == oom_path
    side = sidecar(oom_path)
    assert side["reason"] == "oom"
    assert (side["oom_request"], side["oom_device_alloc"], side["oom_device_free"]) == (
        20 << 20,
        50 << 20,
        1 << 30,
    )
    assert side["oom_trace_size"] == 20 << 20
    assert side["oom_message"] == str(info.value)  # added when the exception left the block
    with open(oom_path, "rb") as f:
        snap = pickle.load(f)
    assert snap["device_traces"][0][-1]["action"] == "oom"
    assert figures_from_snapshot(oom_path, 0) == figures_from_stats(side["memory_stats"])
    # And the exit snapshot too, with the exception noted.
    [exit_path] = snapshots(tmp_path, "exit")
    assert sidecar(exit_path)["exception"].startswith("FakeOutOfMemoryError: CUDA out of memory")


def test_oom_caught_by_user_keeps_program_going(fake, tmp_path):
    fake.limit = 10 << 20
    with record(out=tmp_path, max_oom_dumps=2):
        for _ in range(3):  # e.g. a batch-size search
            with pytest.raises(FakeOutOfMemoryError):
                fake.alloc(20 << 20)
        fake.alloc(1 << 20)
    assert len(snapshots(tmp_path, "oom")) == 2  # capped
    assert all("oom_message" not in sidecar(p) for p in snapshots(tmp_path, "oom"))


def test_broken_oom_dump_never_replaces_the_oom(fake, tmp_path, capsys):
    fake.limit = 1
    fake.fail_snapshot = True
    with record(out=tmp_path, dump_on_exit=False):
        with pytest.raises(FakeOutOfMemoryError):
            fake.alloc(2)
    err = capsys.readouterr().err
    assert "fake snapshot failure" in err
    assert snapshots(tmp_path) == []


def test_oom_outside_any_recorder_is_ignored(fake, tmp_path):
    with record(out=tmp_path, dump_on_exit=False):
        pass
    fake.limit = 1
    with pytest.raises(FakeOutOfMemoryError):
        fake.alloc(2)
    assert snapshots(tmp_path) == []


def test_oom_off(fake, tmp_path):
    fake.limit = 1
    with record(out=tmp_path, oom=False, dump_on_exit=False):
        with pytest.raises(FakeOutOfMemoryError):
            fake.alloc(2)
    assert snapshots(tmp_path) == []


# -- decorator, manual control -----------------------------------------------------


def test_decorator_records_each_call(fake, tmp_path):
    @record(out=tmp_path, max_entries=9)
    def step(n):
        assert fake.history == HistorySettings("all", "python", 9)
        fake.alloc(n)
        return n * 2

    assert step(1 << 20) == 2 << 20
    assert step.__name__ == "step"
    assert fake.history is None
    assert step(1 << 20) == 2 << 20
    assert len(snapshots(tmp_path, "exit")) == 2


def test_bare_decorator(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    @record
    def step():
        fake.alloc(1 << 20)

    step()
    assert len(snapshots(tmp_path / "snapshots", "exit")) == 1


def test_async_function_recorded_while_it_runs(fake, tmp_path):
    import asyncio

    @record(out=tmp_path)
    async def step():
        await asyncio.sleep(0)
        assert fake.history is not None
        fake.alloc(1 << 20)

    asyncio.run(step())
    assert len(snapshots(tmp_path, "exit")) == 1


def test_start_dump_stop(fake, tmp_path):
    rec = capture.start(out=tmp_path / "auto", max_entries=50)
    assert fake.history == HistorySettings("all", "python", 50)
    fake.alloc(1 << 20)
    auto = capture.dump()
    assert auto is not None and auto.parent == tmp_path / "auto" and "_manual_" in auto.name
    custom = capture.dump(tmp_path / "mine" / "x.pickle")
    assert custom == tmp_path / "mine" / "x.pickle"
    assert sidecar(custom)["reason"] == "manual"
    assert sidecar(custom)["recording"]["max_entries"] == 50
    capture.stop()
    assert fake.history is None and not rec.active
    capture.stop()  # nothing left to stop: a no-op
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["x.json", "x.pickle"]
    assert len(snapshots(tmp_path / "auto")) == 1  # stop() does not dump


def test_dump_without_recorder_writes_current_state(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake.alloc(1 << 20)
    path = capture.dump()
    assert path is not None and path.parent == tmp_path / "snapshots"
    side = sidecar(path)
    assert side["recording"] == {"enabled": False}
    assert side["memory_stats"]["allocated_bytes.all.current"] == 1 << 20


def test_unwritable_out_dir_is_a_warning(fake, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with record(out=blocker):
        fake.alloc(1 << 20)
    err = capsys.readouterr().err
    assert "could not write the exit snapshot" in err
    assert blocker.read_text() == "not a directory"


# -- distributed ----------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_names_its_files(fake, tmp_path, monkeypatch, rank):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with record(out=tmp_path):
        fake.alloc(1 << 20)
    [path] = snapshots(tmp_path)
    assert f"_rank{rank}_" in path.name
    side = sidecar(path)
    assert (side["rank"], side["local_rank"], side["world_size"]) == (rank, rank, 2)


def test_two_ranks_in_one_directory_never_collide(tmp_path):
    # Two processes, as two torchrun ranks on one host, dumping at the same moment.
    script = tmp_path / "rank.py"
    script.write_text(
        "import sys\n"
        "from capture_fakes import FakeBackend\n"
        "from vramscope.capture import backend, record\n"
        "fb = FakeBackend(); backend.set_backend(fb)\n"
        "with record(out=sys.argv[1]):\n"
        "    fb.alloc(1 << 20)\n"
    )
    procs = [
        __import__("subprocess").Popen(
            [sys.executable, str(script), str(tmp_path / "out")],
            env=child_env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2"}),
        )
        for r in (0, 1)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    paths = snapshots(tmp_path / "out")
    assert len(paths) == 2
    assert sorted(sidecar(p)["rank"] for p in paths) == [0, 1]
    assert len({sidecar(p)["pid"] for p in paths}) == 2


# -- on-demand dumps --------------------------------------------------------------


@pytest.mark.skipif(not HAS_SIGUSR1, reason="no SIGUSR1 on this platform")
def test_sigusr1_dumps_and_handler_is_restored(fake, tmp_path):
    calls = []
    previous = signal.signal(signal.SIGUSR1, lambda s, f: calls.append(s))
    try:
        with record(out=tmp_path):
            fake.alloc(1 << 20)
            os.kill(os.getpid(), signal.SIGUSR1)
            # Handlers run in the main thread at the next bytecode: now.
            assert len(snapshots(tmp_path, "signal")) == 1
            assert calls == [signal.SIGUSR1]  # the previous handler still runs
            fake.alloc(1 << 20)  # and the program goes on
        assert sidecar(snapshots(tmp_path, "signal")[0])["reason"] == "signal"
        os.kill(os.getpid(), signal.SIGUSR1)
        assert len(snapshots(tmp_path, "signal")) == 1 and len(calls) == 2
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.skipif(not HAS_SIGUSR1, reason="no SIGUSR1 on this platform")
def test_signal_during_a_dump_is_skipped_not_nested(fake, tmp_path, capsys):
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        with record(out=tmp_path, dump_on_exit=False) as rec:
            real_snapshot = fake.snapshot

            def snapshot_then_signal():
                os.kill(os.getpid(), signal.SIGUSR1)  # arrives mid-dump
                return real_snapshot()

            fake.snapshot = snapshot_then_signal
            rec.dump()
            fake.snapshot = real_snapshot
        assert len(snapshots(tmp_path, "manual")) == 1
        assert snapshots(tmp_path, "signal") == []
        assert "being written already" in capsys.readouterr().err
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.skipif(not HAS_SIGUSR1, reason="no SIGUSR1 on this platform")
def test_recorder_started_off_main_thread_has_no_signal_but_records(fake, tmp_path):
    before = signal.getsignal(signal.SIGUSR1)
    errors = []

    def work():
        try:
            with record(out=tmp_path) as rec:
                assert not rec._signal_held
                fake.alloc(1 << 20)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert errors == []
    assert signal.getsignal(signal.SIGUSR1) is before
    assert len(snapshots(tmp_path, "exit")) == 1


def test_no_signal_option(fake, tmp_path):
    if not HAS_SIGUSR1:
        pytest.skip("no SIGUSR1 on this platform")
    before = signal.getsignal(signal.SIGUSR1)
    with record(out=tmp_path, dump_signal=None):
        assert signal.getsignal(signal.SIGUSR1) is before


def test_recorder_repr_and_active_recorder(fake, tmp_path):
    assert capture.active_recorder() is None
    with record(out=tmp_path) as rec:
        assert capture.active_recorder() is rec
        assert "[active]" in repr(rec)
    assert capture.active_recorder() is None
    assert isinstance(rec, Recorder)
