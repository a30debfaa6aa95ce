"""Snapshots on another machine, read through the user's own OpenSSH client.

``ssh://[user@]host[:port]/path/to/snapshot.pickle`` names a file on a server: every
byte comes through an ``ssh`` subprocess (the user's keys, agent, ``~/.ssh/config``,
jump hosts), never through an SSH implementation of ours.  Two commands run there::

    stat -L -c %s:%Y:%F -- PATH && head -c 16777216 -- SIDECAR.json 2>/dev/null
    sh -c 'p=PATH; ...; exec xz -T0 -1 -c -- "$p"'     (or zstd, gzip, cat)

the first gives the size (the progress bar), the mtime (the cache key), the type and
the capture's JSON sidecar beside the file, if any; the second streams the bytes,
compressed on the wire by the first of zstd, xz and gzip that the remote ``sh`` finds
(``command -v``) and this side can decode (zstd only with a Python zstd module here);
a file that is already compressed (magic bytes read there with ``head -c``) and a host
without any of them send the file as it is (``cat``).  The stream is decompressed here
as it arrives, so the file's bytes reach the parser exactly as a local read's would.
``VRAMSCOPE_REMOTE_COMPRESS`` narrows the choice (``xz,gzip``; ``none``: never).

:func:`run_there` runs a vramscope command on the remote host instead, when vramscope
of this very version is installed there, and brings back only its output.

``PATH`` is quoted with :func:`shlex.quote` (``ssh://host/~/x`` is ``~/x``, relative
to the remote home).  The bytes go through :func:`.load.load_bytes`, the same safe
decoder as a local file's (never ``pickle.load``); the columns are cached like a local
file's (:mod:`.cache`), keyed by host, path, size and mtime.  Cancel kills ``ssh``.

``ssh`` always runs with ``-o BatchMode=yes``: a host that wants a password (or an
unknown host key) fails with one line saying what to set up, it never prompts.
``VRAMSCOPE_SSH`` replaces the ``ssh`` command line (``shlex`` split, e.g.
``ssh -F /path/config -i key``); ``VRAMSCOPE_SSH_CONFIG`` is passed as ``-F``.
Errors are :class:`RemoteError` (a :class:`SnapshotError`): one line.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import select
import shlex
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from ..core.errors import LoadCancelled, SnapshotError
from ..core.progress import Progress, ProgressCallback
from ..core.snapshot import Snapshot
from . import cache
from .load import load_bytes, load_snapshot

SCHEME = "ssh://"
ENV_SSH = "VRAMSCOPE_SSH"
ENV_SSH_CONFIG = "VRAMSCOPE_SSH_CONFIG"
CONNECT_TIMEOUT_S = 15
CHUNK = 1 << 20
#: How often a blocked read looks at the cancel event.
POLL_S = 0.1
SIDECAR_MAX_BYTES = 16 << 20
#: ssh's own failures (cannot connect, refused, ...) exit with this code.
SSH_FAILED = 255

#: (file bytes received, file size, bytes that crossed the wire: fewer when compressed)
BytesCallback = Callable[[int, int, int], None]
ENV_COMPRESS = "VRAMSCOPE_REMOTE_COMPRESS"
#: Compressors tried on the remote host, best first: (name, test that it runs, command).
#: zstd and xz use every core there; level 1-3 keeps a 1 GB pickle ahead of a fast link.
COMPRESSORS = (
    ("zstd", "command -v zstd", 'zstd -q -c -3 -T0 -- "$p"'),
    ("xz", "xz -T0 -1 -c </dev/null", 'xz -T0 -1 -c -- "$p"'),
    ("gzip", "command -v gzip", 'gzip -1 -c -- "$p"'),
)
#: The first bytes of gzip, xz, bz2 and zstd files (hex, as ``od -An -tx1`` prints them):
#: such a file crosses the wire as it is.
COMPRESSED_MAGIC = ("1f8b*", "fd377a585a00*", "425a68*", "28b52ffd*")
#: Exit codes of :func:`run_there`'s script: no vramscope there, another version there.
NOT_INSTALLED = 97
OTHER_VERSION = 98


class RemoteError(SnapshotError):
    """ssh could not run the command, or the remote side refused it (one line)."""


def is_remote(text: object) -> bool:
    """Whether ``text`` is an ``ssh://`` address (a file, a host or a live target)."""
    return isinstance(text, str) and text.startswith(SCHEME)


