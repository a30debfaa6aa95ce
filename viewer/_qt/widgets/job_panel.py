"""A window over one snapshot that runs one cancellable :class:`~.jobs.Job` at a time:
the plumbing the Diagnosis and What-if panels share.

:class:`JobPanel` owns the Run and Cancel buttons (Ctrl+Enter, Esc), the progress bar,
the error line and the memory-limit box; :meth:`JobPanel.run` starts the subclass's job
(:meth:`JobPanel.make_job`), keeps the buttons in step, shows its progress, its error or
its cancellation, and hands the result to :meth:`JobPanel.show_result`.  Closing the
window cancels the job and waits for it.  The subclass lays the parts out and draws the
result; it says what the status line reads while running and after a failure.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QLabel, QLineEdit, QProgressBar, QPushButton, QWidget

from ...model.core.snapshot import Snapshot
from ...model.core.units import parse_bytes
from .jobs import Job


class JobPanel(QWidget):
    """A top-level window over ``snap`` (of ``device``; None: the model's default) that
    runs one job at a time.  Subclasses set the class texts, build their layout (placing
    :attr:`run_button`, :attr:`cancel_button`, :attr:`progress`, :attr:`error` and
    :attr:`limit_edit`) and implement :meth:`status_line`, :meth:`make_job` and
    :meth:`show_result`."""

    finished = Signal()  # a run ended (results shown, failed or cancelled)
    closed = Signal()

    title = ""  # the window title's first part: "<title>: <file> — vramscope"
    run_text = "&Run"  # the Run button
    run_tip = ""
    running_text = ""  # the status line while the job runs
    failed_text = ""  # the status line after the job failed (the error line says why)

    def __init__(
        self, snap: Snapshot, parent: QWidget | None = None, device: int | None = None
    ) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.snap = snap
        self.device = device  # whose run the job works on (None: the first with a trace)
        self.case = None  # the model's prepared case, kept for the next run
        self.thread: Job | None = None
        name = snap.path.rsplit("/", 1)[-1] if snap.path else "snapshot"
        self.setWindowTitle(f"{self.title}: {name} — vramscope")
        self.resize(1200, 760)
        self.limit_edit = QLineEdit()
        self.error = QLabel("")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d62728")
        self.run_button = QPushButton(self.run_text)
        self.run_button.setShortcut(QKeySequence("Ctrl+Return"))
        self.run_button.setToolTip(self.run_tip)
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setShortcut(QKeySequence("Esc"))
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)

    # -- what subclasses provide --------------------------------------------------
    def status_line(self) -> QLabel:
        """The label that says what the panel is doing (running, failed, cancelled)."""
        raise NotImplementedError

    def make_job(self, limit: int | None) -> Job:
        """The job of one run under the memory ``limit`` (None: as recorded); its result
        is a tuple, handed to :meth:`show_result` unpacked."""
        raise NotImplementedError

    def show_result(self, *result: Any) -> None:
        """Draw a finished job's result."""
        raise NotImplementedError

    def overall_progress(self, stage: str, fraction: float) -> float:
        """The bar's fraction (0..1) for ``fraction`` done of the job's ``stage``."""
        return fraction

    # -- running -------------------------------------------------------------------
    def limit(self) -> int | None:
        """The memory limit typed in, in bytes (None: empty); ValueError if it is no size."""
        text = self.limit_edit.text().strip()
        if not text:
            return None
        return parse_bytes(text)  # (ValueError: the panel shows its message)

    def run(self) -> None:
        """Start a run (nothing while one runs); a limit that is no size is shown as the
        error instead."""
        if self.thread is not None:
            return
        try:
            limit = self.limit()
        except ValueError as exc:
            self.error.setText(str(exc))
            return
        self.error.setText("")
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setValue(0)
        self.status_line().setText(self.running_text)
        self.thread = self.make_job(limit)
        self.thread.progressed.connect(
            lambda stage, f: self.progress.setValue(int(self.overall_progress(stage, f) * 1000))
        )
        self.thread.done.connect(lambda result: self.show_result(*result))
        self.thread.failed.connect(self._failed)
        self.thread.cancelled.connect(self._cancelled)
        self.thread.finished.connect(self._thread_finished)
        self.thread.start()

    def cancel(self) -> None:
        """Ask the run in flight to stop at its next checkpoint."""
        if self.thread is not None:
            self.thread.cancel()

    def _thread_finished(self) -> None:
        self.thread = None
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.finished.emit()

    def _failed(self, message: str) -> None:
        self.error.setText(message)
        self.status_line().setText(self.failed_text)

    def _cancelled(self) -> None:
        self.progress.setValue(0)
        self.status_line().setText("Cancelled.")

    def closeEvent(self, event) -> None:
        if self.thread is not None:
            self.thread.cancel()
            self.thread.wait(5000)
        self.closed.emit()
        super().closeEvent(event)
