"""The agent's listening socket: local only, bounded, never in the way.

* Endpoint: a Unix socket ``agent-<pid>.sock`` in the per-user 0700 runtime
  directory, mode 0600, and on Linux the peer's uid is checked
  (``SO_PEERCRED``).  Where ``AF_UNIX`` does not exist: 127.0.0.1 TCP on a
  random port, and the first message must carry the random token kept in
  the user-only registry file.  Never any other address.
* Limits: at most ``max_connections`` clients at a time (more are closed at
  once); a client must say hello within :data:`HELLO_TIMEOUT_S`; once a
  message starts it must complete within the protocol's deadline
  (slowloris); sizes are checked before reading (oversized length prefix);
  request payloads must be empty.  A client breaking a rule is disconnected
  and the rejection is logged (rate-limited: a hostile client cannot flood
  the training job's stderr).
* Threads: one daemon thread accepts (woken by a socket pair to stop), one
  daemon thread per client.  Waiting on sockets releases the GIL, so idle
  clients cost the training loop nothing.
"""

from __future__ import annotations

import hmac
import os
import secrets
import selectors
import socket
import struct
import threading
from pathlib import Path
from typing import Any, Callable

from vramscope.viewer import live_protocol as proto

from .. import messages

HELLO_TIMEOUT_S = 5.0
MESSAGE_DEADLINE_S = proto.MESSAGE_DEADLINE_S
IDLE_TIMEOUT_S = 600.0
SEND_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 8

Handler = Callable[[dict[str, Any]], tuple[dict[str, Any], bytes]]


class RejectLog:
    """Rate-limited log of rejected clients (the first few, then every 100th)."""

    def __init__(self, first: int = 5) -> None:
        self.first = first
        self.count = 0
        self.lock = threading.Lock()
        self.reasons: list[str] = []  # the last few, for hello / tests

    def __call__(self, reason: str) -> None:
        with self.lock:
            self.count += 1
            n = self.count
            self.reasons = (self.reasons + [reason])[-20:]
        if n <= self.first or n % 100 == 0:
            messages.warn(f"live agent: rejected a client ({reason}); {n} rejected so far")


class Server:
    """Serve ``handler`` on a local endpoint from daemon threads."""

    def __init__(
        self,
        handler: Handler,
        directory: Path,
        *,
        use_unix: bool | None = None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.handler = handler
        self.directory = directory
        self.use_unix = hasattr(socket, "AF_UNIX") if use_unix is None else use_unix
        self.max_connections = max_connections
        self.token: str | None = None
        self.endpoint = ""
        self.rejects = RejectLog()
        self.served = 0
        self._slots = threading.BoundedSemaphore(max_connections)
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._clients: set[socket.socket] = set()
        self._clients_lock = threading.Lock()
        self.socket_file: Path | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> str:
        if self.use_unix:
            path = proto.socket_path(os.getpid(), self.directory)
            if len(os.fsencode(path)) > proto.MAX_UNIX_PATH:
                raise OSError(f"socket path too long: {path}")
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)  # the socket file is created 0600, no window
            try:
                lst.bind(os.fspath(path))
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            self.socket_file = path
            self.endpoint = f"unix:{path}"
        else:
            lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            lst.bind(("127.0.0.1", 0))  # loopback only, never 0.0.0.0
            self.token = secrets.token_hex(32)
            self.endpoint = f"tcp:127.0.0.1:{lst.getsockname()[1]}"
        lst.listen(16)
        lst.setblocking(False)
        self._listener = lst
        self._thread = threading.Thread(
            target=self._accept_loop, name="vramscope-live-accept", daemon=True
        )
        self._thread.start()
        return self.endpoint

    def close(self) -> None:
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        with self._clients_lock:
            clients = list(self._clients)
        for c in clients:
            _close(c)
        if self._listener is not None:
            _close(self._listener)
        for s in (self._wake_r, self._wake_w):
            _close(s)
        if self.socket_file is not None:
            try:
                self.socket_file.unlink()
            except OSError:
                pass

    # ------------------------------------------------------------------ threads
    def _accept_loop(self) -> None:
        sel = selectors.DefaultSelector()
        assert self._listener is not None
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r or self._stop.is_set():
                        return
                    self._accept_one()
        except Exception as exc:  # never into the user's program
            messages.warn(f"live agent: the listener stopped: {type(exc).__name__}: {exc}")
        finally:
            sel.close()

    def _accept_one(self) -> None:
        assert self._listener is not None
        try:
            conn, _addr = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            messages.warn(f"live agent: accept failed: {exc}")
            return
        conn.setblocking(True)
        if not self._slots.acquire(blocking=False):
            self.rejects(f"more than {self.max_connections} connections")
            _close(conn)
            return
        if self.use_unix and not self._peer_is_us(conn):
            self._slots.release()
            self.rejects("a process of another user")
            _close(conn)
            return
        with self._clients_lock:
            self._clients.add(conn)
        t = threading.Thread(
            target=self._serve_client, args=(conn,), daemon=True, name="vramscope-live-client"
        )
        t.start()

    def _peer_is_us(self, conn: socket.socket) -> bool:
        opt = getattr(socket, "SO_PEERCRED", None)
        if opt is None:
            return True  # the 0700 directory and 0600 socket already keep others out
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
        except OSError:
            return False
        return uid == os.getuid()

    def _serve_client(self, conn: socket.socket) -> None:
        try:
            self._talk(conn)
        except proto.PeerClosed:
            pass
        except proto.ProtocolError as exc:
            self.rejects(str(exc))
        except OSError:
            pass  # the viewer went away mid-reply: nothing to do
        except Exception as exc:
            messages.warn(f"live agent: {type(exc).__name__}: {exc}")
        finally:
            with self._clients_lock:
                self._clients.discard(conn)
            _close(conn)
            self._slots.release()

    def _talk(self, conn: socket.socket) -> None:
        header, _ = proto.recv(
            conn,
            max_payload=proto.MAX_REQUEST_PAYLOAD,
            expect_kind=proto.KIND_REQUEST,
            idle_timeout=HELLO_TIMEOUT_S,
            deadline_s=MESSAGE_DEADLINE_S,
        )
        if header.get("op") != "hello":
            raise proto.ProtocolError("the first request must be hello")
        if self.token is not None:
            given = header.get("token")
            if not isinstance(given, str) or not hmac.compare_digest(given, self.token):
                self._reply(conn, {"ok": False, "error": "bad or missing token"})
                raise proto.ProtocolError("bad or missing token")
        while not self._stop.is_set():
            reply, payload = self._handle(header)
            self._reply(conn, reply, payload)
            if header.get("op") == "bye":
                return
            header, _ = proto.recv(
                conn,
                max_payload=proto.MAX_REQUEST_PAYLOAD,
                expect_kind=proto.KIND_REQUEST,
                idle_timeout=IDLE_TIMEOUT_S,
                deadline_s=MESSAGE_DEADLINE_S,
            )

    def _handle(self, header: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        op = header.get("op")
        if op not in proto.OPS:
            self.rejects(f"unknown request {str(op)[:40]!r}")
            return {"ok": False, "error": f"unknown request {str(op)[:40]!r}"}, b""
        try:
            reply, payload = self.handler(header)
        except Exception as exc:  # a bug or a torch error: an answer, never a crash
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}, b""
        self.served += 1
        if "id" in header:
            reply["id"] = header["id"]
        return reply, payload

    def _reply(self, conn: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
        conn.settimeout(SEND_TIMEOUT_S)
        proto.send(conn, header, payload, kind=proto.KIND_RESPONSE)


def _close(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass
