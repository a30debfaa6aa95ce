"""Snapshot files: their names, atomic writes, and the JSON sidecar.

A snapshot is written as ``<name>.pickle`` (the plain ``pickle.dump`` of
``torch.cuda.memory._snapshot()``, so torch's memory_viz opens it too) with
``<name>.json`` beside it.  Names carry host, pid, rank, device, reason and
time, so every rank of a ``torchrun`` job and every dump of a long run gets
its own file in a shared directory::

    gpu-node-3_pid4242_rank1_cuda1_oom_20250301-142501-318.pickle

Writes are atomic: the bytes go to a hidden temporary file in the same
directory, which is renamed over the final name only once complete and
flushed.  A process killed mid-write leaves at most a ``.<name>.<host>.<pid>.<n>.tmp``
file, never a truncated file under the final name; :func:`clean_stale_temps`
removes such leftovers of dead processes.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

SNAPSHOT_SUFFIX = ".pickle"
SIDECAR_SUFFIX = ".json"
TEMP_SUFFIX = ".tmp"

#: Why a snapshot was written; also the ``reason`` field of the sidecar.
REASONS = ("exit", "oom", "signal", "manual")

_counter = itertools.count()
_counter_lock = threading.Lock()
_TEMP_RE = re.compile(r"^\.(?P<final>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.(?P<n>\d+)\.tmp$")
# Leftovers whose owner cannot be checked (another host, no kill(pid, 0)) are
# removed only once they are clearly abandoned.
_STALE_AFTER_S = 24 * 3600


def short_host() -> str:
    """This machine's short host name, reduced to characters safe in file names."""
    name = socket.gethostname().split(".")[0]
    name = re.sub(r"[^A-Za-z0-9-]+", "-", name).strip("-")
    return name or "host"


def _env_int(env: Mapping[str, str], key: str) -> int | None:
    value = env.get(key, "").strip()
    try:
        return int(value)
    except ValueError:
        return None


def dist_info(env: Mapping[str, str] | None = None) -> dict[str, int | None]:
    """Rank, local rank and world size as torchrun (or SLURM-style launchers) set them."""
    env = os.environ if env is None else env
    return {
        "rank": _env_int(env, "RANK"),
        "local_rank": _env_int(env, "LOCAL_RANK"),
        "world_size": _env_int(env, "WORLD_SIZE"),
    }


def snapshot_name(
    reason: str,
    device: int | None,
    *,
    when: float | None = None,
    host: str | None = None,
    pid: int | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The file name (with ``.pickle``) for a snapshot taken now for ``reason``.

    Rank comes from ``RANK`` (0 when unset: a single process is rank 0 of 1).
    The time has millisecond resolution; :func:`unique_path` resolves the
    rare collision of two dumps within one millisecond.
    """
    when = time.time() if when is None else when
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    stamp += f"-{int((when % 1) * 1000):03d}"
    rank = dist_info(env)["rank"]
    dev = "cuda" + (str(device) if device is not None else "-")
    parts = [
        host or short_host(),
        f"pid{os.getpid() if pid is None else pid}",
        f"rank{rank if rank is not None else 0}",
        dev,
        reason,
        stamp,
    ]
    return "_".join(parts) + SNAPSHOT_SUFFIX


def unique_path(path: Path) -> Path:
    """``path``, or ``<stem>-2.pickle``, ``-3`` ... if a file of that name exists."""
    if not path.exists():
        return path
    for i in itertools.count(2):
        candidate = path.with_name(f"{path.stem}-{i}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise AssertionError("unreachable")


def sidecar_path(snapshot_path: str | os.PathLike[str]) -> Path:
    """The sidecar of ``x.pickle`` is ``x.json`` (of ``x.pkl`` too, as the viewer reads it)."""
    p = Path(snapshot_path)
    if p.suffix == SIDECAR_SUFFIX:
        raise ValueError(f"a snapshot path cannot end in {SIDECAR_SUFFIX}: {p}")
    return p.with_suffix(SIDECAR_SUFFIX)


def temp_path(final: Path) -> Path:
    """A hidden temp name next to ``final``, unique to this host, process and write."""
    with _counter_lock:
        n = next(_counter)
    return final.with_name(f".{final.name}.{short_host()}.{os.getpid()}.{n}{TEMP_SUFFIX}")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is an in-progress (or abandoned) write; listings should skip it."""
    return _TEMP_RE.match(name) is not None


def atomic_write(
    path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any], mode: int = 0o666
) -> int:
    """Write a file so that it appears complete under ``path`` or not at all.

    ``write`` gets a binary file object open on a temporary file in the same
    directory (same file system, so the final ``os.replace`` is atomic).  The
    data is flushed and fsynced before the rename: after a power cut the file
    is either whole or absent.  On any error the temporary file is removed and
    the error re-raised.  ``mode`` is the new file's permission (before the
    umask; 0o600 for files that hold secrets).  Returns the number of bytes written.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(final)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(final.parent)
    return size


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not possible (nor needed) on Windows.
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by somebody else
        return True
    except OSError:
        return True
    return True


def clean_stale_temps(directory: str | os.PathLike[str], *, now: float | None = None) -> list[Path]:
    """Remove temp files left in ``directory`` by writers that died mid-write.

    A temp file of this host is stale when its process is gone.  Others
    (another host sharing the directory, or platforms without a cheap
    liveness check) are left alone until a day old.  Returns what was removed.
    """
    d = Path(directory)
    now = time.time() if now is None else now
    host = short_host()
    removed: list[Path] = []
    try:
        entries = list(d.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP_RE.match(entry.name)
        if m is None:
            continue
        try:
            if m["host"] == host and os.name == "posix":
                pid = int(m["pid"])
                stale = pid != os.getpid() and not _pid_alive(pid)
            else:
                stale = now - entry.stat().st_mtime > _STALE_AFTER_S
            if stale:
                entry.unlink()
                removed.append(entry)
        except OSError:
            continue
    return removed


def vramscope_version() -> str:
    """The installed vramscope version, or a placeholder when running from a checkout."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("vramscope")
        except PackageNotFoundError:
            return "0+unknown"
    except Exception:
        return "0+unknown"


