"""Opening a file in the main window: the dialog, the recent files, the load on a worker
thread with its progress bar and Cancel, its errors and the document it ends with.

One load at a time: opening another file cancels the one in flight, whose thread then
finishes on its own (its result ignored) and is kept until it has, so that closing the
window waits for it.  The view stays on the old document until the new one is loaded.
The window's :attr:`~.window.MainWindow.loadFinished` tells how a load ended.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

from ...model.view.document import Document
from ..widgets import settings as st
from ..widgets.loader import STAGE_TEXT, LoadThread

FILE_FILTER = (
    "Memory snapshots (*.pickle *.pkl *.pickle.gz *.pickle.xz *.pickle.bz2 *.gz *.xz "
    "*.bz2 *.json);;All files (*)"
)


class LoadController(QObject):
    """The loads of ``window`` (its status bar's ``progress`` and ``cancel_button``, its
    ``cancel_action`` and ``recent_menu``): :attr:`loader` is the one in flight."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.loader: LoadThread | None = None
        self.old_loaders: list[LoadThread] = []  # superseded loads, until their thread ends

    # ------------------------------------------------------------------ recent files
    def fill_recent_menu(self) -> None:
        """File > Open Recent: the recent files (a missing one says so), then Clear."""
        m = self.window.recent_menu
        m.clear()
        files = st.recent_files()
        for path in files:
            a = m.addAction(Path(path).name)
            a.setToolTip(path)
            a.setStatusTip(path)
            a.setData(path)
            a.triggered.connect(self._open_recent)
            if not os.path.exists(path):
                a.setText(Path(path).name + " (missing)")
        if files:
            m.addSeparator()
        clear = m.addAction("Clear")
        clear.setToolTip("Forget the recent files")
        clear.setEnabled(bool(files))
        clear.triggered.connect(self.clear_recent)
        m.setToolTipsVisible(True)

    def _open_recent(self) -> None:
        action = self.sender()
        if action is not None and action.data():
            self.open_file(str(action.data()))

    def clear_recent(self) -> None:
        st.clear_recent_files()
        self.fill_recent_menu()

    # ------------------------------------------------------------------ loading
    def open_dialog(self) -> None:
        """File > Open…: starting in the folder of the most recent file."""
        w = self.window
        start = os.path.dirname(st.recent_files()[0]) if w.persist and st.recent_files() else ""
        path, _ = QFileDialog.getOpenFileName(w, "Open memory snapshot", start, FILE_FILTER)
        if path:
            self.open_file(path)

    def open_file(
        self,
        path: str,
        make_loader: Callable[..., LoadThread] | None = None,
        *,
        name: str | None = None,
        status: str | None = None,
    ) -> LoadThread:
        """See :meth:`.window.MainWindow.open_file`."""
        w = self.window
        if self.loader is not None:
            self.cancel(quiet=True)
        path = os.fspath(path)
        if make_loader is None:
            t = LoadThread(path, w)
            t.defer_store = True  # closeEvent waits for it: the cache is written after the window
        else:
            t = make_loader(path, w)
        t.progressed.connect(self._on_progress)
        t.done.connect(self._on_loaded)
        t.failed.connect(self._on_failed)
        t.cancelled.connect(self._on_cancelled)
        t.finished.connect(self._on_thread_finished)
        self.loader = t
        w.progress.setValue(0)
        w.progress.setFormat(f"Opening {Path(path).name if name is None else name}… %p%")
        w.progress.show()
        w.cancel_button.show()
        w.cancel_action.setEnabled(True)
        w.statusBar().showMessage(f"Loading {path}…" if status is None else status)
        t.start()
        return t

    def cancel_clicked(self) -> None:
        """Cancel, Esc: stop the load in flight (a signal's ``checked`` is not ``quiet``)."""
        self.cancel()

    def cancel(self, quiet: bool = False) -> None:
        """Cancel the load in flight (Cancel, Esc); ``quiet``: superseded, its end is not
        reported (``loadFinished`` is not emitted for it)."""
        t = self.loader
        if t is None:
            return
        t.cancel()
        if quiet:
            # Results of a superseded load are ignored; it finishes on its own.
            self._detach()

    def close(self) -> None:
        """The window closes: cancel every load and wait for its thread."""
        self.cancel(quiet=True)
        for t in [self.loader, *self.old_loaders]:
            if t is not None:
                t.cancel()
                t.wait(30000)

    def _detach(self) -> None:
        w = self.window
        t = self.loader
        if t is not None:
            self.old_loaders.append(t)
        self.loader = None
        w.progress.hide()
        w.cancel_button.hide()
        w.cancel_action.setEnabled(False)

    def _on_thread_finished(self) -> None:
        t = self.sender()
        if t in self.old_loaders:
            self.old_loaders.remove(t)
            t.deleteLater()
            # A superseded, cancelled or failed load, or the document a load replaced, may
            # leave big arrays in reference cycles: free them now.  A first document
            # replaced nothing: no ~30 ms collection on the way to the first window.
            if t.collect_when_done:
                gc.collect()

    def _on_progress(self, stage: str, fraction: float) -> None:
        if self.sender() is not self.loader:
            return
        progress = self.window.progress
        progress.setValue(int(fraction * 1000))
        progress.setFormat(f"{STAGE_TEXT.get(stage, stage)}… %p%")

    def _on_loaded(self, doc: Document) -> None:
        t = self.sender()
        if t is not self.loader:
            return
        w = self.window
        t.result = None
        t.collect_when_done = w.vs.doc is not None
        self._detach()
        w.show_document(doc)
        if w.persist:
            st.add_recent_file(doc.snap.path)
            self.fill_recent_menu()
        w.statusBar().showMessage(f"Loaded {doc.name}", 8000)
        w.loadFinished.emit("loaded")

    def _on_failed(self, message: str) -> None:
        t = self.sender()
        if t is not self.loader:
            return
        w = self.window
        path = t.path
        self._detach()
        w.last_error = f"{path}: {message}"
        w.statusBar().showMessage(f"Could not open {Path(path).name}: {message}")
        w.loadFinished.emit("failed")
        w.show_error(f"Could not open {Path(path).name}", message, path)

    def _on_cancelled(self) -> None:
        if self.sender() is not self.loader:
            return
        self._detach()
        gc.collect()
        self.window.statusBar().showMessage("Load cancelled")
        self.window.loadFinished.emit("cancelled")
