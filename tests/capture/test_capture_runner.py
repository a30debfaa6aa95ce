"""``python -m vramscope.capture script.py`` behaves like ``python script.py``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from capture_helpers import (
    FAKERUN,
    child_env,
    run_capture,
    run_fake_capture,
    sidecar,
    snapshots,
    warning_lines,
)

from vramscope.capture import runner

HAS_SIGUSR1 = hasattr(signal, "SIGUSR1")

# Reports how the script sees the world, then exits with the code it is given.
PROBE = textwrap.dedent(
    """
    import json, os, sys
    report = {
        "argv": sys.argv,
        "name": __name__,
        "path0": sys.path[0],
        "file": __file__,
        "main_is_me": sys.modules["__main__"].__dict__ is globals(),
    }
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump(report, f)
    code = os.environ.get("PROBE_EXIT")
    if code is not None:
        sys.exit(int(code))
    """
)


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "probe.py"
    script.write_text(PROBE)
    return script


def _report(tmp_path) -> dict:
    return json.loads((tmp_path / "report.json").read_text())


def test_script_sees_its_own_argv_name_and_path(tmp_path, probe):
    env = child_env({"PROBE_OUT": str(tmp_path / "report.json")})
    r = run_capture(
        ["--out", str(tmp_path / "o"), str(probe), "a", "--out", "b", "-m", "x"],
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    rep = _report(tmp_path)
    assert rep["argv"] == [str(probe), "a", "--out", "b", "-m", "x"]
    assert rep["name"] == "__main__" and rep["main_is_me"]
    assert rep["path0"] == str(probe.parent)
    assert rep["file"] == str(probe)


def test_relative_script_path_and_double_dash(tmp_path, probe):
    env = child_env({"PROBE_OUT": str(tmp_path / "report.json")})
    r = run_capture(
        ["--max-entries", "10", "--", "scripts/probe.py", "--stacks"], cwd=tmp_path, env=env
    )
    assert r.returncode == 0, r.stderr
    assert _report(tmp_path)["argv"] == ["scripts/probe.py", "--stacks"]


@pytest.mark.parametrize("code", [0, 3, 255])
def test_exit_code_is_the_scripts(tmp_path, probe, code):
    env = child_env({"PROBE_OUT": str(tmp_path / "report.json"), "PROBE_EXIT": str(code)})
    r = run_capture([str(probe)], cwd=tmp_path, env=env)
    assert r.returncode == code, r.stderr


def test_uncaught_exception_exits_1_with_a_clean_traceback(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("def f():\n    raise ValueError('bad value')\n\nf()\n")
    r = run_capture([str(script)], cwd=tmp_path)
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr
    assert "ValueError: bad value" in r.stderr
    assert f'File "{script}", line 4, in <module>' in r.stderr
    assert "runpy" not in r.stderr and "runner.py" not in r.stderr


def test_sys_exit_with_message(tmp_path):
    script = tmp_path / "msg.py"
    script.write_text("import sys\nsys.exit('giving up')\n")
    r = run_capture([str(script)], cwd=tmp_path)
    assert r.returncode == 1
    assert "giving up" in r.stderr


def test_dash_m_module(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tool.py").write_text(PROBE)
    env = child_env({"PROBE_OUT": str(tmp_path / "report.json"), "PROBE_EXIT": "4"})
    r = run_capture(["--stacks", "python", "-m", "mypkg.tool", "x", "-y"], cwd=tmp_path, env=env)
    assert r.returncode == 4, r.stderr
    rep = _report(tmp_path)
    assert rep["argv"] == [str(pkg / "tool.py"), "x", "-y"]
    assert rep["name"] == "__main__"
    assert rep["path0"] == str(tmp_path)
    # -mmodule, as python accepts it
    r = run_capture(["-mmypkg.tool"], cwd=tmp_path, env=env)
    assert r.returncode == 4, r.stderr


def test_package_main_module(tmp_path):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint('app main', sys.argv[1:])\n")
    r = run_capture(["-m", "app", "1"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "app main ['1']" in r.stdout


def test_missing_targets_and_usage_errors(tmp_path):
    r = run_capture([str(tmp_path / "nope.py")], cwd=tmp_path)
    assert r.returncode == 2 and "can't open file" in r.stderr
    r = run_capture(["-m", "no_such_module_xyz"], cwd=tmp_path)
    assert r.returncode == 1 and "No module named no_such_module_xyz" in r.stderr
    r = run_capture(["--out", "o"], cwd=tmp_path)
    assert r.returncode == 2 and "required" in r.stderr
    r = run_capture(["--stacks", "cpp", "x.py"], cwd=tmp_path)
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = run_capture(["--max-entries", "0", "x.py"], cwd=tmp_path)
    assert r.returncode == 2
    r = run_capture(["--help"], cwd=tmp_path)
    assert r.returncode == 0 and "script.py" in r.stdout and "--max-entries" in r.stdout


def test_no_cuda_one_warning_and_script_runs(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without CUDA")
    script = tmp_path / "cpu_train.py"
    script.write_text(
        "import sys, torch\n"
        "from vramscope.capture import record\n"
        "with record():\n"  # nested use inside a recorded script: still one warning
        "    x = torch.ones(3).sum().item()\n"
        "print('result', x)\n"
        "sys.exit(5)\n"
    )
    r = run_capture(["--out", str(tmp_path / "o"), str(script)], cwd=tmp_path)
    assert r.returncode == 5, r.stderr
    assert "result 3.0" in r.stdout
    warnings = warning_lines(r.stderr)
    assert len(warnings) == 1, r.stderr
    assert "CUDA" in warnings[0]
    assert not (tmp_path / "o").exists()


def test_real_training_workload_runs_under_runner_without_cuda(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without CUDA")
    workload = Path(__file__).resolve().parent.parent / "workloads" / "train_small.py"
    r = run_capture(["--out", str(tmp_path / "o"), str(workload), "--steps", "2"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "step 1" in r.stdout
    assert len(warning_lines(r.stderr)) == 1


def test_main_in_process_as_vramscope_record_calls_it(tmp_path, probe, monkeypatch, capsys):
    monkeypatch.setenv("PROBE_OUT", str(tmp_path / "report.json"))
    monkeypatch.setenv("PROBE_EXIT", "9")
    argv_before, path_before = sys.argv[:], sys.path[:]
    code = runner.main(["--out", str(tmp_path / "o"), str(probe), "z"], prog="vramscope record")
    assert code == 9
    assert _report(tmp_path)["argv"] == [str(probe), "z"]
    assert sys.argv == argv_before and sys.path == path_before
    assert runner.main(["--bogus"], prog="vramscope record") == 2
    assert "vramscope record" in capsys.readouterr().err


def test_split_argv():
    assert runner.split_argv(["--out", "d", "s.py", "--out", "x"]) == (
        ["--out", "d"],
        ["s.py", "--out", "x"],
    )
    assert runner.split_argv(["--out=d", "-m", "m", "a"]) == (["--out=d"], ["-m", "m", "a"])
    assert runner.split_argv(["--no-signal", "--", "-weird.py"]) == (["--no-signal"], ["-weird.py"])
    assert runner.split_argv(["--help"]) == (["--help"], [])


# -- on the fake GPU: the wiring of OOM and signal dumps through the runner ---------


OOM_SCRIPT = textwrap.dedent(
    """
    from vramscope.capture.backend import get_backend
    gpu = get_backend()          # the fake CUDA of capture_fakerun.py
    gpu.limit = 64 << 20
    kept = [gpu.alloc(20 << 20) for _ in range(3)]
    print("allocated", len(kept), flush=True)
    gpu.alloc(20 << 20)          # over the limit: OOM
    print("not reached")
    """
)


def test_runner_oom_snapshot_and_exception_unchanged(tmp_path):
    script = tmp_path / "oom.py"
    script.write_text(OOM_SCRIPT)
    out = tmp_path / "o"
    r = run_fake_capture(["--out", str(out), str(script)], cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "allocated 3" in r.stdout and "not reached" not in r.stdout
    assert "FakeOutOfMemoryError: CUDA out of memory. Tried to allocate 20971520 bytes" in r.stderr
    assert "runner.py" not in r.stderr
    [oom] = snapshots(out, "oom")
    side = sidecar(oom)
    assert side["oom_request"] == 20 << 20 and side["oom_device_alloc"] == 64 << 20
    assert side["oom_message"].startswith("CUDA out of memory")
    assert side["argv"] == [str(script)]
    [exit_snap] = snapshots(out, "exit")
    assert sidecar(exit_snap)["exception"].startswith("FakeOutOfMemoryError")
    # The dump messages come before the traceback, which is the last thing printed.
    assert r.stderr.index(f"wrote {oom}") < r.stderr.index("Traceback")
    assert "recording CUDA memory history into" in r.stderr


SIGNAL_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from vramscope.capture.backend import get_backend
    gpu = get_backend()
    ready, stop = sys.argv[1], sys.argv[2]
    steps = 0
    gpu.alloc(1 << 20)
    open(ready, "w").close()
    deadline = time.time() + 30
    while not os.path.exists(stop) and time.time() < deadline:
        steps += 1
        time.sleep(0.005)
    print("steps", steps)
    sys.exit(0 if os.path.exists(stop) else 7)
    """
)


