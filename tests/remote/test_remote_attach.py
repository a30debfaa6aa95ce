"""``vramscope attach ssh://host ...``: real agents behind a real sshd on 127.0.0.1.

The agent runs in a fake training process (``tests/live/fake_target.py``: the real
agent over the fake allocator, the double only at the CUDA boundary), with a private
runtime dir that the remote discovery is told about through
``VRAMSCOPE_REMOTE_RUNTIME_DIR``; locally there is no agent at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from capture_helpers import child_env

from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.live import remote
from vramscope.viewer.model.live.session import LIVE, LiveSession

MiB = 1 << 20
RAN: list[str] = []


def _attach(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = child_env(
        {
            k: os.environ[k]
            for k in (
                "VRAMSCOPE_SSH_CONFIG",
                "VRAMSCOPE_REMOTE_RUNTIME_DIR",
                "VRAMSCOPE_RUNTIME_DIR",
            )
            if k in os.environ
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer.cli", "attach", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def _tunnel_dirs() -> set[str]:
    return {p.name for p in Path("/tmp").glob("vramscope-ssh-*")}


def test_list_shows_the_remote_agent(ssh_env, start_target):
    RAN.append("list")
    t = start_target()
    assert _attach("--list", "--json").stdout.count('"attachable": true') == 0  # not here
    r = _attach(ssh_env.host_url, "--list", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    procs = [p for p in out["processes"] if p["attachable"]]
    assert t.pid in [p["pid"] for p in procs]
    mine = next(p for p in procs if p["pid"] == t.pid)
    assert "fake_target.py" in mine["command"]
    assert out["host"] == f"{ssh_env.user}@127.0.0.1"
    r = _attach(ssh_env.host_url, "--list")
    assert f"{t.pid}  attachable" in r.stdout


def test_a_process_that_ended_is_not_listed(ssh_env, start_target):
    RAN.append("ended")
    t = start_target()
    t.proc.kill()  # no clean exit: its registry file stays behind
    t.proc.wait()
    listing = remote.list_remote(remote.parse_target(f"{ssh_env.host_url}/1")[0])
    assert t.pid not in [e["pid"] for e in listing.entries]
    assert listing.nvml.error  # no nvidia-smi here: one line, not a failure


def test_save_writes_the_agents_snapshot_here(ssh_env, start_target, tmp_path, runtime_dir):
    RAN.append("save")
    t = start_target()
    t.cmd(f"alloc {7 * MiB}")
    t.cmd(f"alloc {3 * MiB}")
    before = _tunnel_dirs()
    out = tmp_path / "grab.pickle"
    t0 = time.monotonic()
    r = _attach(ssh_env.host_url, str(t.pid), "--save", str(out))
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "reserved 10.00 MiB" in r.stdout
    # The same grab through the agent's socket directly, here: the same snapshot.
    direct = tmp_path / "direct.pickle"
    env_dir = os.environ["VRAMSCOPE_RUNTIME_DIR"]
    os.environ["VRAMSCOPE_RUNTIME_DIR"] = str(runtime_dir)
    try:
        r2 = _attach(str(t.pid), "--save", str(direct))
    finally:
        os.environ["VRAMSCOPE_RUNTIME_DIR"] = env_dir
    assert r2.returncode == 0, r2.stderr
    assert out.read_bytes() == direct.read_bytes()
    snap = load_snapshot(out)
    side = json.loads(out.with_suffix(".json").read_text())
    assert (
        side["memory_stats"]["reserved_bytes.all.current"]
        == 10 * MiB
        == t.stats()["reserved_bytes.all.current"]
    )
    assert len(snap.trace.action) == 2
    assert _tunnel_dirs() == before  # the forwarding and its socket dir are gone
    print(f"\nattach ssh:// --save: {elapsed:.2f} s")


def test_figures_then_ends_when_the_process_exits(ssh_env, start_target):
    RAN.append("session")
    t = start_target()
    t.cmd(f"alloc {5 * MiB}")
    target = f"{ssh_env.host_url}/{t.pid}"
    s = LiveSession(target)
    try:
        hello = s.connect()
        assert hello["pid"] == t.pid and s.state == LIVE
        assert "on " + f"{ssh_env.user}@127.0.0.1" in s.describe()
        upd = s.poll_stats()
        assert upd is not None and upd.figures.reserved_bytes == 5 * MiB
        assert "nvidia-smi" in (s.query_nvml().error or "")
        t.exit()
        for _ in range(50):
            try:
                s.poll_stats()
            except Exception:
                break
            time.sleep(0.1)
        assert s.state == "ended", s.status  # asked over ssh: the pid is gone there
    finally:
        s.close()
    assert target not in remote._tunnels


def test_no_process_no_agent_and_bad_host_are_one_line(ssh_env, start_target, monkeypatch):
    RAN.append("errors")
    r = _attach(ssh_env.host_url, "99999999")
    assert r.returncode == 2 and r.stderr.strip().endswith(
        f"no process 99999999 on {ssh_env.user}@127.0.0.1"
    )
    t = start_target("--no-serve")
    r = _attach(ssh_env.host_url, str(t.pid))
    assert r.returncode == 2 and "has no vramscope agent" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _attach(f"ssh://{ssh_env.user}@127.0.0.1:1", "--list")
    assert r.returncode == 2 and "Connection refused" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    monkeypatch.setenv("VRAMSCOPE_SSH_CONFIG", str(ssh_env.ssh_config_other))
    r = _attach(ssh_env.host_url, "--list")
    assert r.returncode == 2 and "password" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_listing_and_nvidia_smi_output_parse():
    text = "\n".join(
        [
            "@@vs-dir 1000 /run/user/1000/vramscope",
            "drwx------ 2 1000 1000 80 Jan 1 00:00 /run/user/1000/vramscope",
            "@@vs-entry /run/user/1000/vramscope/agent-42.json",
            json.dumps(
                {
                    "pid": 42,
                    "endpoint": "unix:/run/user/1000/vramscope/agent-42.sock",
                    "start_ticks": 7,
                }
            ),
            "@@vs-stat",
            "42 (py thon) S " + " ".join(["0"] * 18) + " 7 0",
            "@@vs-entry /run/user/1000/vramscope/agent-43.json",
            json.dumps({"pid": 43, "start_ticks": 7}),
            "@@vs-stat",
            "43 (python) S " + " ".join(["0"] * 18) + " 9 0",  # pid reused
            "@@vs-dir 1000 /tmp/vramscope-1000",
            "drwxrwxrwx 2 1000 1000 80 Jan 1 00:00 /tmp/vramscope-1000",  # open to others
            "@@vs-entry /tmp/vramscope-1000/agent-44.json",
            json.dumps({"pid": 44}),
            "@@vs-stat",
            "44 (python) S",
            "@@vs-gpus",
            "0, 00000000:17:00.0, NVIDIA H100 80GB HBM3, 81559, 1200, 80359",
            "@@vs-apps",
            "00000000:17:00.0, 42, 1100",
        ]
    )
    listing = remote.parse_listing(text, "gpu")
    assert [e["pid"] for e in listing.entries] == [42]
    info = listing.nvml
    assert info.error is None and info.devices[0].name == "NVIDIA H100 80GB HBM3"
    assert info.process_bytes(42) == 1100 * MiB
    assert (
        remote.parse_listing("@@vs-no-nvidia-smi\n", "gpu").nvml.error
        == "nvidia-smi is not available on gpu"
    )


def test_live_window_over_ssh(ssh_env, start_target, qtbot, tmp_path):
    """The same live window as locally: the counters, the device panel (nvidia-smi there)
    and Save snapshot, written here."""
    RAN.append("gui")
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.live.controller import LiveController

    application()
    t = start_target()
    t.cmd(f"alloc {6 * MiB}")
    target = f"{ssh_env.host_url}/{t.pid}"
    c = LiveController(target, stats_interval=0.1, trace_interval=0.3)
    w = c.window
    qtbot.addWidget(w)
    w.show()
    try:
        qtbot.waitUntil(lambda: c.trace_updates >= 1 and w.vs.doc is not None, timeout=30000)
        qtbot.waitUntil(lambda: c.curves.last("reserved") == 6 * MiB, timeout=10000)
        out = tmp_path / "live.pickle"
        with qtbot.waitSignal(c.savedSnapshot, timeout=20000) as sig:
            c.save_snapshot(str(out))
        assert sig.args == [str(out), ""]
        assert len(load_snapshot(out).trace.action) == 1
    finally:
        c.worker.close()
        w.close()
    qtbot.waitUntil(lambda: target not in remote._tunnels, timeout=10000)


def test_the_remote_attach_tests_ran(sshd):
    expected = {"list", "ended", "save", "session", "errors", "gui"}
    assert expected <= set(RAN), f"did not run: {expected - set(RAN)}"
