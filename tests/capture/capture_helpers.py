"""Helpers shared by the capture tests (CPU and GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKLOADS = REPO / "tests" / "workloads"
FAKERUN = HERE / "capture_fakerun.py"


def child_env(
    extra: Mapping[str, str] | None = None, *, drop: tuple[str, ...] = ()
) -> dict[str, str]:
    """Environment for a child Python that must import what this one imports.

    The parent's ``sys.path`` goes into ``PYTHONPATH``, so children find
    ``vramscope.capture`` whether it is installed (editable) or reached
    through ``PYTHONPATH`` as in a plain checkout, and find these helpers.
    """
    env = {k: v for k, v in os.environ.items() if k not in drop}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        if key not in (extra or {}):
            env.pop(key, None)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(HERE), *paths]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_python(
    args: list[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=dict(env or child_env()),
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def run_capture(
    args: list[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m vramscope.capture ARGS`` in a child process."""
    return run_python(["-m", "vramscope.capture", *args], cwd=cwd, env=env, timeout=timeout)


def run_fake_capture(
    args: list[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The runner in a child process whose CUDA is the fake backend."""
    return run_python([str(FAKERUN), *args], cwd=cwd, env=env, timeout=timeout)


def snapshots(directory: Path, reason: str | None = None) -> list[Path]:
    """Snapshot pickles in ``directory`` (of one reason), oldest name first."""
    if not directory.is_dir():
        return []
    found = sorted(p for p in directory.glob("*.pickle") if not p.name.startswith("."))
    if reason is not None:
        found = [p for p in found if f"_{reason}_" in p.name]
    return found


def sidecar(snapshot_path: Path) -> dict[str, Any]:
    return json.loads(snapshot_path.with_suffix(".json").read_text(encoding="utf-8"))


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("vramscope: warning:")]


def figures_from_snapshot(path, device: int) -> dict[str, int]:
    """Reserved / allocated / active / requested bytes of a snapshot file, as the
    viewer's model computes them (through its safe loader)."""
    from vramscope.viewer.model import Selection, load_snapshot, memory_stats

    stats = memory_stats(load_snapshot(path), Selection(device=device))
    return {
        "reserved": stats.reserved_bytes,
        "allocated": stats.allocated_bytes,
        "active": stats.active_bytes,
        "requested": stats.requested_bytes,
    }


def figures_from_stats(stats: Mapping[str, Any]) -> dict[str, int]:
    return {
        "reserved": stats["reserved_bytes.all.current"],
        "allocated": stats["allocated_bytes.all.current"],
        "active": stats["active_bytes.all.current"],
        "requested": stats["requested_bytes.all.current"],
    }