@pytest.mark.skipif(not HAS_SIGUSR1, reason="no SIGUSR1 on this platform")
def test_runner_sigusr1_dumps_without_stopping(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(SIGNAL_SCRIPT)
    ready, stop, out = tmp_path / "ready", tmp_path / "stop", tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, str(FAKERUN), "--out", str(out), str(script), str(ready), str(stop)],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: ready.exists() or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        for expected in (1, 2):
            proc.send_signal(signal.SIGUSR1)
            # Done when the sidecar (written last) is there; a signal arriving
            # while a dump is still being written is skipped by design.
            _wait_for(lambda n=expected: len(list(out.glob("*_signal_*.json"))) >= n)
            time.sleep(0.2)
        stop.touch()
        _stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert len(snapshots(out, "signal")) == 2
    assert all(sidecar(p)["reason"] == "signal" for p in snapshots(out, "signal"))
    assert len(snapshots(out, "exit")) == 1
    assert f"kill -USR1 {proc.pid}" in stderr


def _wait_for(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def test_runner_respects_options(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "from vramscope.capture.backend import get_backend\n"
        "from vramscope.capture import active_recorder\n"
        "gpu = get_backend(); gpu.alloc(1 << 20)\n"
        "rec = active_recorder()\n"
        "print(rec.max_entries, rec.stacks, rec.context, gpu.history)\n"
    )
    r = run_fake_capture(
        [
            "--max-entries",
            "12_000",
            "--stacks",
            "all",
            "--context",
            "alloc",
            "--no-exit-dump",
            "--no-signal",
            "-o",
            str(tmp_path / "o"),
            str(script),
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:3] == ["12000", "all", "alloc"]
    assert "HistorySettings(context='alloc', stacks='all', max_entries=12000)" in r.stdout
    assert snapshots(tmp_path / "o") == []
    assert "kill -" not in r.stderr


def test_two_ranks_by_env_through_runner(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "from vramscope.capture.backend import get_backend\nget_backend().alloc(1 << 20)\n"
    )
    out = tmp_path / "o"
    for rank in (0, 1):
        env = child_env({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
        r = run_fake_capture(["--out", str(out), str(script)], cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
    names = [p.name for p in snapshots(out)]
    assert len(names) == 2
    assert any("_rank0_" in n for n in names) and any("_rank1_" in n for n in names)
