"""Parse a big snapshot in a forked child while this process imports numpy and Qt.

A cold start pays for imports (~0.1 s for ``vramscope summary``: numpy and the
model; ~0.45 s for the window: PySide6, pyqtgraph) and for the compiled parse
(~0.2 s a million events), one after the other: the parser holds the GIL all
along, so a thread cannot overlap them.  On Linux the CLI therefore forks,
before any thread exists and before numpy is imported, a child that loads only
the compiled parser (from its file, without the model package or numpy),
parses the file and hands the answer back through an anonymous memory file
(``memfd``): the parser's few Python objects (the snapshot dict without its
trace, frames, strings) as :mod:`marshal` data written by our own child, then
the raw trace columns.  :func:`vramscope.viewer.model.load.load_snapshot`
claims it for that file and maps the columns copy-on-write (no second copy).

Results are those of an in-process parse by construction: the child runs the
same parser over the same bytes and answers with ``snapparse.parse``'s tuple,
which the loader interprets exactly as its own.  Anything unusual - no memfd,
a child that dies, a value marshal refuses, a file replaced meanwhile - and
the loader parses in-process as before.  Progress comes through a pipe;
cancelling kills the child, and its memory goes with it.  Stdlib only: this
module runs before numpy is imported.
"""

from __future__ import annotations

import os
import stat
import struct
import sys

MIN_BYTES = 4 << 20  # below this the parse is shorter than a fork and a handover
_MAGIC = b"VRAMSCOPE-AHEAD1"
_HEADER = struct.Struct("<16sQ")
_ALIGN = 64
_PROGRESS = struct.Struct("<d")
_DISABLE_ENV = "VRAMSCOPE_NO_PARSE_AHEAD"
_pending: dict[str, "Ahead"] = {}


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _extension_file() -> str | None:
    """The compiled parser's file (``model/_native/snapparse.<ext>``), if built."""
    from importlib.machinery import EXTENSION_SUFFIXES

    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model", "_native")
    for suffix in EXTENSION_SUFFIXES:
        candidate = os.path.join(folder, "snapparse" + suffix)
        if os.path.isfile(candidate):
            return candidate
    return None


def start(path: str | os.PathLike, use_cache: bool = True) -> bool:
    """Fork the parse of ``path`` when it helps; True when a child is working on it.

    Only on Linux, only before numpy or any thread exists in this process, only
    for an uncompressed binary pickle of at least :data:`MIN_BYTES` whose columns
    are not cached (``use_cache=False``: whatever the cache holds), and never with
    ``VRAMSCOPE_PURE_PYTHON=1`` or ``VRAMSCOPE_NO_PARSE_AHEAD=1``.
    """
    env = os.environ.get
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")
            and hasattr(os, "memfd_create")):
        return False
    if env("VRAMSCOPE_PURE_PYTHON", "") not in ("", "0") or env(_DISABLE_ENV, "") not in ("", "0"):
        return False
    # numpy starts BLAS threads; forking a threaded process is unsafe (and too late).
    threading = sys.modules.get("threading")
    if "numpy" in sys.modules or (threading is not None and threading.active_count() > 1):
        return False
    try:
        path = os.path.abspath(os.fspath(path))
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size < MIN_BYTES:
            return False
        with open(path, "rb") as f:
            if f.read(1) != b"\x80":  # PROTO: a binary pickle (compressed/JSON/text: in-process)
                return False
    except (OSError, ValueError):
        return False
    extension = _extension_file()
    if extension is None or path in _pending:
        return False
    try:
        memfd = os.memfd_create("vramscope-parse", os.MFD_CLOEXEC)
    except OSError:
        return False
    try:
        rfd, wfd = os.pipe()
    except OSError:
        os.close(memfd)
        return False
    try:
        pid = os.fork()
    except OSError:
        for fd in (memfd, rfd, wfd):
            os.close(fd)
        return False
    if pid == 0:  # the child: never returns into the CLI
        code = 1
        try:
            os.close(rfd)
            code = _child(path, extension, memfd, wfd)
        finally:
            os._exit(code)
    os.close(wfd)
    ahead = Ahead(pid, memfd, rfd)
    # The cache is looked up after the fork (hashing the file's head and tail takes a few
    # ms the child need not wait for); on a hit the child is stopped at once.
    if use_cache and env("VRAMSCOPE_NO_CACHE", "") in ("", "0"):
        from . import file_identity

        key = file_identity.column_key(path)
        if key is not None and os.path.exists(file_identity.column_entry(key)):
            ahead.discard()  # mapping the cached columns is faster than any parse
            return False
    _pending[path] = ahead
    return True


def claim(path: str | os.PathLike) -> "Ahead | None":
    """The parse started for ``path``, handed to the caller (once), or None."""
    if not _pending:
        return None
    return _pending.pop(os.path.abspath(os.fspath(path)), None)