def alloc_conf_from_env(env: Mapping[str, str] | None = None) -> str:
    """The allocator configuration string the process started with ("" when unset)."""
    env = os.environ if env is None else env
    return env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_ALLOC_CONF") or ""


def build_sidecar(
    *,
    name: str,
    reason: str,
    memory_stats: Mapping[str, Any],
    torch_version: str,
    gpu: str | None,
    device: int | None,
    alloc_conf: str,
    snapshot: Mapping[str, Any] | None = None,
    oom: Mapping[str, Any] | None = None,
    recording: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
    when: float | None = None,
) -> dict[str, Any]:
    """The sidecar dict for one snapshot; pure, so it is testable without CUDA.

    Key names match the project's reference snapshots (``name``, ``torch``,
    ``gpu``, ``alloc_conf``, ``memory_stats``, ``oom_request``,
    ``oom_device_alloc``, ``oom_device_free``, ``oom_message``).
    ``memory_stats`` is the full ``torch.cuda.memory_stats(device)`` dict taken
    right after the snapshot, so the viewer can check its own figures
    against the allocator's.  ``oom`` holds the ``oom_*`` fields of an OOM
    dump; ``snapshot`` (the snapshot dict) adds counts and the allocator
    settings torch recorded in it.
    """
    if reason not in REASONS:
        raise ValueError(f"reason must be one of {REASONS}, not {reason!r}")
    when = time.time() if when is None else when
    env = os.environ if env is None else env
    data: dict[str, Any] = {
        "name": name,
        "vramscope_version": vramscope_version(),
        "torch": torch_version,
        "gpu": gpu,
        "device": device,
        "alloc_conf": alloc_conf,
        "reason": reason,
        "time": _dt.datetime.fromtimestamp(when).astimezone().isoformat(timespec="milliseconds"),
        "unix_time": round(when, 3),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        **dist_info(env),
        "argv": list(sys.argv if argv is None else argv),
        "recording": dict(recording) if recording is not None else None,
        "memory_stats": dict(memory_stats),
    }
    if snapshot is not None:
        data.update(snapshot_summary(snapshot, device))
    if oom:
        data.update(oom)
    if extra:
        data.update(extra)
    return data


def snapshot_summary(snapshot: Mapping[str, Any], device: int | None) -> dict[str, Any]:
    """Counts and settings read off a snapshot dict, for the sidecar."""
    segments = snapshot.get("segments") or []
    traces = snapshot.get("device_traces") or []
    if device is not None:
        segments = [s for s in segments if s.get("device", device) == device]
        n_trace = len(traces[device]) if 0 <= device < len(traces) else 0
    else:
        n_trace = sum(len(t) for t in traces)
    summary: dict[str, Any] = {
        "n_segments": len(segments),
        "n_trace": n_trace,
        "keys": sorted(snapshot.keys()),
    }
    settings = snapshot.get("allocator_settings")
    if settings is not None:
        summary["allocator_settings"] = settings
    return summary


def sidecar_bytes(data: Mapping[str, Any]) -> bytes:
    # default=str: a stray non-JSON value (a torch.device, a numpy int) must
    # not cost the user the whole sidecar.
    return (json.dumps(data, indent=1, sort_keys=False, default=str) + "\n").encode("utf-8")


def write_sidecar(path: str | os.PathLike[str], data: Mapping[str, Any]) -> Path:
    """Write the sidecar JSON atomically; returns its path."""
    p = Path(path)
    payload = sidecar_bytes(data)
    atomic_write(p, lambda f: f.write(payload))
    return p


def update_sidecar(path: str | os.PathLike[str], **fields: Any) -> None:
    """Add ``fields`` to an existing sidecar, atomically (e.g. the OOM message, known later)."""
    p = Path(path)
    data = json.loads(p.read_text(encoding="utf-8"))
    data.update(fields)
    write_sidecar(p, data)
