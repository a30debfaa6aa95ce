"""``vramscope attach``: exit codes and one-line messages, against real agents."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from capture_helpers import child_env

from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.live import nvml, targets

MiB = 1 << 20


def _attach(runtime_dir, *args, timeout=60):
    env = child_env({"VRAMSCOPE_RUNTIME_DIR": str(runtime_dir)})
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer.cli", "attach", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def test_list_with_nothing_attachable_exits_0(runtime_dir):
    r = _attach(runtime_dir, "--list")
    assert r.returncode == 0, r.stderr
    assert "--live" in r.stdout  # the opt-in is always spelled out
    r = _attach(runtime_dir, "--list", "--json")
    assert r.returncode == 0
    # On a GPU machine NVML also lists processes without an agent (this test's own
    # process, once CUDA is up): none of them is attachable.
    procs = json.loads(r.stdout)["processes"]
    assert not [p for p in procs if p["attachable"]]
    if not procs:
        assert "no attachable processes" in _attach(runtime_dir, "--list").stdout


def test_list_shows_agents(start_target, runtime_dir):
    t = start_target()
    r = _attach(runtime_dir, "--list", "--json")
    procs = [p for p in json.loads(r.stdout)["processes"] if p["attachable"]]
    assert [p["pid"] for p in procs] == [t.pid]
    assert "fake_target.py" in procs[0]["command"]
    r = _attach(runtime_dir, "--list")
    assert f"{t.pid}  attachable" in r.stdout


def test_save_grabs_the_running_process(start_target, runtime_dir, tmp_path):
    t = start_target()
    t.cmd(f"alloc {7 * MiB}")
    out = tmp_path / "grab.pickle"
    r = _attach(runtime_dir, str(t.pid), "--save", str(out))
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "reserved 7.00 MiB" in r.stdout
    snap = load_snapshot(out)
    side = json.loads(out.with_suffix(".json").read_text())
    assert (
        side["memory_stats"]["reserved_bytes.all.current"]
        == 7 * MiB
        == t.stats()["reserved_bytes.all.current"]
    )
    assert len(snap.trace.action) == 1
    r = _attach(runtime_dir, t.endpoint, "--save", str(tmp_path / "by_endpoint.pickle"))
    assert r.returncode == 0, r.stderr
    r = _attach(runtime_dir, str(t.pid))
    assert r.returncode == 0 and "reserved 7.00 MiB" in r.stdout


def test_a_process_without_agent_exits_2_with_the_opt_in(runtime_dir):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        r = _attach(runtime_dir, str(sleeper.pid), "--save", "x.pickle")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no vramscope agent" in lines[0]
    assert "python -m vramscope.capture --live" in lines[0]
    if sys.version_info < (3, 14):
        assert "needs Python 3.14+" in lines[0]


@pytest.mark.parametrize(
    "target", ["4194303999", "unix:/nonexistent/agent-1.sock", "tcp:10.0.0.1:80"]
)
def test_unattachable_targets_exit_2_with_one_line(runtime_dir, target):
    r = _attach(runtime_dir, target, "--save", "x.pickle")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("vramscope: error:")


def test_save_from_a_process_without_cuda_exits_2_with_one_line(
    start_target, runtime_dir, tmp_path
):
    """Regression: this exited 1 while every other attach error exits 2."""
    t = start_target(env={"FAKE_UNINITIALISED": "1"})
    out = tmp_path / "x.pickle"
    r = _attach(runtime_dir, str(t.pid), "--save", str(out))
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: error:") and "CUDA" in lines[0]
    assert not out.exists()


def test_target_gone_between_list_and_save(start_target, runtime_dir, tmp_path):
    t = start_target()
    t.exit()
    r = _attach(runtime_dir, str(t.pid), "--save", str(tmp_path / "x.pickle"))
    assert r.returncode == 2 and f"no process {t.pid}" in r.stderr
    assert not (tmp_path / "x.pickle").exists()


def test_injection_failure_explains_the_opt_in(monkeypatch, capsys):
    """The Python >= 3.14 path, with sys.remote_exec refused (no ptrace permission)."""
    from vramscope.viewer.commands import attach

    def refuse(pid, path):
        raise PermissionError("ptrace")

    monkeypatch.setattr(attach, "can_inject", lambda: True)
    monkeypatch.setattr(sys, "remote_exec", refuse, raising=False)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        code = attach._no_agent(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    err = capsys.readouterr().err
    assert code == 2 and "could not be injected" in err and "ptrace" in err
    assert "--live" in err


def test_no_nvml_is_calm(monkeypatch):
    nvml._reset_for_tests()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    try:
        info = nvml.query()
        assert not info.available and "nvidia-ml-py" in info.error
        assert info.process_bytes(1) is None
        found, _ = targets.list_targets()
        assert found == [] or all(t.attachable for t in found)
    finally:
        nvml._reset_for_tests()


def test_nvml_without_driver_is_calm(monkeypatch):
    class NoDriver:
        @staticmethod
        def nvmlInit():
            raise RuntimeError("NVML Shared Library Not Found")

    nvml._reset_for_tests()
    monkeypatch.setitem(sys.modules, "pynvml", NoDriver)
    try:
        info = nvml.query()
        assert not info.available and "no NVIDIA driver or GPU" in info.error
    finally:
        nvml._reset_for_tests()


def test_nvml_processes_become_unattachable_targets(monkeypatch, runtime_dir):
    info = nvml.NvmlInfo(
        [
            nvml.GpuDevice(
                0, "Fake", 80 << 30, 10 << 30, 70 << 30, [nvml.GpuProcess(4242, 3 << 30, 0)]
            )
        ]
    )
    found, _ = targets.list_targets(info)
    assert len(found) == 1 and not found[0].attachable and found[0].gpu_bytes == 3 << 30
    assert "--live" in targets.opt_in_hint()
