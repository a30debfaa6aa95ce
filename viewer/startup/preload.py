"""Build the first document on a plain thread while the main thread imports Qt.

``vramscope FILE`` spends ~0.45 s importing PySide6 and pyqtgraph before a
window can exist.  :func:`start` (called by the GUI command before those
imports, after :mod:`vramscope.viewer.startup.parse_ahead` started the parse) runs
what the loader thread would run - :func:`load_snapshot` and
:meth:`Document.build` - at once, on a thread, so the parts that release the
GIL (the wait for the parse, numpy) overlap the imports.  The window's loader
(:class:`vramscope.viewer._qt.widgets.loader.LoadThread`) then :func:`claim` s it for
the same file, relays its progress and cancel, and gets the same document it
would have built itself.  Stdlib only at import time: the model (and numpy) is
imported on the thread.
"""

from __future__ import annotations

import os
import stat
import threading

_pending: dict[str, "Preload"] = {}


class Preload:
    """``load_snapshot`` + ``Document.build`` of one file on a daemon thread.

    With ``defer_store`` (what the window's loader does), a big file's column
    cache is not written during the load: :attr:`store_key` tells the loader
    what to write after the window shows the document.
    """

    def __init__(self, path: str, defer_store: bool = True) -> None:
        self.path = path
        self.defer_store = defer_store
        self.cancel_event = threading.Event()
        self.done = threading.Event()
        self.progress: tuple[str, float] | None = None  # the latest (stage, fraction)
        self.document = None
        self.error: BaseException | None = None
        self.store_key: str | None = None
        self.identity: tuple | None = None  # the file's (dev, inode, size, mtime) at start
        self._thread = threading.Thread(target=self._run, name="vramscope-preload", daemon=True)

    def _report(self, stage: str, fraction: float) -> None:
        self.progress = (stage, fraction)  # read by the loader thread (a tuple: atomic)

    def _run(self) -> None:
        try:
            from ..early.parse_handover import stamp
            from ..model.core.progress import Progress
            from ..model.io import cache as column_cache
            from ..model.io.load import load_snapshot
            from ..model.view.document import Document

            key = None
            if self.defer_store and os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0"):
                key = column_cache.file_key(self.path)
                if key is not None and column_cache.entry_path(key).exists():
                    key = None  # a cache hit: load_snapshot maps it
            snap = load_snapshot(
                self.path,
                Progress(self._report, self.cancel_event),
                use_cache=None if key is None else False,
            )
            doc = Document.build(snap, Progress(self._report, self.cancel_event))
            del snap
            stamp("document_done")
            self.store_key = key
            self.document = doc
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()


def start(path: str | os.PathLike, defer_store: bool = True) -> Preload | None:
    """Start building the document of ``path`` now (a regular file only; not with
    ``VRAMSCOPE_NO_PARSE_AHEAD=1``, which switches all work ahead of the window off)."""
    path = os.path.abspath(os.fspath(path))
    if os.environ.get("VRAMSCOPE_NO_PARSE_AHEAD", "") not in ("", "0"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or path in _pending:
        return None
    pre = Preload(path, defer_store)
    pre.identity = _identity(st)
    _pending[path] = pre
    pre._thread.start()
    return pre


def claim(path: str | os.PathLike) -> Preload | None:
    """The preload of ``path``, handed to the caller (once), or None."""
    if not _pending:
        return None
    pre = _pending.pop(os.path.abspath(os.fspath(path)), None)
    try:
        same = pre is not None and _identity(os.stat(pre.path)) == pre.identity
    except OSError:
        same = False
    if pre is not None and not same:
        pre.cancel_event.set()  # the file changed since: load what is there now
        return None
    return pre


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