def _child(path: str, extension: str, memfd: int, wfd: int) -> int:
    """Parse ``path`` with the extension at ``extension``; write the answer to ``memfd``."""
    import gc
    import marshal
    from importlib.machinery import ExtensionFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    gc.disable()  # as fast_pickle: few objects, all acyclic
    name = "vramscope.viewer.model._native.snapparse"
    parser = module_from_spec(spec_from_loader(name, ExtensionFileLoader(name, extension)))
    os.set_blocking(wfd, False)

    def progress(fraction: float) -> None:
        try:
            os.write(wfd, _PROGRESS.pack(fraction))
        except BlockingIOError:
            pass  # the parent is busy importing: it only needs the latest value

    with open(path, "rb") as f:
        ident = _identity(os.fstat(f.fileno()))
        answer = parser.parse(f.readinto, ident[2], progress)
    columns = []
    if answer[0] == "ok" and answer[2] is not None:
        native = dict(answer[2])
        cols = native.pop("columns")
        columns = [(name, cols[name]) for name in cols]
        del cols
        layout = [(name, memoryview(col).nbytes) for name, col in columns]
        payload = (ident, "ok", answer[1], native, layout)
    else:
        payload = (ident, *answer)
    del answer
    try:
        blob = marshal.dumps(payload, 4)  # one call: shared frame dicts stay shared
    except (ValueError, RecursionError):
        blob = marshal.dumps((ident, "fallback", "a value the parse-ahead cannot hand over"), 4)
        columns = []
    del payload
    _write_all(memfd, _HEADER.pack(_MAGIC, len(blob)) + blob)
    at = _HEADER.size + len(blob)
    while columns:
        name, col = columns.pop(0)
        pad = -at % _ALIGN
        if pad:
            _write_all(memfd, b"\0" * pad)
            at += pad
        view = memoryview(col).cast("B")
        _write_all(memfd, view)
        at += view.nbytes
        del view, col  # each column's memory goes as soon as it is written
    return 0


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view.nbytes:
        view = view[os.write(fd, view):]


class Ahead:
    """A parse running in a forked child (see the module docstring)."""

    def __init__(self, pid: int, memfd: int, rfd: int) -> None:
        self.pid, self.memfd, self.rfd = pid, memfd, rfd

    def answer(self, update=None, path: str | os.PathLike | None = None) -> tuple | None:
        """Wait for the child; its answer, shaped as ``snapparse.parse``'s, or None
        (parse in-process instead).  ``update(fraction)`` gets the parse's progress
        and is called at least every 50 ms; whatever it raises (a cancel) kills the
        child first.  With ``path``, an answer about another file than the one now
        at ``path`` is refused (None)."""
        try:
            code = self._wait(update)
            if code != 0:
                return None
            return self._read(path)
        except BaseException:
            self.discard()
            raise
        finally:
            self._close()

    def discard(self) -> None:
        """Stop the child (if still running) and free what it holds."""
        if self.pid:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (OSError, ChildProcessError):
                pass
            self.pid = 0
        self._close()

    def _wait(self, update) -> int:
        import select

        last, pending = 0.0, b""
        while True:
            ready, _, _ = select.select([self.rfd], [], [], 0.05)
            if ready:
                data = os.read(self.rfd, 1 << 16)
                if not data:
                    break  # the child exited (or closed the pipe): reap it
                pending += data
                whole = len(pending) - len(pending) % _PROGRESS.size
                if whole:
                    (last,) = _PROGRESS.unpack_from(pending, whole - _PROGRESS.size)
                    pending = pending[whole:]
            if update is not None:
                update(last)
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        return os.waitstatus_to_exitcode(status)

    def _read(self, path) -> tuple | None:
        import marshal
        import mmap

        size = os.fstat(self.memfd).st_size
        if size < _HEADER.size:
            return None
        # Copy-on-write: writable columns, as the parser's own buffers are.
        mm = mmap.mmap(self.memfd, size, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
        magic, length = _HEADER.unpack_from(mm)
        if magic != _MAGIC or _HEADER.size + length > size:
            return None
        # Our own child wrote it, into a file with no name: nothing else can.
        try:
            payload = marshal.loads(mm[_HEADER.size:_HEADER.size + length])
            ident, kind = payload[0], payload[1]
        except (ValueError, EOFError, TypeError, IndexError):
            return None
        if path is not None:
            try:
                if _identity(os.stat(path)) != ident:
                    return None  # the file changed since: parse what is there now
            except OSError:
                return None
        if kind != "ok" or len(payload) == 4:  # an error, a fallback, or no trace
            return tuple(payload[1:])
        _, _, obj, native, layout = payload
        at, view, columns = _HEADER.size + length, memoryview(mm), {}
        for name, nbytes in layout:
            at += -at % _ALIGN
            if at + nbytes > size:
                return None
            columns[name] = view[at:at + nbytes]
            at += nbytes
        native["columns"] = columns
        return ("ok", obj, native)

    def _close(self) -> None:
        for attr in ("memfd", "rfd"):
            fd = getattr(self, attr)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, attr, -1)
