"""Fixtures of the live-attach tests: a private runtime dir and fake training processes."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "capture"))

from capture_helpers import child_env  # noqa: E402
from live_helpers import Target  # noqa: E402


@pytest.fixture
def runtime_dir(monkeypatch):
    """A short (Unix socket paths are limited), private runtime dir for agents."""
    d = Path(tempfile.mkdtemp(prefix="vsl-", dir="/tmp"))
    os.chmod(d, 0o700)
    monkeypatch.setenv("VRAMSCOPE_RUNTIME_DIR", str(d))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start_target(runtime_dir):
    started: list[Target] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Target:
        e = child_env({"VRAMSCOPE_RUNTIME_DIR": str(runtime_dir), **(env or {})})
        t = Target(list(args), e)
        started.append(t)
        return t

    yield start
    for t in started:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait()
