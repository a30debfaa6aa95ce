"""The windows and panels the main window opens over its document or beside it.

File > Compare with… (a Diff window, A: the open snapshot as recorded), File > Open
directory of ranks… (a Ranks window; double-clicking a rank opens it in the main
window), File > Attach… and File > Open remote… (handed in by the application: the
window imports nothing live), Tools > What-if and Tools > Diagnosis.  Their modules
load when first used, not with every window (~10 ms of imports: the live client, the
simulator).  Each window opened is kept alive while open
(:meth:`~.window.MainWindow.add_aux_window`).  And the Help menu's dialogs.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from .loading import FILE_FILTER


class ToolWindows:
    """What ``window`` opens beside itself, and its Help dialogs."""

    def __init__(self, window) -> None:
        self.window = window

    def open_attach(self) -> None:
        """File > Attach to running process… (the window's ``attach_handler``)."""
        w = self.window
        handler = type(w).attach_handler
        if handler is not None:
            w.attach_dialog = handler(w)

    def open_remote(self) -> None:
        """File > Open remote… (the window's ``remote_handler``)."""
        handler = type(self.window).remote_handler
        if handler is not None:
            handler(self.window)

    def open_whatif(self) -> None:
        """Tools > What-if: a panel over the window's document."""
        from ..whatif.panel import open_panel

        open_panel(self.window)

    def open_diagnosis(self) -> None:
        """Tools > Diagnosis: a panel over the window's document."""
        from ..diagnosis.panel import open_panel

        open_panel(self.window)

    def compare_dialog(self) -> None:
        """File > Compare with…: ask for snapshot B (starting in A's folder)."""
        w = self.window
        doc = w.vs.doc
        start = os.path.dirname(doc.snap.path) if doc and doc.snap.path else ""
        path, _ = QFileDialog.getOpenFileName(w, "Compare with snapshot (B)", start, FILE_FILTER)
        if path:
            self.compare_with(path)

    def compare_with(self, path: str):
        """A Diff window: the open snapshot as recorded (A) against ``path`` (B); None
        when no snapshot is open."""
        from ..compare.diff_window import DiffWindow

        w = self.window
        if w.vs.doc is None:
            return None
        diff = DiffWindow(w)
        diff.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        w.add_aux_window(diff)
        diff.open(w.vs.doc.root, path)
        diff.show()
        return diff

    def open_ranks_dialog(self) -> None:
        """File > Open directory of ranks…: ask for the directory."""
        directory = QFileDialog.getExistingDirectory(
            self.window, "Open directory of per-rank snapshots"
        )
        if directory:
            self.open_ranks(directory)

    def open_ranks(self, directory: str):
        """A Ranks window over ``directory``; double-clicking a rank opens it in the
        window."""
        from ..ranks.window import RanksWindow

        w = self.window
        ranks = RanksWindow(w)
        ranks.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        w.add_aux_window(ranks)
        ranks.openRequested.connect(self._open_from_ranks)
        ranks.open_directory(directory)
        ranks.show()
        return ranks

    def _open_from_ranks(self, path: str) -> None:
        w = self.window
        w.open_file(path)
        w.raise_()
        w.activateWindow()

    # ------------------------------------------------------------------ help
    def show_shortcuts(self):
        """Help > Keyboard shortcuts: every action's shortcut, read from the actions."""
        from .help_dialogs import ShortcutsDialog

        dialog = ShortcutsDialog(self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def show_record_help(self):
        """Help > How to record a snapshot."""
        from .help_dialogs import RecordDialog

        dialog = RecordDialog(self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def about(self) -> None:
        """Help > About vramscope."""
        from .help_dialogs import about_text

        QMessageBox.about(self.window, "About vramscope", about_text())
