"""Snapshot file names, atomic writes (also under SIGKILL) and the sidecar, without CUDA."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from capture_helpers import child_env

from vramscope.capture import files

# The sidecar keys of the project's reference snapshots (shared/snapshots/*.json).
REFERENCE_KEYS = {
    "name",
    "torch",
    "gpu",
    "alloc_conf",
    "memory_stats",
    "oom_request",
    "oom_device_alloc",
    "oom_device_free",
    "oom_message",
}


def test_name_carries_host_pid_rank_device_reason_time():
    when = time.mktime((2025, 3, 1, 14, 25, 1, 0, 0, -1)) + 0.318
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}
    name = files.snapshot_name("oom", 1, when=when, host="node7", pid=4242, env=env)
    assert name == "node7_pid4242_rank3_cuda1_oom_20250301-142501-318.pickle"


def test_name_defaults_rank0_and_real_host_and_pid():
    name = files.snapshot_name("exit", 0, env={})
    host, pid, rank, dev, reason, *_ = name.split("_")
    assert host == files.short_host()
    assert (pid, rank, dev, reason) == (f"pid{os.getpid()}", "rank0", "cuda0", "exit")
    assert name.endswith(".pickle")


def test_dist_info_parses_torchrun_env_and_ignores_garbage():
    assert files.dist_info({"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}) == {
        "rank": 1,
        "local_rank": 0,
        "world_size": 2,
    }
    assert files.dist_info({"RANK": "x"}) == {"rank": None, "local_rank": None, "world_size": None}


def test_unique_path_never_overwrites(tmp_path):
    p = tmp_path / "a.pickle"
    assert files.unique_path(p) == p
    p.write_bytes(b"1")
    assert files.unique_path(p) == tmp_path / "a-2.pickle"
    (tmp_path / "a-2.pickle").write_bytes(b"2")
    assert files.unique_path(p) == tmp_path / "a-3.pickle"


def test_sidecar_path_rules():
    assert files.sidecar_path("d/x.pickle") == Path("d/x.json")
    assert files.sidecar_path("d/x.pkl") == Path("d/x.json")
    assert files.sidecar_path("d/x") == Path("d/x.json")
    with pytest.raises(ValueError):
        files.sidecar_path("d/x.json")


def test_atomic_write_writes_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "s.pickle"
    n = files.atomic_write(target, lambda f: f.write(b"x" * 1000))
    assert n == 1000 and target.read_bytes() == b"x" * 1000
    assert [p.name for p in target.parent.iterdir()] == ["s.pickle"]


def test_atomic_write_error_keeps_old_file_and_removes_temp(tmp_path):
    target = tmp_path / "s.pickle"
    target.write_bytes(b"OLD")

    def broken(f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        files.atomic_write(target, broken)
    assert target.read_bytes() == b"OLD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pickle"]


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from vramscope.capture import files

    def slow(f):
        f.write(b"NEW" * 100_000)
        f.flush()
        print("WRITING", flush=True)
        time.sleep(60)          # killed here, mid-write
        f.write(b"END")

    files.atomic_write(sys.argv[1], slow)
    print("DONE", flush=True)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "replacing"])
def test_kill_during_write_never_leaves_partial_file_under_final_name(tmp_path, existing):
    target = tmp_path / "snap.pickle"
    if existing:
        target.write_bytes(b"OLD")
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(target)],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "WRITING", proc.stderr.read()
        # The temp file is there and holds the partial data.
        temps = [p for p in tmp_path.iterdir() if files.is_temp_name(p.name)]
        assert len(temps) == 1 and temps[0].stat().st_size == 300_000
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    if existing:
        assert target.read_bytes() == b"OLD"
    else:
        assert not target.exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name not in ("writer.py", "snap.pickle")]
    assert len(leftovers) == 1 and files.is_temp_name(leftovers[0].name)
    assert leftovers[0].name.startswith(".snap.pickle.")  # hidden, and never *.pickle
    assert not leftovers[0].name.endswith(".pickle")
    # The dead writer's leftover is cleaned up; the final name is untouched.
    assert files.clean_stale_temps(tmp_path) == leftovers
    assert not leftovers[0].exists()
    assert target.exists() == existing


def test_clean_stale_temps_spares_live_writers_and_other_files(tmp_path):
    host = files.short_host()
    mine = tmp_path / f".a.pickle.{host}.{os.getpid()}.0.tmp"
    foreign_fresh = tmp_path / ".b.pickle.otherhost.1.0.tmp"
    foreign_old = tmp_path / ".c.pickle.otherhost.1.0.tmp"
    unrelated = tmp_path / "notes.tmp"
    for p in (mine, foreign_fresh, foreign_old, unrelated):
        p.write_bytes(b"x")
    old = time.time() - 3 * 24 * 3600
    os.utime(foreign_old, (old, old))
    assert files.clean_stale_temps(tmp_path) == [foreign_old]
    assert mine.exists() and foreign_fresh.exists() and unrelated.exists()


def _stats():
    return {
        "allocated_bytes.all.current": 1866465280,
        "reserved_bytes.all.current": 3732930560,
        "active_bytes.all.current": 1866465280,
        "requested_bytes.all.current": 1866465280,
        "num_ooms": 1,
    }


def test_sidecar_contents_without_cuda(tmp_path):
    snap = {
        "segments": [
            {"device": 0, "total_size": 20 << 20, "blocks": []},
            {"device": 1, "total_size": 2 << 20, "blocks": []},
        ],
        "device_traces": [[{"action": "alloc"}] * 5, [{"action": "alloc"}]],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    }
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}
    data = files.build_sidecar(
        name="snap",
        reason="oom",
        memory_stats=_stats(),
        torch_version="2.11.0+cu130",
        gpu="NVIDIA H200",
        device=0,
        alloc_conf="expandable_segments:True",
        snapshot=snap,
        oom={"oom_request": 20 << 20, "oom_device_alloc": 3 << 30, "oom_device_free": 1 << 30},
        recording={"enabled": True, "max_entries": 100_000, "stacks": "python", "context": "all"},
        env=env,
        argv=["train.py", "--lr", "1"],
        when=1_700_000_000.25,
    )
    path = files.write_sidecar(tmp_path / "snap.json", data)
    back = json.loads(path.read_text(encoding="utf-8"))
    assert back == json.loads(json.dumps(data))
    assert back["memory_stats"] == _stats()
    assert (back["reason"], back["torch"], back["gpu"], back["device"]) == (
        "oom",
        "2.11.0+cu130",
        "NVIDIA H200",
        0,
    )
    assert (back["rank"], back["local_rank"], back["world_size"]) == (1, 1, 2)
    assert back["argv"] == ["train.py", "--lr", "1"]
    assert back["pid"] == os.getpid() and back["host"] == socket.gethostname()
    assert back["time"].startswith("2023-11-1") and back["unix_time"] == 1_700_000_000.25
    assert back["oom_request"] == 20 << 20
    assert back["n_segments"] == 1 and back["n_trace"] == 5  # device 0 only
    assert back["allocator_settings"] == snap["allocator_settings"]
    assert back["alloc_conf"] == "expandable_segments:True"
    assert isinstance(back["vramscope_version"], str) and back["vramscope_version"]
    # The message of an OOM is only known once the exception exists: added later.
    files.update_sidecar(path, oom_message="CUDA out of memory.")
    back = json.loads(path.read_text(encoding="utf-8"))
    assert REFERENCE_KEYS <= back.keys()
    assert back["oom_message"] == "CUDA out of memory."
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]


def test_sidecar_rejects_unknown_reason_and_survives_odd_values(tmp_path):
    with pytest.raises(ValueError):
        files.build_sidecar(
            name="x",
            reason="because",
            memory_stats={},
            torch_version="t",
            gpu=None,
            device=None,
            alloc_conf="",
        )
    data = files.build_sidecar(
        name="x",
        reason="manual",
        memory_stats={"odd": object()},
        torch_version="t",
        gpu=None,
        device=None,
        alloc_conf="",
    )
    files.write_sidecar(tmp_path / "x.json", data)  # default=str: no TypeError
    odd = json.loads((tmp_path / "x.json").read_text())["memory_stats"]["odd"]
    assert odd.startswith("<object")


def test_alloc_conf_from_env():
    assert files.alloc_conf_from_env({}) == ""
    assert files.alloc_conf_from_env({"PYTORCH_CUDA_ALLOC_CONF": "a:1"}) == "a:1"
    assert files.alloc_conf_from_env({"PYTORCH_ALLOC_CONF": "b:2"}) == "b:2"
