"""What the ssh:// wire tests and ``make bench`` put between ssh and the test sshd.

* :func:`relay_main` (run as ``python wire_helpers.py relay HOST PORT RATE COUNTS``) is
  an ssh ``ProxyCommand``: it carries the connection to 127.0.0.1 and counts its bytes
  (what really crossed the link, whatever vramscope reports), sending at most RATE
  bytes/s towards ssh (0: unlimited): a slow link without ``tc`` or root.
* :func:`path_main` (``python wire_helpers.py path DIR ssh ARGS... -- HOST COMMAND``)
  runs ssh with the remote command preceded by ``PATH=DIR``: a host that has only the
  tools linked into DIR (no compressor, no vramscope), through the real sshd.
* :func:`remote_bin` makes such a DIR.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: What every remote command of vramscope needs, besides what the test gives.
BASE_TOOLS = ("sh", "stat", "head", "cat", "od", "tr")


def remote_bin(directory: Path, *tools: str, vramscope: str | None = None) -> Path:
    """A directory of links to ``BASE_TOOLS`` and ``tools`` (and to the ``vramscope``
    script given): the remote PATH of a host that has nothing else."""
    directory.mkdir(parents=True, exist_ok=True)
    for tool in (*BASE_TOOLS, *tools):
        found = shutil.which(tool)
        assert found, f"{tool} is needed on this machine for the test"
        (directory / tool).symlink_to(found)
    if vramscope:
        (directory / "vramscope").symlink_to(vramscope)
    return directory


def ssh_with_path(directory: Path) -> str:
    """``VRAMSCOPE_SSH`` for a remote PATH of ``directory`` only."""
    return shlex.join(
        [sys.executable, str(HERE / "wire_helpers.py"), "path", str(directory), "ssh"]
    )


def proxy_config(base: Path, out: Path, rate: int, counts: Path) -> Path:
    """``base`` (an ssh config) with every connection going through the counting relay."""
    proxy = shlex.join(
        [sys.executable, str(HERE / "wire_helpers.py"), "relay", "%h", "%p", str(rate), str(counts)]
    )
    out.write_text(base.read_text().replace("Host *\n", f"Host *\n  ProxyCommand {proxy}\n"))
    return out


def bytes_moved(counts: Path, wait_s: float = 30.0) -> int:
    """The bytes the relay carried towards ssh, over every connection so far.

    ssh leaves without waiting for its ProxyCommand, which writes its count once it has
    been told to stop: each relay says "open" when it starts, and this waits (at most
    ``wait_s``) until every one that opened has written its count."""
    if not counts.exists():
        return 0
    deadline = time.monotonic() + wait_s
    while True:
        lines = [line for line in counts.read_text().split("\n") if line]
        done = [line for line in lines if line != "open"]
        if len(done) >= len(lines) - len(done) or time.monotonic() > deadline:
            return sum(int(line.split()[0]) for line in done)
        time.sleep(0.02)


def relay_main(host: str, port: str, rate: str, counts: str) -> int:
    # ssh ends its ProxyCommand with a signal: the count is still written.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, _leave)
    limit = int(rate)
    with open(counts, "a") as f:
        f.write("open\n")
    down = up = 0
    start = time.monotonic()
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    open_in = True
    try:
        sock = socket.create_connection((host, int(port)))
        while True:
            fds = [sock] + ([stdin] if open_in else [])
            ready, _, _ = select.select(fds, [], [])
            if sock in ready:
                data = sock.recv(16384)
                if not data:
                    break
                down += len(data)
                _write_all(stdout, data)
                if limit:
                    ahead = down / limit - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
            if open_in and stdin in ready:
                data = os.read(stdin, 65536)
                if not data:
                    open_in = False
                    sock.shutdown(socket.SHUT_WR)
                else:
                    up += len(data)
                    sock.sendall(data)
    finally:
        with open(counts, "a") as f:
            f.write(f"{down} {up}\n")
    return 0


def _leave(signum, frame) -> None:
    raise SystemExit(0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def path_main(directory: str, argv: list[str]) -> int:
    argv = list(argv)
    argv[-1] = f"PATH={shlex.quote(directory)}; export PATH; {argv[-1]}"
    os.execvp(argv[0], argv)
    return 1


if __name__ == "__main__":
    if sys.argv[1] == "relay":
        sys.exit(relay_main(*sys.argv[2:6]))
    sys.exit(path_main(sys.argv[2], sys.argv[3:]))
