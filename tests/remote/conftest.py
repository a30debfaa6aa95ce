"""Fixtures of the remote (ssh://) tests: a real sshd on 127.0.0.1, live agents.

Only when ``sshd`` (openssh-server) is absent are these tests skipped, with that
reason; under ``CI`` its absence is a failure instead (``make test`` installs it).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "live"))
sys.path.insert(0, str(HERE.parent / "capture"))

from sshd_helpers import Sshd, sshd_binary  # noqa: E402

NO_SSHD = (
    "sshd (openssh-server) or the OpenSSH client is not installed: the ssh:// "
    "tests need a real server"
)


@pytest.fixture(scope="session")
def sshd():
    if sshd_binary() is None or not (shutil.which("ssh") and shutil.which("ssh-keygen")):
        pytest.fail(NO_SSHD) if os.environ.get("CI") else pytest.skip(NO_SSHD)
    d = Path(tempfile.mkdtemp(prefix="vs-sshd-", dir="/tmp"))
    server = Sshd(d).start()
    yield server
    server.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ssh_env(sshd, monkeypatch):
    """The code under test uses the throwaway config (``ssh -F``), nothing of ~/.ssh."""
    monkeypatch.setenv("VRAMSCOPE_SSH_CONFIG", str(sshd.ssh_config))
    monkeypatch.delenv("VRAMSCOPE_SSH", raising=False)
    return sshd


@pytest.fixture
def runtime_dir(monkeypatch):
    """A short, private runtime dir for agents (the remote side finds it through
    ``VRAMSCOPE_REMOTE_RUNTIME_DIR``)."""
    d = Path(tempfile.mkdtemp(prefix="vsr-", dir="/tmp"))
    os.chmod(d, 0o700)
    monkeypatch.setenv("VRAMSCOPE_REMOTE_RUNTIME_DIR", str(d))
    # Locally there is nothing: whatever attach finds, it found over ssh.
    empty = Path(tempfile.mkdtemp(prefix="vsl-", dir="/tmp"))
    os.chmod(empty, 0o700)
    monkeypatch.setenv("VRAMSCOPE_RUNTIME_DIR", str(empty))
    yield d
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(empty, ignore_errors=True)


@pytest.fixture
def start_target(runtime_dir):
    from capture_helpers import child_env
    from live_helpers import Target

    started: list = []

    def start(*args: str) -> Target:
        t = Target(list(args), child_env({"VRAMSCOPE_RUNTIME_DIR": str(runtime_dir)}))
        started.append(t)
        return t

    yield start
    for t in started:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait()
