"""Parse a big snapshot on a thread while this process imports numpy and Qt.

A cold start pays for imports (~0.1-0.3 s for ``vramscope summary``: numpy and
the model; ~0.45 s for the window: PySide6, pyqtgraph) and for the compiled
parse.  The parse of a big file is mostly its device traces, which the compiled
parser splits into regions parsed by C threads with the GIL released
(``_native/snapparse_src/sections.c``), so a plain Python thread started before
the imports overlaps them: :func:`start` loads only the compiled parser (from its
file, without the model package or numpy), maps the file (``MAP_POPULATE``: one
pass in the kernel instead of a page fault per 4 KiB) and parses it on a daemon
thread.  :func:`vramscope.viewer.model.load.load_snapshot` claims the answer for
that file; it is ``snapparse.parse``'s own tuple, interpreted exactly as an
in-process parse's.  No fork, no copy: the columns the parser wrote are the ones
the snapshot uses.

Anything unusual - no compiled parser, a file replaced meanwhile, a thread that
fails - and the loader parses again as before.  Progress comes from the
parser's callback; a cancel makes that callback raise, which stops the parse.
Stdlib only: this module runs before numpy is imported.
"""

from __future__ import annotations

import os
import stat
import sys
import threading

MIN_BYTES = 4 << 20  # below this the parse is shorter than starting a thread
_DISABLE_ENV = "VRAMSCOPE_NO_PARSE_AHEAD"
THREADS_ENV = "VRAMSCOPE_PARSE_THREADS"
MAX_THREADS = 32
SECTION_MIN_EVENTS = 65536  # shorter device traces: one thread (tests lower it)
_pending: dict[str, "Ahead"] = {}


def stamp(stage: str) -> None:
    """Note when a start-up stage ended (``time.perf_counter``, the clock the benchmark's
    launcher shares) in the file ``VRAMSCOPE_STAGE_LOG`` names, if set: the per-stage
    breakdown of ``make bench`` for whole processes.  Costs nothing when unset."""
    log = os.environ.get("VRAMSCOPE_STAGE_LOG")
    if log:
        import time

        try:
            with open(log, "a", encoding="ascii") as f:
                f.write(f"{stage} {time.perf_counter():.6f}\n")
        except OSError:
            pass


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def parse_threads() -> int:
    """How many threads the compiled parser may use: the cores this process may run
    on (at most :data:`MAX_THREADS`), or ``VRAMSCOPE_PARSE_THREADS``."""
    forced = os.environ.get(THREADS_ENV, "")
    if forced.isdigit() and int(forced) > 0:
        return min(int(forced), 256)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


def map_file(f, threads: int = 1):
    """A read-only map of the open file ``f``, or None where it cannot be mapped.  For
    a parse on few threads its pages are mapped at once (Linux: ``MAP_POPULATE``, one
    pass in the kernel instead of a page fault every 4 KiB); on more, the parser's
    threads map their own stretches in parallel."""
    import mmap

    try:
        if threads < 4 and hasattr(mmap, "MAP_POPULATE") and hasattr(mmap, "MAP_SHARED"):
            return mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
                             prot=mmap.PROT_READ)
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, OverflowError):
        return None


def _extension_file() -> str | None:
    """The compiled parser's file (``model/_native/snapparse.<ext>``), if built."""
    from importlib.machinery import EXTENSION_SUFFIXES

    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model", "_native")
    for suffix in EXTENSION_SUFFIXES:
        candidate = os.path.join(folder, "snapparse" + suffix)
        if os.path.isfile(candidate):
            return candidate
    return None


