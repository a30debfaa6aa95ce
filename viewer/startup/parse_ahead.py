"""Parse a big snapshot on a thread while this process imports numpy and Qt.

A cold start pays for imports (~0.1-0.3 s for ``vramscope summary``: numpy and
the model; ~0.45 s for the window: PySide6, pyqtgraph) and for the compiled
parse.  The parse of a big file is mostly its device traces, which the compiled
parser splits into regions parsed by C threads with the GIL released
(``_native/snapparse_src/sections.c``), so a plain Python thread started before
the imports overlaps them: :func:`start` loads only the compiled parser (from its
file, without the model package or numpy), maps the file (on one core: streams
it) and parses it on a daemon thread, and offers it to the model
(:mod:`vramscope.viewer.early.parse_handover`, loaded without the model package):
:func:`vramscope.viewer.model.io.load.load_snapshot` claims the answer for that
file; it is ``snapparse.parse``'s own tuple, interpreted exactly as an
in-process parse's.  The model never imports this module.  No fork, no copy: the columns
the parser wrote are the ones the snapshot uses.

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

from ..early import file_identity
from ..early import parse_handover as handover

_DISABLE_ENV = "VRAMSCOPE_NO_PARSE_AHEAD"
# The compiled parser is found by path: importing the model package to find it is what
# the parse ahead exists to run before.
_MODEL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "model")
# How big files are parsed (MIN_BYTES, threads, mapping), shared with the model's loader.
stamp = handover.stamp


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _extension_file() -> str | None:
    """The compiled parser's file (``model/_native/snapparse.<ext>``), if built."""
    from importlib.machinery import EXTENSION_SUFFIXES

    folder = os.path.join(_MODEL_DIR, "_native")
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

    Only for an uncompressed binary pickle of at least ``parse_handover.MIN_BYTES`` whose
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
        if not stat.S_ISREG(st.st_mode) or st.st_size < handover.MIN_BYTES:
            return False
        with open(path, "rb") as f:
            if f.read(1) != b"\x80":  # PROTO: a binary pickle (compressed/JSON/text: later)
                return False
    except (OSError, ValueError):
        return False
    extension = _extension_file()
    if extension is None or handover.pending(path):
        return False
    if use_cache and env("VRAMSCOPE_NO_CACHE", "") in ("", "0"):
        key = file_identity.column_key(path)
        if key is not None and os.path.exists(file_identity.column_entry(key)):
            return False  # mapping the cached columns is faster than any parse
    ahead = Ahead(path, extension)
    handover.offer(path, ahead)
    stamp("parse_start")
    ahead.thread.start()
    return True


def claim(path: str | os.PathLike) -> "Ahead | None":
    """The parse started for ``path``, handed to the caller (once), or None (what
    :func:`vramscope.viewer.model.io.load.load_snapshot` does through the hand-over)."""
    return handover.claim(path)


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
                threads = handover.parse_threads(beside_work=True)
                mapped = handover.map_file(f) if threads > 1 else None
                if mapped is None:  # one core: streamed through a small buffer
                    self.result = parser.parse(f.readinto, self.ident[2], self._progress)
                    return
                try:
                    self.result = parser.parse(
                        mapped, -1, self._progress, threads, handover.SECTION_MIN_EVENTS, True
                    )
                finally:
                    mapped.close()
        except BaseException as exc:
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
