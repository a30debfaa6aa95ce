"""Live agents on another machine, reached through the user's own ``ssh``.

A remote live target is ``ssh://[user@]host[:port]/PID``.  Everything runs through
the OpenSSH client (:class:`~..io.remote.SshHost`: ``BatchMode=yes``, the user's keys
and config, ``VRAMSCOPE_SSH`` / ``VRAMSCOPE_SSH_CONFIG``):

* discovery - one ``sh -c`` script over ssh prints, for every registry file in the
  directories an agent may use there (``$VRAMSCOPE_RUNTIME_DIR``,
  ``$XDG_RUNTIME_DIR/vramscope``, ``${TMPDIR:-/tmp}/vramscope-$(id -u)``, and
  ``$VRAMSCOPE_REMOTE_RUNTIME_DIR`` given here), the directory's ``ls -ldn`` line (it
  must be ours and 0700, as locally), the file and ``/proc/PID/stat`` (is the process
  still the one that wrote it?), then ``nvidia-smi``'s CSV.  Nothing of vramscope
  needs to be installed there for it, not even Python.
* attaching - ``ssh -M -S CTL -N -o ExitOnForwardFailure=yes -L LOCAL:REMOTE`` forwards
  a Unix socket in a fresh 0700 temp dir here to the agent's socket there (or to its
  127.0.0.1 port); the client connects to it as to a local agent, with the agent's
  token from its registry file.  The agent's own checks (socket mode, peer uid) are
  unchanged: sshd connects as the user who logged in.  The ssh process is a
  connection master (``CTL``), so NVML figures (``nvidia-smi``) and "is the process
  still there" ride on it without a new login.
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from vramscope.viewer import live_protocol as proto

from ..io.remote import RemoteError, SshHost, describe_failure, is_remote, run, split_url
from . import nvml

ENV_REMOTE_RUNTIME_DIR = "VRAMSCOPE_REMOTE_RUNTIME_DIR"
FORWARD_TIMEOUT_S = 20.0
_ENTRY, _STAT, _DIR, _GPUS, _APPS, _NO_SMI = (
    "@@vs-entry ",
    "@@vs-stat",
    "@@vs-dir ",
    "@@vs-gpus",
    "@@vs-apps",
    "@@vs-no-nvidia-smi",
)
_NVIDIA_SMI = (
    "nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total,memory.used,"
    "memory.free --format=csv,noheader,nounits 2>/dev/null; echo " + _APPS + "; "
    "nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory "
    "--format=csv,noheader,nounits 2>/dev/null"
)
_NVML_SCRIPT = (
    "if command -v nvidia-smi >/dev/null 2>&1; then echo "
    + _GPUS
    + "; "
    + _NVIDIA_SMI
    + "; else echo "
    + _NO_SMI
    + "; fi"
)


def _discovery_script(extra_dir: str | None) -> str:
    # No single quotes and no backslashes: the script travels as sh -c '...' through
    # whatever login shell the user has there.
    dirs = [
        '"$VRAMSCOPE_RUNTIME_DIR"',
        '"${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/vramscope}"',
        '"${TMPDIR:-/tmp}/vramscope-$(id -u)"',
    ]
    if extra_dir:
        dirs.insert(0, '"' + extra_dir.replace('"', "").replace("$", "").replace("`", "") + '"')
    return (
        f"for d in {' '.join(dirs)}; do "
        '[ -n "$d" ] && [ -d "$d" ] || continue; '
        f'echo "{_DIR}$(id -u) $d"; ls -ldn "$d"; '
        'for f in "$d"/agent-*.json; do [ -f "$f" ] || continue; '
        "p=${f##*/agent-}; p=${p%.json}; "
        f'echo "{_ENTRY}$f"; head -c 65536 "$f"; echo; echo {_STAT}; '
        'cat "/proc/$p/stat" 2>/dev/null; echo; done; done; ' + _NVML_SCRIPT
    )


# --------------------------------------------------------------------------- targets
def parse_target(text: str) -> tuple[SshHost, int]:
    """``ssh://[user@]host[:port]/PID`` -> (host, pid); ValueError with one line."""
    host, rest = split_url(text)
    if not rest.isdigit():
        raise ValueError(f"{text}: expected ssh://[user@]host[:port]/PID")
    return host, int(rest)


def make_target(host: SshHost, pid: int) -> str:
    return f"{host.url()}/{pid}"


def is_remote_target(text: str) -> bool:
    try:
        parse_target(text)
    except ValueError:
        return False
    return is_remote(text)