@dataclass(frozen=True)
class SshHost:
    """Where ssh connects: ``[user@]host[:port]`` (host may be an alias of ~/.ssh/config)."""

    host: str
    user: str | None = None
    port: int | None = None

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port else ""
        user = f"{self.user}@" if self.user else ""
        return f"{SCHEME}{user}{host}{port}"

    def command(self, remote: str | None, *options: str, batch: bool = True) -> list[str]:
        """The ssh command line running ``remote`` there (None: no command, e.g. ``-N``)."""
        base = shlex.split(os.environ.get(ENV_SSH) or "ssh")
        cmd = [*base]
        if batch:
            # Never prompt (no terminal to prompt on in the GUI; a hung CLI otherwise).
            cmd += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
        config = os.environ.get(ENV_SSH_CONFIG)
        if config:
            cmd += ["-F", config]
        if self.port:
            cmd += ["-p", str(self.port)]
        if self.user:
            cmd += ["-l", self.user]
        cmd += [*options, "--", self.host]
        if remote is not None:
            cmd.append(remote)
        return cmd


@dataclass(frozen=True)
class RemotePath:
    host: SshHost
    path: str  # as the remote shell should see it: absolute, or ~/... (home)

    def url(self) -> str:
        return self.host.url() + ("/" if self.path.startswith("~") else "") + self.path

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def quoted(self) -> str:
        """The path for the remote shell: quoted, ``~`` left to expand."""
        if self.path == "~":
            return "~"
        if self.path.startswith("~/"):
            return "~/" + shlex.quote(self.path[2:])
        return shlex.quote(self.path)


def split_url(text: str) -> tuple[SshHost, str]:
    """``ssh://[user@]host[:port][/rest]`` -> (host, rest without its first ``/``).

    The rest is taken literally (no %-decoding).  ValueError with one line if malformed.
    """
    if not is_remote(text):
        raise ValueError(f"{text}: not an ssh:// address")
    authority, _slash, rest = text[len(SCHEME) :].partition("/")
    user, at, hostport = authority.rpartition("@")
    if not at:
        user = ""
    port: int | None = None
    if hostport.startswith("["):  # [IPv6]:port
        host, bracket, tail = hostport[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise ValueError(f"{text}: malformed [IPv6] host")
        port_text = tail[1:]
    else:
        host, _, port_text = hostport.partition(":")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{text}: bad port {port_text!r}")
        port = int(port_text)
    bad = any(c.isspace() or ord(c) < 32 for c in host + user)
    if not host or bad or host.startswith("-") or user.startswith("-"):
        raise ValueError(f"{text}: bad host name")
    return SshHost(host, user or None, port), rest


def parse_host(text: str) -> SshHost:
    """``ssh://[user@]host[:port]`` (a trailing ``/`` allowed); ValueError otherwise."""
    host, rest = split_url(text)
    if rest:
        raise ValueError(f"{text}: expected ssh://[user@]host[:port] without a path")
    return host


def parse_url(text: str) -> RemotePath:
    """``ssh://[user@]host[:port]/path``: ``/abs`` or ``/~/rel``; RemoteError otherwise."""
    try:
        host, rest = split_url(text)
    except ValueError as exc:
        raise RemoteError(str(exc)) from None
    if not rest:
        raise RemoteError(f"{text}: no file path (ssh://[user@]host[:port]/path/to/file)")
    path = rest if rest == "~" or rest.startswith("~/") else "/" + rest
    if "\0" in path or "\n" in path:
        raise RemoteError(f"{text}: bad file path")
    return RemotePath(host, path)


# --------------------------------------------------------------------------- errors
def describe_failure(host: SshHost, stderr: str, returncode: int) -> str:
    """ssh's stderr as one line a user can act on."""
    lines = [
        ln.strip()
        for ln in stderr.splitlines()
        if ln.strip() and not ln.startswith(("Warning: Permanently added", "**"))
    ]
    text = " ".join(lines)
    dest = host.destination
    low = text.lower()
    if "permission denied" in low and returncode == SSH_FAILED:
        methods = text[text.find("(") : text.find(")") + 1] if "(" in text else ""
        return (
            f"ssh {dest}: permission denied {methods}: vramscope never asks for a "
            "password (ssh runs with BatchMode=yes); set up a key for this host "
            f"(ssh-copy-id {dest}) or load yours into ssh-agent"
        ).replace("  ", " ")
    if "host key verification failed" in low or "no host key is known" in low:
        return (
            f"ssh {dest}: the host key is not known yet: run `ssh {dest}` once in a "
            "terminal to check and accept it"
        )
    if "remote host identification has changed" in low:
        return f"ssh {dest}: the host key has CHANGED (see `ssh {dest}` in a terminal)"
    if returncode == SSH_FAILED:
        last = lines[-1] if lines else f"ssh failed (exit {returncode})"
        return f"ssh {dest}: {last.removeprefix('ssh: ')}"
    return f"{dest}: {lines[-1] if lines else f'the remote command failed (exit {returncode})'}"


def _remote_file_error(stderr: str) -> str | None:
    """A stat/cat failure on the remote side as load_snapshot words it locally."""
    low = stderr.lower()
    if "no such file" in low:
        return "no such file"
    if "permission denied" in low:
        return "permission denied"
    if "is a directory" in low:
        return "it is a directory, not a snapshot file"
    return None


def run_command(
    host: SshHost, remote: str, *options: str, timeout: float = 60.0
) -> tuple[int, str, str]:
    """Run ``remote`` there: (exit code, stdout, stderr); RemoteError if ssh cannot start."""
    cmd = host.command(remote, "-o", "ClearAllForwardings=yes", "-a", "-x", *options)
    try:
        r = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            errors="replace",
        )
    except FileNotFoundError:
        raise RemoteError(
            f"cannot run {cmd[0]!r}: the OpenSSH client is needed (or set {ENV_SSH})"
        ) from None
    except subprocess.TimeoutExpired:
        raise RemoteError(f"ssh {host.destination}: no answer within {timeout:.0f} s") from None
    return r.returncode, r.stdout, r.stderr


