"""A connection to one live agent (``vramscope.capture.serve()`` in a process).

Blocking calls with timeouts, meant for a worker thread (the GUI's poller)
or the command line.  Every failure is an :class:`AttachError` with one line.
Payloads are pickles made by the agent; they are decoded here with the same
restricted unpickler as snapshot files, so a hostile process posing as an
agent can at worst send data that is refused.
"""

from __future__ import annotations

import itertools
import socket
from dataclasses import dataclass
from typing import Any

from vramscope.viewer import live_protocol as proto

from ..core.errors import SnapshotError
from ..io.safe_pickle import safe_loads
from . import remote

CONNECT_TIMEOUT_S = 5.0
#: A full snapshot of a big ring buffer takes the agent a while to build.
REPLY_TIMEOUT_S = 120.0


class AttachError(Exception):
    """Cannot attach or talk to the agent; the message is one line."""


@dataclass
class Reply:
    header: dict[str, Any]
    payload: bytes

    def decoded(self) -> Any:
        """The payload through the restricted unpickler (None when empty)."""
        if not self.payload:
            return None
        try:
            return safe_loads(self.payload)
        except SnapshotError as exc:
            raise AttachError(f"the agent sent data that is not a plain snapshot: {exc}") from None


class LiveClient:
    """One connection; :meth:`request` sends one request and reads its reply."""

    def __init__(
        self,
        endpoint: str,
        token: str | None = None,
        *,
        max_payload: int = proto.MAX_RESPONSE_PAYLOAD,
    ) -> None:
        self.endpoint = endpoint
        self.token = token
        self.max_payload = max_payload
        self.sock: socket.socket | None = None
        self.hello: dict[str, Any] = {}
        self._ids = itertools.count(1)

    def connect(self, timeout: float = CONNECT_TIMEOUT_S) -> dict[str, Any]:
        """Connect and say hello; returns the agent's hello reply."""
        try:
            kind, addr = proto.parse_endpoint(self.endpoint)
        except ValueError as exc:
            raise AttachError(str(exc)) from None
        fam = socket.AF_UNIX if kind == "unix" else socket.AF_INET
        if kind == "unix" and not hasattr(socket, "AF_UNIX"):
            raise AttachError("Unix sockets are not available on this system")
        sock = socket.socket(fam, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(addr)
        except FileNotFoundError:
            sock.close()
            raise AttachError(
                f"{self.endpoint}: no agent is listening (the process ended?)"
            ) from None
        except (ConnectionRefusedError, socket.timeout) as exc:
            sock.close()
            what = "timed out" if isinstance(exc, socket.timeout) else "refused"
            raise AttachError(f"{self.endpoint}: connection {what} (the process ended?)") from None
        except OSError as exc:
            sock.close()
            raise AttachError(f"{self.endpoint}: {exc.strerror or exc}") from None
        self.sock = sock
        fields: dict[str, Any] = {"client": "vramscope"}
        if self.token:
            fields["token"] = self.token
        reply = self.request("hello", timeout=timeout, **fields)
        self.hello = reply.header
        return reply.header

    def request(self, op: str, *, timeout: float = REPLY_TIMEOUT_S, **fields: Any) -> Reply:
        if self.sock is None:
            raise AttachError("not connected")
        header = {"op": op, "id": next(self._ids), **fields}
        try:
            proto.send(self.sock, header)
            reply, payload = proto.recv(
                self.sock,
                max_payload=self.max_payload,
                expect_kind=proto.KIND_RESPONSE,
                idle_timeout=timeout,
                deadline_s=timeout,
            )
        except proto.PeerClosed:
            self.close()
            raise AttachError("the agent closed the connection (the process ended?)") from None
        except proto.ProtocolError as exc:
            self.close()
            raise AttachError(f"bad reply from the agent: {exc}") from None
        except OSError as exc:
            self.close()
            raise AttachError(f"connection lost: {exc.strerror or exc}") from None
        if not reply.get("ok", False):
            raise AttachError(f"the agent refused {op}: {reply.get('error', 'no reason given')}")
        return Reply(reply, payload)

    def close(self) -> None:
        if self.sock is not None:
            try:
                proto.send(self.sock, {"op": "bye"})
            except OSError:
                pass
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    @property
    def connected(self) -> bool:
        return self.sock is not None

    def __enter__(self) -> "LiveClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def resolve_target(target: str) -> tuple[str, str | None, dict[str, Any] | None]:
    """A PID or an endpoint -> (endpoint, token, registry entry or None).

    Raises AttachError (one line) for a PID without a live agent.  A remote target
    ``ssh://[user@]host[:port]/PID`` is found there and forwarded here
    (:mod:`.remote`): its endpoint is the local end of the forwarding.
    """
    if remote.is_remote(target):
        try:
            return remote.resolve(target)
        except remote.RemoteError as exc:
            raise AttachError(str(exc)) from None
    if target.isdigit():
        pid = int(target)
        entry = proto.find_entry(pid)
        if entry is None:
            if not proto.pid_alive(pid):
                raise AttachError(f"no process {pid}")
            raise AttachError(f"process {pid} has no vramscope agent; opt in with: {proto.OPT_IN}")
        return str(entry.get("endpoint", "")), entry.get("token"), entry
    for entry in proto.read_registry():
        if entry.get("endpoint") == target:  # a TCP agent's token comes from its entry
            return target, entry.get("token"), entry
    return target, None, None


def connect(target: str) -> LiveClient:
    """Connect to a PID (through the registry) or an endpoint; AttachError otherwise."""
    endpoint, token, _entry = resolve_target(target)
    client = LiveClient(endpoint, token)
    client.connect()
    return client
