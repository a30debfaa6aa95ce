"""The live-attach wire protocol, shared by the agent (capture) and the viewer.

Stdlib only (no numpy, no torch, no Qt): the capture side imports this one
viewer module inside the training process, and the frozen viewer ships it
without the capture side (``tests/test_architecture.py`` enforces both).

A message is a 16-byte frame header, a JSON object, and an opaque payload::

    magic  b"VSLA"   4 bytes
    version          1 byte   (PROTOCOL_VERSION)
    kind             1 byte   (0 request, 1 response)
    reserved         2 bytes  (0)
    json_len         4 bytes  big-endian, <= MAX_JSON
    payload_len      4 bytes  big-endian, <= the receiver's limit

Requests carry no payload: the agent only ever parses bounded JSON, never a
pickle.  Responses carry a pickle of plain builtin objects (segments, trace
entries, snapshots) that the viewer decodes with its restricted unpickler.

Discovery: every agent writes ``agent-<pid>.json`` into :func:`runtime_dir`
(a 0700 directory of the user), next to its Unix socket ``agent-<pid>.sock``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
MAGIC = b"VSLA"
KIND_REQUEST = 0
KIND_RESPONSE = 1
FRAME = struct.Struct(">4sBBHII")
MAX_JSON = 64 * 1024
#: Requests never need a payload; anything bigger is hostile.
MAX_REQUEST_PAYLOAD = 0
#: A full snapshot with a big ring buffer is ~100 MB; leave room, but bounded.
MAX_RESPONSE_PAYLOAD = 1 << 30
#: Once a message has started, all of it must arrive within this (slowloris).
MESSAGE_DEADLINE_S = 5.0

OPS = ("hello", "stats", "trace", "snapshot", "options", "bye")

ENV_RUNTIME_DIR = "VRAMSCOPE_RUNTIME_DIR"
REGISTRY_PREFIX = "agent-"
REGISTRY_SUFFIX = ".json"
SOCKET_SUFFIX = ".sock"
#: Unix socket paths are limited to 108 bytes (104 on macOS).
MAX_UNIX_PATH = 100

OPT_IN = (
    "python -m vramscope.capture --live train.py  (or call vramscope.capture.serve() in the script)"
)


class ProtocolError(Exception):
    """A malformed, oversized, too slow or unauthorised message (one line)."""


class PeerClosed(ProtocolError):
    """The other side closed the connection cleanly between messages."""


# --------------------------------------------------------------------------- frames
def encode(header: dict[str, Any], payload: bytes = b"", *, kind: int = KIND_REQUEST) -> bytes:
    """One message as bytes; raises ProtocolError if the JSON part is too large."""
    body = json.dumps(header, separators=(",", ":"), default=str).encode("utf-8")
    if len(body) > MAX_JSON:
        raise ProtocolError(f"message header too large ({len(body)} bytes)")
    return FRAME.pack(MAGIC, PROTOCOL_VERSION, kind, 0, len(body), len(payload)) + body + payload


def send(
    sock: socket.socket, header: dict[str, Any], payload: bytes = b"", *, kind: int = KIND_REQUEST
) -> None:
    data = encode(header, payload, kind=kind)
    sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, deadline: float, started: bool) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProtocolError("message too slow (deadline passed)")
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except socket.timeout:
            raise ProtocolError("message too slow (deadline passed)") from None
        if not chunk:
            if not buf and not started:
                raise PeerClosed("connection closed")
            raise ProtocolError("connection closed in the middle of a message")
        buf += chunk
    return bytes(buf)


def recv(
    sock: socket.socket,
    *,
    max_payload: int,
    expect_kind: int,
    idle_timeout: float | None = None,
    deadline_s: float = MESSAGE_DEADLINE_S,
) -> tuple[dict[str, Any], bytes]:
    """Read one message: (header dict, payload bytes).

    Waits up to ``idle_timeout`` seconds (None: forever) for the first byte,
    then the whole message must arrive within ``deadline_s``.  Sizes are
    checked before anything is allocated.
    """
    sock.settimeout(idle_timeout)
    try:
        first = sock.recv(1)
    except socket.timeout:
        raise ProtocolError("idle timeout") from None
    if not first:
        raise PeerClosed("connection closed")
    deadline = time.monotonic() + deadline_s
    head = first + _recv_exact(sock, FRAME.size - 1, deadline, True)
    magic, version, kind, _reserved, json_len, payload_len = FRAME.unpack(head)
    if magic != MAGIC:
        raise ProtocolError("not a vramscope live message (bad magic)")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {version} is not supported (this side speaks {PROTOCOL_VERSION})"
        )
    if kind != expect_kind:
        raise ProtocolError(f"unexpected message kind {kind}")
    if json_len > MAX_JSON:
        raise ProtocolError(f"message header too large ({json_len} bytes)")
    if payload_len > max_payload:
        raise ProtocolError(f"message payload too large ({payload_len} bytes, limit {max_payload})")
    # Big payloads legitimately take longer than the small-message deadline.
    deadline += payload_len / (20 << 20)
    body = _recv_exact(sock, json_len, deadline, True)
    try:
        header = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ProtocolError("message header is not valid JSON") from None
    if not isinstance(header, dict):
        raise ProtocolError("message header is not a JSON object")
    payload = _recv_exact(sock, payload_len, deadline, True) if payload_len else b""
    return header, payload


# --------------------------------------------------------------------------- endpoints
def parse_endpoint(text: str) -> tuple[str, Any]:
    """``unix:/path`` -> ("unix", path); ``tcp:127.0.0.1:PORT`` -> ("tcp", (host, port)).

    Only loopback TCP addresses are accepted: the agent never listens
    elsewhere, and the viewer never sends a token elsewhere.
    """
    if text.startswith("unix:"):
        return "unix", text[5:]
    if text.startswith("tcp:"):
        host, _, port = text[4:].rpartition(":")
        if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
            raise ValueError(f"{text}: only loopback addresses are allowed")
        try:
            return "tcp", (host.strip("[]"), int(port))
        except ValueError:
            raise ValueError(f"{text}: bad port") from None
    if text.startswith("/") or text.endswith(SOCKET_SUFFIX):
        return "unix", text
    raise ValueError(f"{text}: not an endpoint (unix:/path or tcp:127.0.0.1:PORT)")


# --------------------------------------------------------------------------- runtime dir
def _uid() -> int | None:
    getuid = getattr(os, "getuid", None)
    return getuid() if getuid is not None else None


def runtime_dir(create: bool = True) -> Path:
    """The per-user directory for sockets and registry files (0700, owned by us).

    ``$VRAMSCOPE_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/vramscope``, else
    ``<tempdir>/vramscope-<uid>``.  A directory that exists but belongs to
    someone else, or is readable by others, is refused (ValueError): another
    user could otherwise plant a socket there.
    """
    override = os.environ.get(ENV_RUNTIME_DIR)
    if override:
        d = Path(override)
    else:
        xdg = os.environ.get("XDG_RUNTIME_DIR")
        if xdg and os.path.isdir(xdg):
            d = Path(xdg) / "vramscope"
        else:
            owner = _uid() if _uid() is not None else "user"
            d = Path(tempfile.gettempdir()) / f"vramscope-{owner}"
    if create:
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot create {d}: {exc.strerror or exc}") from None
    check_private_dir(d)
    return d


def check_private_dir(d: Path) -> None:
    """ValueError unless ``d`` (if it exists) is ours and closed to others (POSIX)."""
    if os.name != "posix" or not d.exists():
        return
    st = d.lstat()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{d} is not a plain directory; refusing to use it")
    if st.st_uid != _uid():
        raise ValueError(f"{d} belongs to another user; refusing to use it")
    if st.st_mode & 0o077:
        raise ValueError(
            f"{d} is accessible to other users (mode {st.st_mode & 0o777:o}); refusing to use it"
        )


def registry_path(pid: int, directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / f"{REGISTRY_PREFIX}{pid}{REGISTRY_SUFFIX}"


def socket_path(pid: int, directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / f"{REGISTRY_PREFIX}{pid}{SOCKET_SUFFIX}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (ours or not)."""
    if pid <= 0 or pid >= 1 << 31:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except (PermissionError, OSError):
        return True
    return True


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), to detect pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        rest = data[data.rindex(b")") + 2 :].split()
        return int(rest[19])
    except (ValueError, IndexError):
        return None


