"""Capture on a real GPU: recording, OOM snapshots, SIGUSR1, ranks, torchrun.

Run on the GPU machine with ``pytest -m gpu tests/capture``.  Everything
that changes process-wide allocator state (memory fraction, OOMs) runs in a
child process so the tests stay independent.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from capture_helpers import (
    WORKLOADS,
    child_env,
    figures_from_snapshot,
    figures_from_stats,
    run_capture,
    run_python,
    sidecar,
    snapshots,
)

from tests.gpu_marks import ON_GPU, cuda_available
from vramscope.capture import record

pytestmark = ON_GPU

MiB = 1 << 20


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def _train_small():
    spec = importlib.util.spec_from_file_location("train_small", WORKLOADS / "train_small.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _assert_figures_match(path, side):
    """The viewer's model, opening the file, gives the allocator's own counters."""
    device = side["device"]
    assert figures_from_snapshot(path, device) == figures_from_stats(side["memory_stats"])


def _memory_viz_opens(snap):
    from torch.cuda import _memory_viz

    assert "entries" in _memory_viz.trace(snap)
    _memory_viz.segsum(snap)
    assert len(_memory_viz.trace_plot(snap)) > 1000


def test_small_training_loop_recorded(tmp_path):
    import torch

    ts = _train_small()
    device = torch.cuda.current_device()
    model, opt = ts.build(256, 2, f"cuda:{device}")
    step = ts.make_step(model, opt, 8, 64, 256, f"cuda:{device}")
    assert not torch._C._cuda_isHistoryEnabled()
    with record(out=tmp_path, max_entries=50_000):
        assert torch._C._cuda_isHistoryEnabled()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    assert not torch._C._cuda_isHistoryEnabled()  # restored

    [path] = snapshots(tmp_path)
    assert "_exit_" in path.name and f"_cuda{device}_" in path.name
    side = sidecar(path)
    snap = _load(path)
    assert side["reason"] == "exit"
    assert side["torch"] == torch.__version__
    assert side["gpu"] == torch.cuda.get_device_name(device)
    props = torch.cuda.get_device_properties(device)
    assert side["gpu_multiprocessors"] == props.multi_processor_count
    assert side["gpu_threads_per_multiprocessor"] == props.max_threads_per_multi_processor
    assert side["recording"]["stacks"] == "python" and side["recording"]["enabled"] is True
    trace = snap["device_traces"][device]
    actions = collections.Counter(e["action"] for e in trace)
    assert actions["alloc"] >= 30 and actions["free_completed"] >= 10, actions
    assert side["n_trace"] == len(trace)
    files_seen = {f["filename"] for e in trace for f in e.get("frames", [])}
    assert any(f.endswith("train_small.py") for f in files_seen), sorted(files_seen)[:20]
    _assert_figures_match(path, side)
    _memory_viz_opens(snap)


def test_nested_and_external_recording_state_restored(tmp_path):
    import torch

    enabled = torch._C._cuda_isHistoryEnabled
    torch.ones(1, device="cuda")
    with record(out=tmp_path / "a", dump_on_exit=False):
        with record(out=tmp_path / "b", max_entries=10, dump_on_exit=False):
            assert enabled()
        assert enabled()
    assert not enabled()
    torch.cuda.memory._record_memory_history(max_entries=1000)  # the user's own recording
    try:
        with record(out=tmp_path / "c", dump_on_exit=False):
            pass
        assert enabled()  # left on: it was not ours to turn off
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def test_stacks_all_has_cpp_frames(tmp_path):
    import torch

    with record(out=tmp_path, stacks="all", max_entries=1000):
        xs = [torch.empty(MiB, device="cuda") for _ in range(4)]
        del xs
    [path] = snapshots(tmp_path)
    snap = _load(path)
    names = {
        f["name"]
        for e in snap["device_traces"][torch.cuda.current_device()]
        for f in e.get("frames", [])
    }
    assert any("c10::" in n or "at::" in n for n in names), sorted(names)[:20]


def test_recording_starts_when_cuda_does(tmp_path):
    code = textwrap.dedent(
        f"""
        import torch
        from vramscope.capture import record
        with record(out={str(tmp_path)!r}):
            assert not torch.cuda.is_initialized()  # starting did not start CUDA
            x = torch.ones(1 << 20, device="cuda")
            assert torch._C._cuda_isHistoryEnabled()
            y = x * 2
        assert not torch._C._cuda_isHistoryEnabled()
        print("ok")
        """
    )
    r = run_python(["-c", code], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [path] = snapshots(tmp_path)
    allocs = [e for e in _load(path)["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) >= 2


def test_fragmentation_oom_snapshot_matches_sidecar(tmp_path):
    out = tmp_path / "out"
    r = run_capture(
        ["--out", str(out), str(WORKLOADS / "fragmentation_oom.py")], cwd=tmp_path, timeout=180
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "OutOfMemoryError" in r.stderr and "runner.py" not in r.stderr
    [oom_path] = snapshots(out, "oom")
    side = sidecar(oom_path)
    snap = _load(oom_path)
    device = side["device"]
    assert side["reason"] == "oom"
    assert side["oom_request"] == 20 * MiB  # the 20 MiB segment the 8 MiB block needed
    assert side["oom_trace_size"] == 8 * MiB
    assert "out of memory" in side["oom_message"].lower()
    assert side["memory_stats"]["num_ooms"] == 1
    _assert_figures_match(oom_path, side)
    from vramscope.viewer.model import last_oom, load_snapshot

    verdict = last_oom(load_snapshot(oom_path))
    assert verdict.kind == "fragmentation", verdict.verdict
    assert verdict.requested_bytes == 8 * MiB and verdict.largest_free_block_bytes == 4 * MiB
    # It is fragmentation: plenty free in total, but only in 4 MiB holes.
    inactive = [
        b["size"]
        for s in snap["segments"]
        if s["device"] == device
        for b in s["blocks"]
        if b["state"] == "inactive"
    ]
    assert max(inactive) == 4 * MiB and sum(inactive) >= 1024 * MiB
    assert snap["device_traces"][device][-1]["action"] == "oom"
    _memory_viz_opens(snap)
    stats = run_python(["-m", "torch.cuda._memory_viz", "stats", str(oom_path)], cwd=tmp_path)
    assert stats.returncode == 0 and "Summary of segments" in stats.stdout, stats.stderr
    assert len(snapshots(out, "exit")) == 1


def test_oom_propagates_unchanged_from_record_block(tmp_path):
    code = textwrap.dedent(
        f"""
        import json, os, torch
        from vramscope.capture import record
        out = {str(tmp_path / "out")!r}
        torch.cuda.set_per_process_memory_fraction(0.02)
        result = {{}}
        try:
            with record(out=out, dump_on_exit=False):
                keep = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
                        for _ in range(10_000)]
        except Exception as exc:
            result["type"] = type(exc).__module__ + "." + type(exc).__qualname__
            result["is_oom"] = isinstance(exc, torch.cuda.OutOfMemoryError)
            result["message"] = str(exc)
        result["history_after"] = torch._C._cuda_isHistoryEnabled()
        print(json.dumps(result))
        """
    )
    r = run_python(["-c", code], cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["is_oom"], result
    assert result["message"].startswith("CUDA out of memory"), result
    assert result["history_after"] is False
    [oom_path] = snapshots(tmp_path / "out", "oom")
    assert sidecar(oom_path)["oom_message"] == result["message"]


def test_sigusr1_dump_during_training_loop(tmp_path):
    out, ready, until = tmp_path / "out", tmp_path / "ready", tmp_path / "until"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vramscope.capture",
            "--out",
            str(out),
            str(WORKLOADS / "train_small.py"),
            "--ready-file",
            str(ready),
            "--until-file",
            str(until),
            "--max-seconds",
            "120",
        ],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: ready.exists() or proc.poll() is not None, 120)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGUSR1)
        _wait_for(lambda: list(out.glob("*_signal_*.json")), 120)
        time.sleep(0.5)  # training goes on after the dump
        until.touch()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    [sig] = snapshots(out, "signal")
    side = sidecar(sig)
    assert side["reason"] == "signal"
    _assert_figures_match(sig, side)
    assert "done" in stdout
    steps_total = int(stdout.split("done ")[1].split()[0])
    assert steps_total >= 2


def test_two_ranks_simulated_by_env(tmp_path):
    import torch

    out = tmp_path / "out"
    for rank in (0, 1):
        local = rank if torch.cuda.device_count() > 1 else 0
        env = child_env({"RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": "2"})
        r = run_capture(
            ["--out", str(out), str(WORKLOADS / "train_small.py"), "--steps", "2"],
            cwd=tmp_path,
            env=env,
            timeout=180,
        )
        assert r.returncode == 0, r.stderr
    paths = snapshots(out)
    assert len(paths) == 2
    by_rank = {sidecar(p)["rank"]: p for p in paths}
    assert sorted(by_rank) == [0, 1]
    assert "_rank0_" in by_rank[0].name and "_rank1_" in by_rank[1].name
    assert all(sidecar(p)["world_size"] == 2 for p in paths)


@pytest.mark.skipif(
    not cuda_available() or __import__("torch").cuda.device_count() < 2,
    reason="torchrun test needs 2 GPUs",
)
def test_torchrun_two_processes_each_rank_writes_its_files(tmp_path):
    out = tmp_path / "out"
    base = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "vramscope.capture",
        "--out",
        str(out),
        str(WORKLOADS / "train_small.py"),
        "--steps",
        "3",
    ]
    r = subprocess.run(
        base, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    names = [p.name for p in snapshots(out, "exit")]
    assert len(names) == 2, names
    assert any("_rank0_cuda0_" in n for n in names) and any("_rank1_cuda1_" in n for n in names)

    # An OOM on rank 1 dumps rank 1.
    out2 = tmp_path / "out2"
    cmd = [a if a != str(out) else str(out2) for a in base] + ["--oom-on-rank", "1"]
    r = subprocess.run(
        cmd, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode != 0
    ooms = snapshots(out2, "oom")
    assert len(ooms) == 1 and "_rank1_cuda1_" in ooms[0].name, r.stderr[-3000:]
    assert sidecar(ooms[0])["rank"] == 1


def _wait_for(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)
