"""Live attach on a real GPU: a training subprocess, attached for real.

Run on the GPU machine: ``pytest -m gpu tests/live``.  The same agent, socket
and viewer code as the CPU tests, with torch's real allocator behind it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from capture_helpers import WORKLOADS, child_env, figures_from_snapshot, figures_from_stats


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs torch with CUDA")]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> dict:
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"workload exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {path.name}")
        time.sleep(0.05)
    return json.loads(path.read_text())


def _start(args, runtime_dir, tmp_path, *, runner: bool = True, env_extra=None):
    env = child_env({"VRAMSCOPE_RUNTIME_DIR": str(runtime_dir), **(env_extra or {})})
    pre = (
        ["-m", "vramscope.capture", "--live", "--no-exit-dump", "--out", str(tmp_path / "snaps")]
        if runner
        else []
    )
    return subprocess.Popen(
        [sys.executable, *pre, str(WORKLOADS / "live_train.py"), *args],
        env=env,
        cwd=tmp_path,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_headless_grab_matches_memory_stats_of_the_same_step(tmp_path, runtime_dir):
    """`vramscope attach PID --save` at step 6 equals memory_stats() taken at step 6."""
    hs = tmp_path / "hs"
    hs.mkdir()
    proc = _start(
        ["--steps", "10", "--pause-at", "6", "--grow-mib", "8", "--handshake-dir", str(hs)],
        runtime_dir,
        tmp_path,
    )
    try:
        expected = _wait_for(hs / "stats.json", proc)
        out = tmp_path / "grab.pickle"
        env = child_env({"VRAMSCOPE_RUNTIME_DIR": str(runtime_dir)})
        grab = subprocess.run(
            [
                sys.executable,
                "-m",
                "vramscope.viewer.cli",
                "attach",
                str(proc.pid),
                "--save",
                str(out),
            ],
            env=env,
            text=True,
            capture_output=True,
            timeout=120,
        )
        assert grab.returncode == 0, grab.stderr
        device = expected["device"]
        want = figures_from_stats(expected["memory_stats"])
        assert want["reserved"] > 0
        assert figures_from_snapshot(out, device) == want
        side = json.loads(out.with_suffix(".json").read_text())
        assert figures_from_stats(side["memory_stats"]) == want
        # A standard pickle: torch's own tools open it.
        import pickle

        from torch.cuda import _memory_viz

        with open(out, "rb") as f:
            snap = pickle.load(f)  # our own file, written by the test: plain pickle is fine
        _memory_viz.segsum(snap)
        assert len(snap["device_traces"][device]) > 0
    finally:
        (hs / "go").touch()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()[-3000:]


def test_live_session_on_a_training_process(tmp_path, runtime_dir):
    """stats (fast path, exact at its instant), incremental traces, process exit."""
    from vramscope.viewer.model.live.client import AttachError
    from vramscope.viewer.model.live.session import ENDED, LiveSession
    from vramscope.viewer.model.view.document import Document

    hs = tmp_path / "hs"
    hs.mkdir()
    until = tmp_path / "stop"
    proc = _start(
        [
            "--serve",
            "--grow-mib",
            "4",
            "--sleep",
            "0.02",
            "--handshake-dir",
            str(hs),
            "--until-file",
            str(until),
        ],
        runtime_dir,
        tmp_path,
        runner=False,
        # A generous budget: the trace requests come 2.5 s apart, before the
        # 100k-entry ring wraps (the default 1 % spaces them ~25 s apart).
        env_extra={"LIVE_BUDGET": "0.2"},
    )
    try:
        ready = _wait_for(hs / "ready.json", proc)
        s = LiveSession(str(ready["pid"]))
        hello = s.connect()
        assert hello["cuda"] and hello["history"]
        upd = s.poll_stats()
        import torch

        if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 11):
            assert upd.fast_path, "torch >= 2.11 builds the segments without the trace"
        dev = hello["device"]
        # Segments and counters of one instant (the agent checks that no allocation
        # happened in between): the model's figures equal the allocator's counters.
        checked = 0
        for _ in range(20):
            u = s.poll_stats()
            if not u.consistent:
                continue
            stats = u.stats[dev]
            assert u.figures.reserved_bytes == stats["reserved_bytes.all.current"]
            assert u.figures.allocated_bytes == stats["allocated_bytes.all.current"]
            assert u.figures.active_bytes == stats["active_bytes.all.current"]
            assert u.figures.requested_bytes == stats["requested_bytes.all.current"]
            checked += 1
            time.sleep(0.1)
        assert checked >= 10
        first = s.poll_trace()
        assert first.added > 0
        cursor = dict(s.cursors)
        time.sleep(2.5)  # the governor spaces trace requests by their cost
        second = s.poll_trace()
        while second.throttled:
            time.sleep(second.retry_after_s + 0.05)
            second = s.poll_trace()
        assert second.added > 0 and s.cursors != cursor
        assert not second.gap
        # Appended to the columns, not re-sent: the window holds both increments.
        assert len(second.snap.trace.action) == first.added + second.added
        doc = Document.build(second.snap)
        assert doc.timeline is not None
        # The replayed window ends exactly at the segments of its instant.
        upd2 = s.poll_stats()
        assert upd2.figures.reserved_bytes >= upd.figures.reserved_bytes  # it keeps growing
        until.touch()
        assert proc.wait(timeout=60) == 0
        with pytest.raises(AttachError):  # the agent is gone with its process
            s.poll_stats()
        assert s.state == ENDED
    finally:
        until.touch()
        if proc.poll() is None:
            proc.kill()