def entry_is_live(entry: dict[str, Any]) -> bool:
    """A registry entry whose process still runs (and is the same process)."""
    pid = entry.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    ticks = entry.get("start_ticks")
    if isinstance(ticks, int) and sys.platform.startswith("linux"):
        now = process_start_ticks(pid)
        if now is not None and now != ticks:
            return False  # the pid was reused by another process
    return True


def read_registry(directory: Path | None = None, *, clean: bool = True) -> list[dict[str, Any]]:
    """Every live agent's registry entry, oldest first; stale ones removed when ``clean``."""
    try:
        d = directory or runtime_dir(create=False)
        if not d.is_dir():
            return []
        check_private_dir(d)
        paths = sorted(d.glob(f"{REGISTRY_PREFIX}*{REGISTRY_SUFFIX}"))
    except (OSError, ValueError):
        return []
    found = []
    for p in paths:
        try:
            if p.stat().st_size > MAX_JSON:
                continue
            entry = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(entry, dict):
            continue
        if not entry_is_live(entry):
            if clean:
                remove_entry_files(p)
            continue
        entry["registry_file"] = str(p)
        found.append(entry)
    found.sort(key=lambda e: (e.get("start_time") or 0, e.get("pid") or 0))
    return found


def remove_entry_files(registry_file: Path) -> None:
    """Remove a registry file and the socket beside it (missing files are fine)."""
    sock = registry_file.with_suffix(SOCKET_SUFFIX)
    for p in (registry_file, sock):
        try:
            p.unlink()
        except OSError:
            pass


def find_entry(pid: int, directory: Path | None = None) -> dict[str, Any] | None:
    for entry in read_registry(directory):
        if entry.get("pid") == pid:
            return entry
    return None