def run(host: SshHost, remote: str, *options: str, timeout: float = 60.0) -> str:
    """Run ``remote`` there and return its stdout (text); RemoteError with one line."""
    code, out, err = run_command(host, remote, *options, timeout=timeout)
    if code != 0:
        raise RemoteError(describe_failure(host, err, code))
    return out


# --------------------------------------------------------------------------- files
@dataclass(frozen=True)
class RemoteStat:
    size: int
    mtime: int
    kind: str


def sidecar_path(path: str) -> str:
    """The capture sidecar's path beside a snapshot (as :func:`.load.read_sidecar`)."""
    directory, _, name = path.rpartition("/")
    for suffix in (".xz", ".gz", ".bz2"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    stem = name[: -len(".pickle")] if name.endswith(".pickle") else name.rsplit(".", 1)[0]
    return f"{directory}/{stem}.json" if directory else f"{stem}.json"


def stat(rp: RemotePath) -> tuple[RemoteStat, dict | None]:
    """Size, mtime and type of the remote file, and its capture sidecar (one round trip).

    GNU stat (Linux: GPU servers); BSD stat as a fallback, without the sidecar."""
    q = rp.quoted()
    side = None if rp.path.endswith(".json") else RemotePath(rp.host, sidecar_path(rp.path))
    probe = f"stat -L -c %s:%Y:%F -- {q}"
    if side is not None:
        probe += f" && head -c {SIDECAR_MAX_BYTES} -- {side.quoted()} 2>/dev/null"
    code, out, err = run_command(rp.host, probe)
    first, _, rest = out.partition("\n")
    if not first[:1].isdigit():
        if code == SSH_FAILED:
            raise RemoteError(describe_failure(rp.host, err, code))
        if "illegal option" in err or "invalid option" in err or "unrecognized" in err:
            first, rest = run(rp.host, f"stat -L -f %z:%m:%HT -- {q}"), ""  # macOS, BSD
        else:
            raise RemoteError(_remote_file_error(err) or describe_failure(rp.host, err, code))
    size, _, tail = first.strip().partition(":")
    mtime, _, kind = tail.partition(":")
    if not size.isdigit() or not mtime.isdigit():
        raise RemoteError(
            f"{rp.host.destination}: unexpected answer from stat: {first.strip()[:80]!r}"
        )
    kind = kind.strip().lower()
    if "directory" in kind:
        raise RemoteError("it is a directory, not a snapshot file")
    if "regular" not in kind:
        raise RemoteError(f"it is not a regular file ({kind})")
    sidecar = None
    if rest.strip():
        try:
            obj = json.loads(rest)
            sidecar = obj if isinstance(obj, dict) else None
        except (ValueError, RecursionError):
            sidecar = None
    return RemoteStat(int(size), int(mtime), kind), sidecar


def cache_key(rp: RemotePath, st: RemoteStat) -> str:
    """The column cache's key of a remote file: host, path, size and mtime."""
    h = rp.host
    ident = (
        f"v{cache.CACHE_VERSION}:ssh:{h.user or ''}@{h.host}:{h.port or ''}:{rp.path}:"
        f"{st.size}:{st.mtime}"
    )
    return "ssh-" + hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:36]