def _parser(extension: str):
    """The compiled parser module, loaded under its package name (``sys.modules``
    shares it with a later ``import``; the model package and numpy stay unloaded)."""
    name = "vramscope.viewer.model._native.snapparse"
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    from importlib.machinery import ExtensionFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    spec = spec_from_loader(name, ExtensionFileLoader(name, extension))
    mod = module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def start(path: str | os.PathLike, use_cache: bool = True) -> bool:
    """Start parsing ``path`` on a thread; True when one is working on it.

    Only for an uncompressed binary pickle of at least :data:`MIN_BYTES` whose
    columns are not cached (``use_cache=False``: whatever the cache holds), with
    the compiled parser built, and never with ``VRAMSCOPE_PURE_PYTHON=1`` or
    ``VRAMSCOPE_NO_PARSE_AHEAD=1``.
    """
    env = os.environ.get
    if env("VRAMSCOPE_PURE_PYTHON", "") not in ("", "0") or env(_DISABLE_ENV, "") not in ("", "0"):
        return False
    try:
        path = os.path.abspath(os.fspath(path))
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size < MIN_BYTES:
            return False
        with open(path, "rb") as f:
            if f.read(1) != b"\x80":  # PROTO: a binary pickle (compressed/JSON/text: later)
                return False
    except (OSError, ValueError):
        return False
    extension = _extension_file()
    if extension is None or path in _pending:
        return False
    if use_cache and env("VRAMSCOPE_NO_CACHE", "") in ("", "0"):
        from . import file_identity

        key = file_identity.column_key(path)
        if key is not None and os.path.exists(file_identity.column_entry(key)):
            return False  # mapping the cached columns is faster than any parse
    ahead = Ahead(path, extension)
    _pending[path] = ahead
    stamp("parse_start")
    ahead.thread.start()
    return True


def claim(path: str | os.PathLike) -> "Ahead | None":
    """The parse started for ``path``, handed to the caller (once), or None."""
    if not _pending:
        return None
    return _pending.pop(os.path.abspath(os.fspath(path)), None)


class _Cancelled(Exception):
    """Raised by the progress callback to stop a parse nobody waits for any more."""


class Ahead:
    """A parse running on a daemon thread (see the module docstring)."""

    def __init__(self, path: str, extension: str) -> None:
        self.path, self.extension = path, extension
        self.fraction = 0.0
        self.result: tuple | None = None
        self.ident: tuple | None = None
        self.error: BaseException | None = None
        self.cancelled = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="vramscope-parse", daemon=True)

    def _progress(self, fraction: float) -> None:
        self.fraction = fraction
        if self.cancelled:
            raise _Cancelled()

    def _run(self) -> None:
        try:
            parser = _parser(self.extension)
            with open(self.path, "rb") as f:
                self.ident = _identity(os.fstat(f.fileno()))
                threads = parse_threads()
                mapped = map_file(f, threads)
                if mapped is None:
                    return
                try:
                    self.result = parser.parse(mapped, -1, self._progress, threads,
                                               SECTION_MIN_EVENTS)
                finally:
                    mapped.close()
        except BaseException as exc:  # noqa: BLE001 - the loader parses again and reports
            self.error = exc
        finally:
            stamp("parse_done")
            self.done.set()

    def answer(self, update=None, path: str | os.PathLike | None = None) -> tuple | None:
        """Wait for the parse; its answer, shaped as ``snapparse.parse``'s, or None
        (parse in-process instead).  ``update(fraction)`` gets the parse's progress
        and is called at least every 50 ms; whatever it raises (a cancel) stops the
        parse first.  With ``path``, an answer about another file than the one now
        at ``path`` is refused (None)."""
        try:
            while not self.done.wait(0.05):
                if update is not None:
                    update(self.fraction)
        except BaseException:
            self.discard()
            raise
        if self.result is None or self.error is not None:
            return None
        if path is not None:
            try:
                if _identity(os.stat(path)) != self.ident:
                    return None  # the file changed since: parse what is there now
            except OSError:
                return None
        result, self.result = self.result, None
        return result

    def discard(self) -> None:
        """Stop the parse (if still running) and drop what it built."""
        self.cancelled = True
        self.result = None
