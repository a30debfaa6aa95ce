"""A real OpenSSH server on 127.0.0.1 for the remote tests: throwaway keys, nothing else.

:class:`Sshd` writes a host key, a user key, ``authorized_keys``, a minimal
``sshd_config`` (loopback only, keys only, ``PidFile`` in the temp dir) and an
``ssh_config`` that the code under test gets through ``VRAMSCOPE_SSH_CONFIG``
(``ssh -F``): the user's own ``~/.ssh`` is never read.  The server runs in the
foreground (``-D``) as a child of the test, and is killed at the end.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def sshd_binary() -> str | None:
    found = shutil.which("sshd")
    if found:
        return found
    for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd"):
        if os.access(p, os.X_OK):
            return p
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vramscope-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )


class Sshd:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.binary = sshd_binary()
        assert self.binary is not None
        self.port = free_port()
        self.user = getpass.getuser()
        self.host_key = directory / "host_key"
        self.user_key = directory / "user_key"
        self.other_key = directory / "other_key"  # not authorized: "permission denied"
        for k in (self.host_key, self.user_key, self.other_key):
            _keygen(k)
        os.chmod(directory, 0o700)
        (directory / "authorized_keys").write_text((directory / "user_key.pub").read_text())
        self.sshd_config = directory / "sshd_config"
        self.sshd_config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {directory / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {directory / 'authorized_keys'}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "PermitRootLogin prohibit-password\n"
            "AllowTcpForwarding yes\n"
            "AllowStreamLocalForwarding yes\n"
            "X11Forwarding no\n"
            "PrintMotd no\n"
            "LogLevel ERROR\n"
        )
        known = directory / "known_hosts"
        host_pub = (directory / "host_key.pub").read_text().split()
        known.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        self.ssh_config = self.write_ssh_config("ssh_config", self.user_key)
        self.ssh_config_other = self.write_ssh_config("ssh_config_other", self.other_key)
        self.proc: subprocess.Popen | None = None
        self.log = directory / "sshd.log"

    def write_ssh_config(self, name: str, key: Path) -> Path:
        p = self.dir / name
        p.write_text(
            "Host *\n"
            f"  IdentityFile {key}\n"
            "  IdentitiesOnly yes\n"
            "  IdentityAgent none\n"
            f"  UserKnownHostsFile {self.dir / 'known_hosts'}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  PasswordAuthentication no\n"
            "  KbdInteractiveAuthentication no\n"
            "  LogLevel ERROR\n"
        )
        return p

    def start(self) -> "Sshd":
        if os.geteuid() == 0:
            # Privilege separation: Debian's sshd wants this directory when run as root.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "-D", "-e", "-f", str(self.sshd_config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "wb"),
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    @property
    def host_url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
