"""The compare window's "Other sizes" tab: the run at another batch size or sequence
length, predicted from the pair it has open (two recordings of one program at two sizes
of that knob): :func:`...model.remedies.two_recordings.predict_pair`, off the GUI thread
in a :class:`~..widgets.jobs.Job` with progress and Cancel; the pane only shows its
answer, in the words ``vramscope whatif A --with B`` uses.
"""

from __future__ import annotations

from fractions import Fraction

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ...model.core.units import format_bytes as fb
from ..widgets.jobs import Job

KNOBS = (("batch", "batch size"), ("seq", "sequence length"))


def answer_text(p) -> str:
    """A :class:`~...model.remedies.two_recordings.PairPrediction` in words: its row's
    label, the peak (or the estimate's range), what was matched and why an estimate."""
    lines = [p.label()]
    if p.is_estimate:
        lines.append(
            f"peak reserved: {fb(p.low)} to {fb(p.high)} (estimate; "
            f"{fb(p.peak)} at the fitted sizes)"
        )
    else:
        lines.append(f"peak reserved: {fb(p.peak)}")
    if p.result.first_oom is not None:
        lines.append("runs out of memory under the limit")
    lines.append(f"from two recordings: {p.match.words()}")
    if p.ratio_inferred:
        lines.append(
            f"B/A = {float(p.ratio):g}: inferred from the matched allocations "
            f"({p.ratio_agree} of the {p.ratio_changed} that changed size grew by it)"
        )
    lines.extend(f"  {w}" for w in p.why())
    return "\n".join(lines)


class TwoSizesPane(QWidget):
    """Predict the pair's program at another size: knob, A's and B's sizes (0: not
    known, then the size asked is a multiple of A's), the size to predict."""

    finished = Signal(str)  # "done" | "failed" | "cancelled"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.doc_a = self.doc_b = None
        self.job: Job | None = None
        self.result = None
        self.knob = QComboBox()
        for key, text in KNOBS:
            self.knob.addItem(text, key)
        self.size_a = QSpinBox()
        self.size_b = QSpinBox()
        for s in (self.size_a, self.size_b):
            s.setRange(0, 1 << 20)
            s.setSpecialValueText("unknown")
        self.size_a.setToolTip("The batch size (or sequence length) A was recorded at")
        self.size_b.setToolTip("The batch size (or sequence length) B was recorded at")
        self.target = QDoubleSpinBox()
        self.target.setRange(0.01, 1 << 20)
        self.target.setDecimals(2)
        self.target.setValue(2.0)
        self.target_words = QLabel()
        self.predict_button = QPushButton("Predict")
        self.predict_button.clicked.connect(self.predict)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setMaximumWidth(220)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the prediction")
        self.cancel_button.clicked.connect(self.cancel)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlaceholderText(
            "Two recordings of one program at two batch sizes (or sequence lengths): "
            "the run at any other size, from how each allocation changed."
        )
        for s in (self.size_a, self.size_b):
            s.valueChanged.connect(lambda _v: self._words())
        row = QHBoxLayout()
        for w in (
            QLabel("Knob:"),
            self.knob,
            QLabel("A at"),
            self.size_a,
            QLabel("B at"),
            self.size_b,
            QLabel("predict at"),
            self.target,
            self.target_words,
            self.predict_button,
            self.progress,
            self.cancel_button,
        ):
            row.addWidget(w)
        row.addStretch(1)
        lay = QVBoxLayout(self)
        lay.addLayout(row)
        lay.addWidget(self.text, 1)
        self._running(False)
        self._words()

    def _words(self) -> None:
        known = self.size_a.value() > 0 and self.size_b.value() > 0
        self.target_words.setText("" if known else "× A's (B/A inferred)")

    def set_documents(self, a, b) -> None:
        self.cancel()
        self.doc_a, self.doc_b = a, b
        self.result = None
        self.text.clear()

    def question(self) -> tuple[str, Fraction, tuple[int, int] | None]:
        """(knob, the size or scale asked, the two sizes or None)."""
        sizes = (self.size_a.value(), self.size_b.value())
        known = min(sizes) > 0
        t = Fraction(self.target.value()).limit_denominator(1000)
        return str(self.knob.currentData()), t, (sizes if known else None)

    def predict(self) -> None:
        """Predict in a job (progress and Cancel beside the button)."""
        if self.doc_a is None or self.doc_b is None:
            return
        self.cancel()
        knob, t, sizes = self.question()
        if sizes is not None and sizes[0] == sizes[1]:
            self.text.setPlainText("A and B must be recorded at two sizes.")
            return
        snap_a, snap_b = self.doc_a.snap, self.doc_b.snap

        def work(job: Job):
            from ...model.core.errors import SnapshotError
            from ...model.remedies.two_recordings import PairError, predict_pair
            from ...model.whatif import prepare

            progress = job.progress()
            a = prepare(snap_a, None, progress)
            b = prepare(snap_b, None, progress)
            try:
                return predict_pair(
                    a,
                    b,
                    knob,
                    target=t if sizes else None,
                    scale=None if sizes else t,
                    sizes=sizes,
                    progress=progress,
                )
            except PairError as exc:  # the question, not a bug: its one line
                how = " (set A at and B at)" if exc.needs == "sizes" else ""
                raise SnapshotError(f"{exc}{how}") from None

        job = Job(work, self)
        job.progressed.connect(lambda _s, f, j=job: self._on_progress(j, f))
        job.done.connect(lambda r, j=job: self._on_done(j, r))
        job.failed.connect(lambda m, j=job: self._on_failed(j, m))
        job.cancelled.connect(lambda j=job: self._on_cancelled(j))
        job.finished.connect(job.deleteLater)
        self.job = job
        self.progress.setValue(0)
        self._running(True)
        self.text.setPlainText("predicting…")
        job.start()

    def is_running(self) -> bool:
        return self.job is not None

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.job = None
            self._running(False)
            self.text.setPlainText("prediction cancelled")
            self.finished.emit("cancelled")

    def _running(self, on: bool) -> None:
        self.progress.setVisible(on)
        self.cancel_button.setVisible(on)
        self.predict_button.setEnabled(not on)

    def _on_progress(self, job: Job, f: float) -> None:
        if job is self.job:
            self.progress.setValue(int(1000 * f))

    def _on_done(self, job: Job, result) -> None:
        if job is not self.job:
            return
        self.job = None
        self._running(False)
        self.result = result
        self.text.setPlainText(answer_text(result))
        self.finished.emit("done")

    def _on_failed(self, job: Job, message: str) -> None:
        if job is not self.job:
            return
        self.job = None
        self._running(False)
        self.text.setPlainText(message)
        self.finished.emit("failed")

    def _on_cancelled(self, job: Job) -> None:
        if job is self.job:
            self.job = None
            self._running(False)

    def wait(self) -> None:
        """Cancel and wait for the job (the window closes)."""
        self.cancel()
        for j in self.findChildren(Job):
            j.wait(30000)
