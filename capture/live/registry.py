"""The agent's registry file: how viewers find it (``vramscope attach --list``).

One JSON file per agent, ``agent-<pid>.json`` in the per-user runtime
directory (0700), written atomically with mode 0600.  It holds pid, command
line, endpoint, rank, device and start time, and for a TCP endpoint the
token a client must present, so only this user can read it.  Entries of
processes that died without cleaning up (SIGKILL, a crash) are removed by
the next agent to start and by every listing.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from vramscope.viewer import live_protocol as proto

from .. import files


def write_entry(
    directory: Path, endpoint: str, *, token: str | None, extra: dict[str, Any]
) -> Path:
    """Write this process's registry entry; returns its path."""
    pid = os.getpid()
    info = files.dist_info()
    entry: dict[str, Any] = {
        "protocol": proto.PROTOCOL_VERSION,
        "pid": pid,
        "start_ticks": proto.process_start_ticks(pid),
        "argv": list(sys.argv)[:64],
        "executable": sys.executable,
        "python": ".".join(map(str, sys.version_info[:3])),
        "host": socket.gethostname(),
        "endpoint": endpoint,
        "rank": info["rank"],
        "local_rank": info["local_rank"],
        "world_size": info["world_size"],
        "start_time": round(time.time(), 3),
        "vramscope_version": files.vramscope_version(),
        **extra,
    }
    if token is not None:
        entry["token"] = token
    path = proto.registry_path(pid, directory)
    data = json.dumps(entry, indent=1, default=str).encode("utf-8")
    # 0600: the entry may hold the TCP token.  Written whole or not at all.
    files.atomic_write(path, lambda f: f.write(data), mode=0o600)
    return path


def update_entry(path: Path, **fields: Any) -> None:
    """Change fields of our own entry (e.g. the device once CUDA is up)."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        entry.update(fields)
        data = json.dumps(entry, indent=1, default=str).encode("utf-8")
        files.atomic_write(path, lambda f: f.write(data), mode=0o600)
    except (OSError, ValueError):
        pass


def clean_stale(directory: Path) -> int:
    """Remove the entries (and sockets) of agents whose process is gone; how many."""
    before = {p.name for p in directory.glob(f"{proto.REGISTRY_PREFIX}*{proto.REGISTRY_SUFFIX}")}
    live = {Path(e["registry_file"]).name for e in proto.read_registry(directory, clean=True)}
    removed = len(before - live)
    # Sockets whose registry file is gone (an agent killed between the two writes).
    for sock in directory.glob(f"{proto.REGISTRY_PREFIX}*{proto.SOCKET_SUFFIX}"):
        pid_text = sock.name[len(proto.REGISTRY_PREFIX) : -len(proto.SOCKET_SUFFIX)]
        if pid_text.isdigit() and not proto.pid_alive(int(pid_text)):
            try:
                sock.unlink()
            except OSError:
                pass
    return removed