def _zstd_decompressor() -> Any | None:
    """A streaming zstd decoder if this Python has a zstd module, else None."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

        return zstd.ZstdDecompressor()
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        return None
    return zstandard.ZstdDecompressor().decompressobj()


def local_codecs() -> list[str]:
    """The wire compressions this side can decode, best first (the remote picks among
    them); narrowed by ``VRAMSCOPE_REMOTE_COMPRESS`` (``none``: raw bytes only)."""
    names = [
        name for name, _, _ in COMPRESSORS if name != "zstd" or _zstd_decompressor() is not None
    ]
    wanted = os.environ.get(ENV_COMPRESS)
    if wanted is not None:
        allowed = {w.strip() for w in wanted.split(",")}
        names = [n for n in names if n in allowed]
    return names


def stream_script(rp: RemotePath, codecs: list[str]) -> str:
    """The ``sh`` script that sends the file: a first line naming the encoding
    (``raw`` or a compressor), then the bytes."""
    lines = [
        f"p={rp.quoted()}",
        'm=$(head -c 6 -- "$p" 2>/dev/null | od -An -tx1 | tr -d " \\n")',
        f'case $m in {"|".join(COMPRESSED_MAGIC)}) printf "raw\\n"; exec cat -- "$p";; esac',
    ]
    for name, probe, command in COMPRESSORS:
        if name in codecs:
            lines.append(f'if {probe} >/dev/null 2>&1; then printf "{name}\\n"; exec {command}; fi')
    lines.append('printf "raw\\n"; exec cat -- "$p"')
    return "\n".join(lines)


class _WireDecoder:
    """The stream's encoding undone chunk by chunk (raw: as is)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "gzip":
            self._d: Any = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif kind == "xz":
            self._d = lzma.LZMADecompressor()
        elif kind == "zstd":
            self._d = _zstd_decompressor()
        else:
            self._d = None

    def feed(self, chunk: bytes) -> bytes:
        if self._d is None:
            return chunk
        try:
            return self._d.decompress(chunk)
        except (zlib.error, lzma.LZMAError, ValueError, OSError) as exc:
            raise RemoteError(f"the {self.kind} stream from the host is corrupt: {exc}") from None


def fetch(
    rp: RemotePath,
    size: int,
    progress: Progress | None = None,
    on_bytes: BytesCallback | None = None,
) -> bytes:
    """The remote file's bytes, streamed through ssh (compressed on the wire when the
    host has a compressor this side can decode, see :func:`stream_script`).

    ``progress`` gets ("read", file bytes/size); its cancel event kills ssh at once
    (even while nothing arrives) and raises :class:`LoadCancelled`.
    ``on_bytes(done, size, wire)`` is told every chunk: file bytes so far, and the bytes
    that crossed the wire for them.
    """
    progress = progress or Progress()
    codecs = local_codecs()
    script = stream_script(rp, codecs)
    cmd = rp.host.command(
        f"sh -c {shlex.quote(script)}", "-o", "ClearAllForwardings=yes", "-a", "-x"
    )
    err = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, bufsize=0
        )
    except FileNotFoundError:
        err.close()
        raise RemoteError(
            f"cannot run {cmd[0]!r}: the OpenSSH client is needed (or set {ENV_SSH})"
        ) from None
    chunks: list[bytes] = []
    done = wire = 0
    head = b""
    decoder: _WireDecoder | None = None
    try:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while True:
            if progress.cancel_event.is_set():
                raise LoadCancelled()
            ready, _, _ = select.select([fd], [], [], POLL_S)
            if not ready:
                continue
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            wire += len(chunk)
            if decoder is None:  # the first line names the encoding
                head += chunk
                line, newline, chunk = head.partition(b"\n")
                if not newline:
                    if len(head) > 64:
                        raise RemoteError("unexpected answer from the host's sh")
                    continue
                kind = line.decode("ascii", "replace").strip()
                if kind not in ("raw", *codecs):
                    raise RemoteError(f"unexpected answer from the host's sh: {kind[:40]!r}")
                decoder = _WireDecoder(kind)
            data = decoder.feed(chunk)
            if not data:
                continue
            chunks.append(data)
            done += len(data)
            if done > size:  # the file grew, or a stream that is not the file
                raise RemoteError(
                    f"the file changed while it was read (more than its {size} bytes arrived)"
                )
            progress.update("read", done / size if size else 1.0)
            if on_bytes is not None:
                on_bytes(done, size, wire)
        code = proc.wait()
        if code != 0:
            err.seek(0)
            text = err.read(64 << 10).decode("utf-8", "replace")
            raise RemoteError(_remote_file_error(text) or describe_failure(rp.host, text, code))
    finally:
        if proc.poll() is None:  # cancelled or failed half-way: ssh goes, the remote cat or
            proc.kill()  # compressor gets SIGPIPE/SIGHUP when sshd closes its channel
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        err.close()
    if done < size:
        raise RemoteError(f"the transfer ended early ({done} of {size} bytes)")
    return b"".join(chunks)