# --------------------------------------------------------------------------- discovery
@dataclass
class RemoteListing:
    entries: list[dict[str, Any]]  # live agents' registry entries, oldest first
    nvml: nvml.NvmlInfo


def _start_ticks(stat_line: str) -> int | None:
    try:
        return int(stat_line[stat_line.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def _private(ls_line: str, uid: str) -> bool:
    parts = ls_line.split()
    return (
        len(parts) > 3
        and parts[0].startswith("d")
        and parts[0][4:10] == "------"
        and parts[2] == uid
    )


def parse_listing(text: str, host: str = "") -> RemoteListing:
    """The discovery script's output -> live entries and NVML figures (pure; tested)."""
    lines = text.split("\n")
    entries: dict[str, dict[str, Any]] = {}
    i, private = 0, False
    gpu_lines: list[str] | None = None
    app_lines: list[str] = []
    smi_error = f"nvidia-smi is not available on {host or 'the host'}"
    while i < len(lines):
        line = lines[i]
        if line.startswith(_DIR):
            uid = line[len(_DIR) :].split(" ", 1)[0]
            private = i + 1 < len(lines) and _private(lines[i + 1], uid)
            i += 2
            continue
        if line.startswith(_ENTRY):
            path = line[len(_ENTRY) :]
            j = i + 1
            body = []
            while j < len(lines) and lines[j] != _STAT:
                body.append(lines[j])
                j += 1
            stat_line = lines[j + 1] if j + 1 < len(lines) else ""
            i = j + 2
            if not private or path in entries:
                continue  # a directory open to others could hold planted sockets
            try:
                entry = json.loads("\n".join(body))
            except (ValueError, RecursionError):
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("pid"), int):
                continue
            if not stat_line.strip():
                continue  # the process is gone
            ticks = entry.get("start_ticks")
            now = _start_ticks(stat_line)
            if isinstance(ticks, int) and now is not None and now != ticks:
                continue  # the pid was reused
            entry["registry_file"] = path
            entries[path] = entry
            continue
        if line == _GPUS:
            gpu_lines = []
            i += 1
            while i < len(lines) and lines[i] != _APPS:
                if lines[i].strip():
                    gpu_lines.append(lines[i])
                i += 1
            i += 1
            while i < len(lines):
                if lines[i].strip():
                    app_lines.append(lines[i])
                i += 1
            continue
        i += 1
    found = sorted(entries.values(), key=lambda e: (e.get("start_time") or 0, e.get("pid") or 0))
    return RemoteListing(found, parse_nvidia_smi(gpu_lines, app_lines, smi_error))


def parse_nvidia_smi(
    gpu_lines: list[str] | None, app_lines: list[str], missing: str
) -> nvml.NvmlInfo:
    """``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV (MiB) -> NvmlInfo."""
    if gpu_lines is None:
        return nvml.NvmlInfo([], missing)
    mib = 1 << 20
    devices: dict[str, nvml.GpuDevice] = {}
    try:
        for line in gpu_lines:
            idx, bus, name, total, used, free = [p.strip() for p in line.split(",")][:6]
            devices[bus.lower()] = nvml.GpuDevice(
                int(idx), name, int(total) * mib, int(used) * mib, int(free) * mib
            )
        for line in app_lines:
            bus, pid, used = [p.strip() for p in line.split(",")][:3]
            dev = devices.get(bus.lower())
            if dev is not None:
                dev.processes.append(
                    nvml.GpuProcess(
                        int(pid), int(used) * mib if used.isdigit() else None, dev.index
                    )
                )
    except ValueError:
        return nvml.NvmlInfo(
            sorted(devices.values(), key=lambda d: d.index),
            "nvidia-smi's answer was not understood",
        )
    if not devices:
        return nvml.NvmlInfo([], "nvidia-smi found no GPU")
    return nvml.NvmlInfo(sorted(devices.values(), key=lambda d: d.index))


def _control(host: SshHost) -> list[str]:
    """ssh options reusing a tunnel's connection to ``host``, if one is up."""
    with _lock:
        for t in _tunnels.values():
            if t.host == host and t.alive():
                return ["-o", "ControlMaster=no", "-S", t.control]
    return []


def list_remote(host: SshHost) -> RemoteListing:
    """The live agents (and GPU figures) there; RemoteError with one line."""
    script = _discovery_script(os.environ.get(ENV_REMOTE_RUNTIME_DIR))
    out = run(host, "sh -c " + shlex.quote(script), *_control(host))
    return parse_listing(out, host.destination)


def query_nvml(host: SshHost) -> nvml.NvmlInfo:
    """The remote GPUs' figures through nvidia-smi (never raises)."""
    try:
        out = run(host, "sh -c " + shlex.quote(_NVML_SCRIPT), *_control(host), timeout=20)
    except RemoteError as exc:
        return nvml.NvmlInfo([], str(exc))
    return parse_listing(out, host.destination).nvml


def pid_alive(host: SshHost, pid: int) -> bool | None:
    """Whether ``pid`` runs there (None: cannot tell, e.g. the host is unreachable)."""
    try:
        script = f"kill -0 {int(pid)} 2>/dev/null && echo yes; true"
        out = run(host, "sh -c " + shlex.quote(script), *_control(host), timeout=20)
    except RemoteError:
        return None
    return out.strip() == "yes"


# --------------------------------------------------------------------------- tunnels
class Tunnel:
    """``ssh -N -L`` from a Unix socket here (0700 temp dir) to an agent's endpoint there."""

    def __init__(self, host: SshHost, remote_endpoint: str) -> None:
        self.host = host
        self.remote_endpoint = remote_endpoint
        self.dir = tempfile.mkdtemp(prefix="vramscope-ssh-")  # 0700
        self.local = os.path.join(self.dir, "agent.sock")
        self.control = os.path.join(self.dir, "ctl")
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"unix:{self.local}"

    def start(self, timeout: float = FORWARD_TIMEOUT_S) -> "Tunnel":
        try:
            kind, addr = proto.parse_endpoint(self.remote_endpoint)
        except ValueError as exc:
            raise RemoteError(str(exc)) from None
        target = addr if kind == "unix" else f"{addr[0]}:{addr[1]}"
        cmd = self.host.command(
            None,
            "-N",
            "-M",
            "-S",
            self.control,
            "-o",
            "ControlPersist=no",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "StreamLocalBindUnlink=yes",
            "-a",
            "-x",
            "-L",
            f"{self.local}:{target}",
        )
        err = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
            )
        except FileNotFoundError:
            err.close()
            self.close()
            raise RemoteError(f"cannot run {cmd[0]!r}: the OpenSSH client is needed") from None
        deadline = time.monotonic() + timeout
        try:
            while not os.path.exists(self.local):
                code = self.proc.poll()
                if code is not None:
                    err.seek(0)
                    text = err.read(64 << 10).decode("utf-8", "replace")
                    self.close()
                    raise RemoteError(describe_failure(self.host, text, code))
                if time.monotonic() > deadline:
                    self.close()
                    raise RemoteError(
                        f"ssh {self.host.destination}: the forwarding to "
                        f"{self.remote_endpoint} did not come up in {timeout:.0f} s"
                    )
                time.sleep(0.02)
        finally:
            err.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and os.path.exists(self.local)

    def close(self) -> None:
        p, self.proc = self.proc, None
        if p is not None:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_lock = threading.Lock()
