"""Files in and out of the main window: open (dialog, recent, drop), the loading
thread's progress / cancel / errors, compare and ranks windows, the status bar's file
facts and warnings, and the segment map's export.  Mixed into ``MainWindow``, which
composes the views; nothing here draws the document.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from ..model.view.document import Document
from ..model.core.units import format_count
from . import settings as st
from .loader import STAGE_TEXT, LoadThread

FILE_FILTER = "Memory snapshots (*.pickle *.pkl *.pickle.gz *.pickle.xz *.pickle.bz2 *.gz *.xz " \
              "*.bz2 *.json);;All files (*)"


class FileActionsMixin:
    """The file half of ``MainWindow`` (``self.loader``, ``self.progress``, …)."""

    def _fill_recent_menu(self) -> None:
        m = self.recent_menu
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
        self._fill_recent_menu()

    # ------------------------------------------------------------------ compare / ranks
    def compare_dialog(self) -> None:
        start = os.path.dirname(self.doc.snap.path) if self.doc and self.doc.snap.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Compare with snapshot (B)", start, FILE_FILTER)
        if path:
            self.compare_with(path)

    def compare_with(self, path: str):
        """A Diff window: the open snapshot as recorded (A) against ``path`` (B)."""
        from .diff_window import DiffWindow

        if self.doc is None:
            return None

        w = DiffWindow(self)
        w.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.add_aux_window(w)
        w.open(self.doc.root, path)
        w.show()
        return w

    def open_ranks_dialog(self) -> None:
        directory = QFileDialog.getExistingDirectory(self, "Open directory of per-rank snapshots")
        if directory:
            self.open_ranks(directory)

    def open_ranks(self, directory: str):
        """A Ranks window over ``directory``; double-clicking a rank opens it here."""
        from .ranks_window import RanksWindow

        w = RanksWindow(self)
        w.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.add_aux_window(w)
        w.openRequested.connect(self._open_from_ranks)
        w.open_directory(directory)
        w.show()
        return w

    def _open_from_ranks(self, path: str) -> None:
        self.open_file(path)
        self.raise_()
        self.activateWindow()

    # ------------------------------------------------------------------ loading
    def open_dialog(self) -> None:
        start = os.path.dirname(st.recent_files()[0]) if self.persist and st.recent_files() else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open memory snapshot", start, FILE_FILTER)
        if path:
            self.open_file(path)

    def is_loading(self) -> bool:
        return self.loader is not None

    def open_file(self, path: str) -> LoadThread:
        """Start loading ``path`` on a worker thread; the current view stays until it is done."""
        if self.loader is not None:
            self.cancel_load(quiet=True)
        path = os.fspath(path)
        t = LoadThread(path, self)
        t.defer_store = True  # closeEvent waits for it: the cache is written after the window
        t.progressed.connect(self._on_progress)
        t.done.connect(self._on_loaded)
        t.failed.connect(self._on_failed)
        t.cancelled.connect(self._on_cancelled)
        t.finished.connect(self._on_thread_finished)
        self.loader = t
        self.progress.setValue(0)
        self.progress.setFormat(f"Opening {Path(path).name}… %p%")
        self.progress.show()
        self.cancel_button.show()
        self.cancel_action.setEnabled(True)
        self.statusBar().showMessage(f"Loading {path}…")
        t.start()
        return t

    def _cancel_clicked(self) -> None:
        self.cancel_load()

    def cancel_load(self, quiet: bool = False) -> None:
        t = self.loader
        if t is None:
            return
        t.cancel()
        if quiet:
            # Results of a superseded load are ignored; it finishes on its own.
            self._detach_loader()

    def _detach_loader(self) -> None:
        t = self.loader
        if t is not None:
            self._old_loaders.append(t)
        self.loader = None
        self.progress.hide()
        self.cancel_button.hide()
        self.cancel_action.setEnabled(False)

    def _on_thread_finished(self) -> None:
        t = self.sender()
        if t in self._old_loaders:
            self._old_loaders.remove(t)
            t.deleteLater()
            # A superseded, cancelled or failed load, or the document a load replaced, may
            # leave big arrays in reference cycles: free them now.  A first document
            # replaced nothing: no ~30 ms collection on the way to the first window.
            if t.collect_when_done:
                gc.collect()

    def _on_progress(self, stage: str, fraction: float) -> None:
        if self.sender() is not self.loader:
            return
        self.progress.setValue(int(fraction * 1000))
        self.progress.setFormat(f"{STAGE_TEXT.get(stage, stage)}… %p%")

    def _on_loaded(self, doc: Document) -> None:
        t = self.sender()
        if t is not self.loader:
            return
        t.result = None
        t.collect_when_done = self.doc is not None
        self._detach_loader()
        self.show_document(doc)
        if self.persist:
            st.add_recent_file(doc.snap.path)
            self._fill_recent_menu()
        self.statusBar().showMessage(f"Loaded {doc.snap.path}", 8000)
        self.loadFinished.emit("loaded")

    def _on_failed(self, message: str) -> None:
        t = self.sender()
        if t is not self.loader:
            return
        path = t.path
        self._detach_loader()
        self.last_error = f"{path}: {message}"
        self.statusBar().showMessage(f"Could not open {Path(path).name}: {message}")
        self.loadFinished.emit("failed")
        self._show_error(f"Could not open {Path(path).name}", message, path)

    def _on_cancelled(self) -> None:
        if self.sender() is not self.loader:
            return
        self._detach_loader()
        gc.collect()
        self.statusBar().showMessage("Load cancelled")
        self.loadFinished.emit("cancelled")

    def _show_error(self, title: str, message: str, detail: str = "") -> None:
        box = QMessageBox(QMessageBox.Icon.Critical, title, message,
                          QMessageBox.StandardButton.Ok, self)
        if detail:
            box.setInformativeText(detail)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        self.error_box = box
        box.open()  # non-blocking

    def _update_status_labels(self) -> None:
        doc = self.doc
        if doc is None:
            for w in (self.file_label, self.format_label, self.settings_label):
                w.setText("")
            self.warnings_button.hide()
            return
        snap = doc.snap
        self.file_label.setText(doc.name)
        self.file_label.setToolTip(snap.path or "")
        self.format_label.setText(snap.source_format)
        conf = str(snap.allocator_settings.get("PYTORCH_CUDA_ALLOC_CONF") or "").strip()
        self.settings_label.setText(f"PYTORCH_CUDA_ALLOC_CONF={conf}" if conf
                                    else "default allocator settings")
        detail = "\n".join(f"{k}: {v}" for k, v in snap.allocator_settings.items()
                           if k != "roundup_power2_divisions")
        self.settings_label.setToolTip("Allocator settings recorded in the snapshot\n" + detail)
        n = len(snap.warnings)
        self.warnings_button.setVisible(n > 0)
        self.warnings_button.setText(f"⚠ {format_count(n)} warning{'s' if n != 1 else ''}")
        self.warnings_button.setToolTip("Skipped while reading (click for the list):\n"
                                        + "\n".join(snap.warnings[:30]))

    def show_warnings(self) -> None:
        if self.doc is None:
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "Snapshot warnings",
                          f"{len(self.doc.snap.warnings)} kinds of entries were skipped while "
                          f"reading {self.doc.name}.", QMessageBox.StandardButton.Ok, self)
        box.setDetailedText("\n".join(self.doc.snap.warnings))
        box.open()

    def export_map(self, path: str) -> bool:
        """Write the segment map to ``path`` (.svg: vector, else PNG)."""
        if str(path).lower().endswith(".svg"):
            return self.map.export_svg(path)
        return self.map.export_png(path)

    def _export_dialog(self, suffix: str, filt: str) -> None:
        if self.doc is None:
            return
        stem = self.doc.name.split(".")[0] + "-segments." + suffix
        path, _ = QFileDialog.getSaveFileName(self, "Export segment map", stem, filt)
        if not path:
            return
        if not path.lower().endswith("." + suffix):
            path += "." + suffix
        if self.export_map(path):
            self.statusBar().showMessage(f"Exported {path}", 6000)
        else:
            self._show_error("Export failed", f"Could not write {path}")

    def export_png_dialog(self) -> None:
        self._export_dialog("png", "PNG image (*.png)")

    def export_svg_dialog(self) -> None:
        self._export_dialog("svg", "SVG drawing (*.svg)")

    def dragEnterEvent(self, event) -> None:
        if _local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        files = _local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.open_file(files[0])


def _local_files(mime) -> list[str]:
    if not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls()
            if u.isLocalFile() and os.path.isfile(u.toLocalFile())]