@dataclass(frozen=True)
class RemoteRun:
    """A command that ran on the remote host: its exit code and output, the file's path
    as the command there saw it, and the bytes that crossed the wire."""

    code: int
    stdout: bytes
    stderr: bytes
    path_there: str
    wire: int


def run_there(rp: RemotePath, argv: list[str], file_index: int, version: str) -> RemoteRun | None:
    """Run ``vramscope ARGV`` on the remote host, ``argv[file_index]`` replaced by the
    remote file's path, when vramscope ``version`` (exactly this one: another version may
    answer otherwise) is installed there, as ``vramscope`` or ``python3 -m
    vramscope.viewer``.  None when it is not, or when ssh itself failed: the caller then
    reads the file through :func:`load_remote` instead."""
    if not version or "unknown" in version:
        return None  # nothing to compare with: never trust the remote's answer
    words = [shlex.quote(a) if i != file_index else '"$p"' for i, a in enumerate(argv)]
    lines = [
        f"p={rp.quoted()}",
        "if command -v vramscope >/dev/null 2>&1; then set -- vramscope",
        "elif python3 -c 'import vramscope.viewer' >/dev/null 2>&1; then "
        "set -- python3 -m vramscope.viewer",
        f"else exit {NOT_INSTALLED}; fi",
        f'[ "$("$@" --version 2>/dev/null)" = {shlex.quote("vramscope " + version)} ] '
        f"|| exit {OTHER_VERSION}",
    ]
    if os.environ.get("VRAMSCOPE_NO_CACHE", "") not in ("", "0"):
        lines.append("VRAMSCOPE_NO_CACHE=1; export VRAMSCOPE_NO_CACHE")
    lines += ['printf "%s\\n" "$p"', f'exec "$@" {" ".join(words)}']
    cmd = rp.host.command(
        f"sh -c {shlex.quote(chr(10).join(lines))}", "-o", "ClearAllForwardings=yes", "-a", "-x"
    )
    try:
        r = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return None
    if r.returncode in (NOT_INSTALLED, OTHER_VERSION, SSH_FAILED):
        return None
    path, newline, out = r.stdout.partition(b"\n")
    if not newline:
        return None  # it never got as far as running the command
    return RemoteRun(
        r.returncode,
        out,
        r.stderr,
        path.decode("utf-8", "surrogateescape"),
        len(r.stdout) + len(r.stderr),
    )


def load_remote(
    url: str,
    progress: Progress | ProgressCallback | None = None,
    use_cache: bool | None = None,
    on_bytes: BytesCallback | None = None,
) -> Snapshot:
    """Load ``ssh://[user@]host[:port]/path`` like :func:`load_snapshot` loads a file."""
    progress = progress if isinstance(progress, Progress) else Progress(progress)
    rp = parse_url(url)
    st, sidecar = stat(rp)
    if use_cache is None:
        use_cache = os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0")
    key = cache_key(rp, st) if use_cache else None
    snap = cache.load_cached(key) if key else None
    if snap is None:
        raw = fetch(rp, st.size, progress, on_bytes)
        snap = load_bytes(raw, progress)
        del raw
        if key:
            cache.store(key, snap)
    progress.update("columns", 1.0)
    snap.path = url
    snap.sidecar = sidecar
    return snap


def load_any(
    path: str | os.PathLike,
    progress: Progress | ProgressCallback | None = None,
    use_cache: bool | None = None,
) -> Snapshot:
    """:func:`load_remote` for an ``ssh://`` address, else :func:`load_snapshot`."""
    if is_remote(path):
        return load_remote(str(path), progress, use_cache)
    return load_snapshot(path, progress, use_cache)