_tunnels: dict[str, Tunnel] = {}  # live target -> its tunnel


def resolve(target: str) -> tuple[str, str | None, dict[str, Any] | None]:
    """``ssh://host/PID`` -> (local endpoint, token, the remote registry entry).

    Finds the agent there, then opens (or reuses) the forwarding; AttachError-like
    failures are :class:`RemoteError` (one line)."""
    try:
        host, pid = parse_target(target)
    except ValueError as exc:
        raise RemoteError(str(exc)) from None
    listing = list_remote(host)
    entry = next((e for e in listing.entries if e.get("pid") == pid), None)
    if entry is None:
        alive = pid_alive(host, pid)
        if alive is False:
            raise RemoteError(f"no process {pid} on {host.destination}")
        raise RemoteError(
            f"process {pid} on {host.destination} has no vramscope agent "
            f"(opt in with: {proto.OPT_IN})"
        )
    remote_endpoint = str(entry.get("endpoint") or "")
    with _lock:
        t = _tunnels.get(target)
        if t is not None and (not t.alive() or t.remote_endpoint != remote_endpoint):
            _tunnels.pop(target)
            t.close()
            t = None
    if t is None:
        t = Tunnel(host, remote_endpoint).start()
        with _lock:
            old = _tunnels.pop(target, None)
            _tunnels[target] = t
        if old is not None:
            old.close()
    return t.endpoint, entry.get("token"), entry


def release(target: str) -> None:
    """Close the forwarding of ``target`` (the session ended)."""
    with _lock:
        t = _tunnels.pop(target, None)
    if t is not None:
        t.close()


@atexit.register
def _close_all() -> None:
    """No forwarding outlives the viewer that opened it (a normal exit)."""
    with _lock:
        left = list(_tunnels.values())
        _tunnels.clear()
    for t in left:
        t.close()


def host_of(target: str) -> SshHost:
    return parse_target(target)[0]
