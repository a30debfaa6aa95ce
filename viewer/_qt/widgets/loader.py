"""Load snapshots off the GUI thread, with progress and cancel.

:class:`LoadThread` (a :class:`~.jobs.Job`) runs
:func:`load_snapshot` (and the derived :class:`Document`) off the GUI thread; with
``defer_store`` a big file's column cache is written after the document is handed
over, so the first window does
not wait for the disk.  Its :class:`Progress` callback emits a Qt signal;
since the thread object lives in the GUI thread, receivers that are methods
of GUI objects get it queued.  :meth:`LoadThread.cancel` sets the
cancel event; the model raises ``LoadCancelled`` at its next checkpoint.
When ``vramscope FILE`` already started that load before Qt was imported
(:mod:`vramscope.viewer.startup.preload`), the thread takes it over: its progress is
relayed, a cancel passed on, its document or error used as its own.
"""

from __future__ import annotations

import os
import threading

from ...model.core.errors import LoadCancelled
from ...model.core.progress import Progress
from ...model.io import cache as column_cache
from ...model.io.load import load_snapshot
from ...model.view.document import Document
from ...startup import preload
from .jobs import Job

STAGE_TEXT = {
    "read": "Reading",
    "parse": "Parsing",
    "columns": "Building columns",
    "replay": "Replaying the trace",
}
# The load's own stages fill the bar up to LOAD_SHARE; the replay the rest.
LOAD_SHARE = 0.85
STORE_DELAY_S = 1.0  # the column cache is written this long after the document is shown


class LoadThread(Job):
    """A :class:`Job` loading one snapshot into a :class:`Document` (``done(doc)``)."""

    memory_error = "not enough memory to load it"

    def __init__(self, path: str, parent=None) -> None:
        super().__init__(parent=parent)
        self.path = os.fspath(path)
        self._store_now = threading.Event()
        # Write the column cache after ``done`` (the owner must wait() for the thread
        # before it is destroyed, as MainWindow.closeEvent does).
        self.defer_store = False
        self._store_key = None
        # The owner's hint: whether this thread's end may leave garbage worth a
        # gc.collect() (not after a first document was delivered: nothing was replaced).
        self.collect_when_done = True

    def cancel(self) -> None:
        super().cancel()
        self._store_now.set()  # a finished load still writes its cache, at once

    def work(self) -> Document:  # worker thread
        # The GUI command may have started this very load before Qt was imported.
        pre = preload.claim(self.path) if self.defer_store else None
        doc, self._store_key = self._wait_for(pre) if pre is not None else self._load()
        return doc

    def after_done(self, doc: Document) -> None:  # worker thread
        key, self._store_key = self._store_key, None
        if key is None:
            return
        # Let the window lay out and paint first (the write competes for the CPUs),
        # unless the window closes sooner (cancel): then write it now.
        self._store_now.wait(STORE_DELAY_S)
        try:
            column_cache.store(key, doc.snap)  # atomic; failures only cost the next open
        except Exception:
            pass

    def _load(self):
        """(document, cache key to store after it is shown or None), built here."""
        progress = Progress(self._emit_progress, self.cancel_event)
        # A big file's columns are cached after the window shows it, not before
        # (when the owner waits for this thread on close: ``defer_store``).
        key = None
        if self.defer_store and os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0"):
            key = column_cache.file_key(self.path)
            if key is not None and column_cache.entry_path(key).exists():
                key = None  # a cache hit: load_snapshot reads it
        snap = load_snapshot(self.path, progress, use_cache=None if key is None else False)
        if self.cancel_event.is_set():
            raise LoadCancelled()
        # A fresh Progress: its throttle restarts for the replay stage.
        doc = Document.build(snap, Progress(self._emit_progress, self.cancel_event))
        del snap
        return doc, key

    def _wait_for(self, pre: preload.Preload):
        """The same as :meth:`_load`, from a preload: its progress relayed, Cancel passed on."""
        shown = None
        while not pre.done.wait(0.02):
            if self.cancel_event.is_set():
                pre.cancel_event.set()
            if pre.progress is not shown:
                shown = pre.progress
                self._emit_progress(*shown)
        if pre.error is not None:
            raise pre.error
        doc, pre.document = pre.document, None
        return doc, pre.store_key

    def _emit_progress(self, stage: str, fraction: float) -> None:
        f = float(fraction)
        f = LOAD_SHARE + (1 - LOAD_SHARE) * f if stage == "replay" else LOAD_SHARE * f
        self.progressed.emit(stage, f)
