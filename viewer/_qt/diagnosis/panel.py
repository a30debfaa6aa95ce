"""The Diagnosis panel: the verdict, what the peak is made of, and the remedies in order.

Draws :class:`vramscope.viewer.model.remedies.advise.Advice`, computed off
the GUI thread (the job of a :class:`~..widgets.job_panel.JobPanel`, progress +
Cancel/Esc): a verdict
line, a bar of the bytes live at the peak split by kind (scales with the
batch / model state / other), and the remedies ranked by predicted peak
reserved (simulated or estimated, the change, where); an estimate shows its
range where one is known and says why in its tooltip.  Selecting a remedy
overlays its predicted reserved curve on the recorded one (simulated
remedies; estimated ones draw their predicted peak as a line, a range as a
band) and emits :attr:`DiagnosisPanel.remedySelected` with the trace events
of the allocations it acts on (``None`` when the selection is cleared).
Ctrl+C or the table's context menu copies the selected remedy, Ctrl+Shift+C
the whole table, as tab-separated text.

Hook (main window): Tools > Diagnosis… (Ctrl+Shift+D) calls
``open_panel(window)``, which opens it over ``window.vs.doc``; the selected
remedy's curve is overlaid on the window's timeline (its predicted-curve
overlay, :mod:`..timeline.overlay`) and the stacks of the allocations it acts
on are highlighted in the map and the timeline (``events``: indices into the
device's trace); both go when the selection is cleared, the panel closes or
the window shows another document.
"""

from __future__ import annotations

import os

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...model.categories import CATEGORY_LABELS, CATEGORY_NAMES
from ...model.core.snapshot import Snapshot
from ...model.core.units import format_bytes as fb
from ...model.remedies.advise import batch_not_judged_words, format_peak, peak_words, split_lines
from ...model.remedies.batch_scale import RANGE_WHAT, near_limit_words, range_words
from ..widgets import theme
from ..widgets.category_colors import color as category_color
from ..widgets.job_panel import JobPanel
from ..widgets.jobs import Job
from ..widgets.settings import settings
from ..widgets.window_link import WindowLink, shown_device
from .chart import RemedyChart

COLUMNS = ("#", "remedy", "predicted peak", "saving", "fits", "method", "change", "where")
COL_REMEDY, COL_PEAK, COL_CHANGE, COL_WHERE = 1, 2, 6, 7
# The columns whose text may be long: they wrap (remedy, change) or are capped (where),
# so that every column stays inside the table at a 1300 px window; their tooltips hold
# the whole text.
REMEDY_WIDTH, WHERE_WIDTH = 280, 220
BATCH_KEY = "diagnosis/recordedBatch/"  # + the file's absolute path: its recorded batch
GIB = 1 << 30
OVERLAY_KEY = "diagnosis"  # the main timeline's overlay set by this panel
# Why a batch prediction with a range is an estimate (the model's PeakEstimate says how
# the range was drawn).
WORKSPACE_WHY = (
    "An estimate: library workspaces (scratch made and freed inside one "
    "operation, whose size follows the algorithm the library picks per shape) "
    "were seen in the recording, and the sizes it would pick at another batch "
    "cannot be known from one recording. The figure assumes the recorded "
    "algorithms; the range covers the others: " + RANGE_WHAT + "."
)
ESTIMATED_WHY = (
    "An estimate: what the change does depends on what one recording cannot show "
    "(which operations run in bf16, what a checkpointed block saves and "
    "recomputes, another optimizer's scratch). The range covers those cases; "
    "the figure is a point inside it."
)


# The advice's stages as parts of one bar (judging is quick, the batch search and the
# allocator settings are most of the simulations).
_STAGE_START = {"judge": 0.0, "search": 0.05, "allocator": 0.6}


def advise_job(
    snap: Snapshot,
    batch: int | None,
    limit: int | None,
    case=None,
    parent=None,
    device: int | None = None,
) -> Job:
    """A :class:`Job` that prepares the case of ``device`` (once; None: the first with
    trace events) and computes the advice;
    ``done((case, advice))``, ``progressed(stage, fraction of that stage)``."""

    def work(job: Job):
        from ...model.remedies.advise import advise
        from ...model.whatif import prepare

        case_ = case or prepare(snap, device)
        return case_, advise(case_, batch, limit, job.progress())

    return Job(work, parent)


def _overall(stage: str, fraction: float) -> float:
    """One bar for all stages: where ``stage`` starts plus its share."""
    return min(0.99, _STAGE_START.get(stage, 0.9) + 0.4 * fraction)


class SplitBar(QWidget):
    """One horizontal bar: the bytes live at the peak by category (the colours and words
    of the main window's "What it is"), with a legend in the tooltip."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.parts: list[tuple[str, int, object]] = []
        self.setMinimumHeight(18)

    def set_parts(self, parts: list[tuple[str, int, object]]) -> None:
        self.parts = [p for p in parts if p[1] > 0]
        total = sum(p[1] for p in self.parts) or 1
        self.setToolTip(
            "\n".join(f"{name}: {fb(v)} ({v / total:.0%})" for name, v, _ in self.parts)
        )
        self.update()

    def paintEvent(self, event) -> None:
        from PySide6.QtGui import QColor, QPainter

        painter = QPainter(self)
        total = sum(p[1] for p in self.parts)
        if not total:
            return
        x = 0.0
        w = self.width()
        for _, v, color in self.parts:
            dx = w * v / total
            painter.fillRect(int(x), 0, int(round(x + dx)) - int(x), self.height(), QColor(color))
            x += dx
        painter.end()


class DiagnosisPanel(JobPanel):
    """Verdict, split of the peak and ranked remedies over one snapshot (of ``device``:
    None diagnoses the first device with a trace)."""

    remedySelected = Signal(object, object)  # Remedy, np.ndarray of trace events it acts on

    title = "Diagnosis"
    run_text = "&Diagnose"
    run_tip = "Rank the remedies for this recording (Ctrl+Enter)"
    running_text = "Simulating the remedies…"
    failed_text = "The diagnosis failed."

    def __init__(
        self, snap: Snapshot, parent: QWidget | None = None, device: int | None = None
    ) -> None:
        super().__init__(snap, parent, device)
        self.advice = None
        self._build()

    # -- layout --------------------------------------------------------------------
    def _build(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("Recorded batch:"))
        self.batch_spin = QSpinBox()
        self.batch_spin.setRange(0, 1 << 20)
        self.batch_spin.setSpecialValueText("unknown")
        self.batch_spin.setToolTip(
            "The batch size the recording ran with (optional, "
            "remembered for this file): the answers are then in "
            "samples (the largest batch that fits), not fractions of "
            "the recorded batch; Enter diagnoses again"
        )
        self.batch_spin.setValue(self.remembered_batch() or 0)
        self.batch_spin.valueChanged.connect(self._remember_batch)
        self.batch_spin.editingFinished.connect(self._batch_entered)
        top.addWidget(self.batch_spin)
        top.addWidget(QLabel("Memory limit:"))
        self.limit_edit.setPlaceholderText("as recorded (e.g. 10GB)")
        self.limit_edit.setToolTip(
            "Bytes the process may reserve; empty: the recording's "
            "(sidecar or inferred), else the GPU's total memory"
        )
        top.addWidget(self.limit_edit)
        top.addWidget(self.run_button)
        top.addWidget(self.cancel_button)
        top.addWidget(self.progress, 1)

        self.verdict = QLabel("Press Diagnose to rank what would make this run fit.")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.split_label = QLabel("")
        self.split_label.setWordWrap(True)
        self.split_bar = SplitBar()
        self.fit_label = QLabel("")
        self.fit_label.setWordWrap(True)
        self.limit_label = QLabel("")  # the limit the answer is judged against, and its source
        self.limit_label.setWordWrap(True)
        # The recorded peak and the peak the run needs (the savings' base), each named.
        self.peak_label = QLabel("")
        self.peak_label.setWordWrap(True)
        self.peak_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        # Every column inside the table (the location was pushed off a 1300 px window):
        # the change takes what is left and wraps, the remedy wraps in a capped width,
        # the location is capped (the tooltip has it whole); rows grow to the wrapped text.
        header = self.table.horizontalHeader()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_CHANGE, QHeaderView.ResizeMode.Stretch)
        for c in (COL_REMEDY, COL_WHERE):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.Interactive)
        self.table.setWordWrap(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setVisible(False)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self.copy_action = QAction("&Copy", self.table)
        self.copy_action.setShortcut(QKeySequence.StandardKey.Copy)
        self.copy_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        self.copy_action.setToolTip("Copy the selected remedy as tab-separated text (Ctrl+C)")
        self.copy_action.triggered.connect(self.copy_selection)
        self.copy_all_action = QAction("Copy &table", self.table)
        self.copy_all_action.setToolTip("Copy every remedy as tab-separated text")
        self.copy_all_action.triggered.connect(self.copy_table)
        self.table.addAction(self.copy_action)
        self.table.addAction(self.copy_all_action)

        self.plot = RemedyChart()
        self.legend = self.plot.legend

        row = QHBoxLayout()
        self.copy_button = QPushButton("&Copy table")
        self.copy_button.setToolTip("Copy the remedies as tab-separated text (Ctrl+Shift+C)")
        self.copy_button.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.copy_button.clicked.connect(self.copy_table)
        row.addStretch(1)
        row.addWidget(self.copy_button)

        upper = QWidget()
        uv = QVBoxLayout(upper)
        uv.setContentsMargins(0, 0, 0, 0)
        for w in (
            self.verdict,
            self.limit_label,
            self.peak_label,
            self.split_label,
            self.split_bar,
            self.fit_label,
            self.error,
        ):
            uv.addWidget(w)
        uv.addWidget(self.table, 1)
        uv.addLayout(row)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(upper)
        split.addWidget(self.plot)
        split.setSizes([430, 300])
        outer = QVBoxLayout(self)
        outer.addLayout(top)
        outer.addWidget(split, 1)

    # -- the recorded batch, remembered per file ------------------------------------
    def _batch_key(self) -> str | None:
        path = self.snap.path
        return BATCH_KEY + os.path.abspath(path).replace("\\", "/") if path else None

    def remembered_batch(self) -> int | None:
        """The recorded batch size typed for this file before (None: never typed)."""
        key = self._batch_key()
        if key is None:
            return None
        try:
            value = int(settings().value(key, 0) or 0)
        except (TypeError, ValueError):
            return None
        return value if value > 0 else None

    def _remember_batch(self, value: int) -> None:
        key = self._batch_key()
        if key is None:
            return
        s = settings()
        if value > 0:
            s.setValue(key, int(value))
        else:
            s.remove(key)
        s.sync()

    def _batch_entered(self) -> None:
        """A batch typed after an answer: answer again, in samples (the search depends
        on it), unless that answer already used it."""
        if self.advice is None or self.thread is not None:
            return
        if (self.batch_spin.value() or None) != self.advice.recorded_batch:
            self.run()

    # -- running (JobPanel) ----------------------------------------------------------
    def status_line(self) -> QLabel:
        return self.verdict

    def make_job(self, limit: int | None) -> Job:
        batch = self.batch_spin.value() or None
        return advise_job(self.snap, batch, limit, self.case, self, self.device)

    def overall_progress(self, stage: str, fraction: float) -> float:
        return _overall(stage, fraction)

    # -- the panel's own words for the model's answers ---------------------------------
    @staticmethod
    def limit_words(a) -> str:
        """The memory limit of the answer and where it came from, as the What-if panel
        words it: "79.18 GiB (GPU total memory)"; "none known" without one."""
        if a.memory_limit_bytes is None:
            return "none known"
        return f"{fb(a.memory_limit_bytes)} ({a.limit_source})"

    @staticmethod
    def _is_largest_fitting(a, rem) -> bool:
        """``rem`` is the smaller batch the search found (not the fallback "half")."""
        return (
            rem.remedy == "smaller_batch"
            and a.largest_scale_that_fits is not None
            and a.largest_scale_that_fits < 1
        )

    @staticmethod
    def batch_answer(a) -> str:
        """The largest fitting batch in samples when the recorded batch is known ("batch
        23 of the recorded 24"), else as a share "of the recorded batch"; "or more" when
        the search stopped at its cap."""
        more = " or more (the search stopped there)" if a.search_capped else ""
        if a.largest_batch_that_fits is not None and a.recorded_batch:
            n, rec = a.largest_batch_that_fits, a.recorded_batch
            return (
                f"batch {n}{more} of the recorded {rec}"
                if n < rec
                else f"batch {n}{more} (recorded {rec})"
            )
        f = a.largest_scale_that_fits
        if f is None:
            return ""
        share = f"{f:.0%} of the" if f < 1 else f"{f:.3g}× the"
        return f"{share} recorded batch{more}"

    def remedy_title(self, rem) -> str:
        """``rem``'s title as the panel shows it: the smaller batch in samples (or "of the
        recorded batch"), whatever the model's own words are."""
        a = self.advice
        if a is not None and self._is_largest_fitting(a, rem):
            return f"Smaller batch: the largest that fits ({self.batch_answer(a)})"
        return rem.title

    def remedy_change(self, rem) -> str:
        """``rem``'s change in the panel's words: the smaller batch names the GUI's batch
        box, never a command-line flag."""
        a = self.advice
        if a is None or rem.remedy != "smaller_batch":
            return rem.change
        if self._is_largest_fitting(a, rem):
            if a.largest_batch_that_fits is not None and a.recorded_batch:
                return (
                    f"reduce the batch size from {a.recorded_batch} to {a.largest_batch_that_fits}"
                )
            return (
                f"reduce the batch size to {a.largest_scale_that_fits:.0%} of the recorded "
                "batch (type the recorded batch size above for it in samples)"
            )
        if a.recorded_batch and a.recorded_batch >= 2:
            return f"halve the batch size (from {a.recorded_batch} to {a.recorded_batch // 2})"
        return "halve the batch size"

    # -- results -------------------------------------------------------------------
    def show_result(self, case, advice) -> None:
        """Draw ``advice`` (of ``case``): verdict, split, the remedies; the first selected."""
        self.case, self.advice = case, advice
        self.progress.setValue(1000)
        a = advice
        oom = a.verdict.startswith("out of memory")
        if a.memory_limit_bytes is None and not oom:
            # The model's words may name a command-line flag: the panel names its box.
            text = (
                "no memory limit known: type one in the Memory limit box above and press Diagnose"
            )
        else:
            text = a.verdict[len("out of memory ") :] if oom else a.verdict
        self.verdict.setText(
            ("<b>Out of memory</b> " if oom else "<b>Verdict:</b> ")
            + text.replace("&", "&amp;").replace("<", "&lt;")
        )
        self.limit_label.setText("Memory limit: " + self.limit_words(a))
        words = peak_words(a.recorded_peak_reserved_bytes, a.needed_peak_reserved_bytes)
        self.peak_label.setText(words[:1].upper() + words[1:])
        self.limit_edit.setPlaceholderText(
            "none known: type one (e.g. 10GB)"
            if a.memory_limit_bytes is None
            else "as recorded (e.g. 10GB)"
        )
        # The categories' words and colours (as the header and summary), then the same
        # bytes by how they scale with the batch: the model's two lines, as the CLI's.
        cats = a.split_at_peak.get("categories") or {}
        self.split_bar.set_parts(
            [
                (label, int(cats.get(name, 0)), category_color(name))
                for name, label in zip(CATEGORY_NAMES, CATEGORY_LABELS)
            ]
        )
        words = split_lines(a)
        words[0] = words[0][:1].upper() + words[0][1:]
        self.split_label.setText("\n".join(w.strip() for w in words))
        # An estimate when the batch prediction has a range whose ends read apart (the
        # model's words: batch_scale.range_words); how close it is to the limit and what
        # the next batch does, in the model's words too (the CLI's line).
        batch_rem = next((r for r in a.remedies if r.remedy == "smaller_batch"), None)
        rng = batch_rem.predicted_peak_reserved_range if batch_rem is not None else None
        span = range_words(*rng) if rng is not None else None
        est = f"; an estimate: {a.batch_in_doubt}, peak {span}" if span else ""
        near = near_limit_words(a.near_limit) if a.near_limit is not None else ""
        near = (" &mdash; " + near.replace("&", "&amp;").replace("<", "&lt;")) if near else ""
        if a.largest_batch_that_fits is not None:
            self.fit_label.setText(
                f"Largest batch that fits {fb(a.memory_limit_bytes)}: "
                f"<b>{self.batch_answer(a)}</b>" + (f" ({est[2:]})" if est else "") + near
            )
        elif a.largest_scale_that_fits is not None:
            self.fit_label.setText(
                f"Largest batch that fits {fb(a.memory_limit_bytes)}: "
                f"<b>{self.batch_answer(a)}</b>"
                + (f" ({est[2:]})" if est else "")
                + near
                + " &mdash; type the recorded batch size above for the "
                "answer in samples"
            )
        elif a.batch_not_judged is not None:
            words = batch_not_judged_words(a)
            self.fit_label.setText(
                (words[:1].upper() + words[1:]).replace("&", "&amp;").replace("<", "&lt;")
            )
        elif near:
            self.fit_label.setText(
                f"No batch fits {fb(a.memory_limit_bytes)} with room to spare{near}"
            )
        else:
            self.fit_label.setText("")
        self.fit_label.setToolTip(WORKSPACE_WHY if est else "")
        # A new answer: the old selection goes first (its overlay and highlight with it),
        # so that selecting the first row draws this answer's remedy even when the same
        # row was selected before.
        self.table.clearSelection()
        self._fill_table(a)
        self._plot(case, a, None)
        if a.remedies:
            self.table.selectRow(0)

    def _fill_table(self, a) -> None:
        self.table.setRowCount(len(a.remedies))
        for r, rem in enumerate(a.remedies):
            fits = rem.fits_word
            title, change = self.remedy_title(rem), self.remedy_change(rem)
            cells = [
                str(r + 1),
                title,
                format_peak(rem),
                fb(rem.saving_bytes),
                fits,
                rem.method,
                change,
                (rem.where or "").replace("\\", "/").rsplit("/", 1)[-1],
            ]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                # Every cell's whole text is in its tooltip (a narrow window wraps or
                # elides the long ones).
                item.setToolTip(text)
                if c == COL_REMEDY:
                    item.setToolTip(f"{title}\n{change}\n{rem.detail}")
                if c == COL_CHANGE:
                    item.setToolTip(f"{change}\n{rem.detail}")
                if c == COL_PEAK:
                    item.setToolTip(f"{text}\n{self._peak_tip(rem)}")
                if c == COL_WHERE and rem.where:
                    item.setToolTip(rem.where)
                if c == 5 and rem.method == "estimated":
                    item.setForeground(pg.mkColor(theme.muted()))
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        for c, most in ((COL_REMEDY, REMEDY_WIDTH), (COL_WHERE, WHERE_WIDTH)):
            self.table.setColumnWidth(c, min(self.table.sizeHintForColumn(c), most))
        self.table.resizeRowsToContents()

    @staticmethod
    def _peak_tip(rem) -> str:
        """The predicted peak's tooltip: the bytes and, for an estimate, why it is one."""
        tip = f"{rem.predicted_peak_reserved_bytes:,} bytes ({rem.method})"
        if rem.predicted_peak_reserved_range is not None:
            lo, hi = rem.predicted_peak_reserved_range
            tip += f", estimated range {lo:,} - {hi:,} bytes"
        if rem.batch_estimate:  # a batch prediction resting on the library's choices
            tip += f"\n\n{WORKSPACE_WHY}"
        elif rem.is_estimate:
            tip += f"\n\n{ESTIMATED_WHY}\n{rem.detail}"
        return tip

    def selected_remedy(self):
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows or self.advice is None:
            return None
        return self.advice.remedies[rows[0].row()]

    def _selection_changed(self) -> None:
        rem = self.selected_remedy()
        if self.case is None:
            return
        self._plot(self.case, self.advice, rem)
        if rem is None:  # cleared: the overlay and the highlight go
            self.remedySelected.emit(None, np.zeros(0, np.int64))
            return
        self.remedySelected.emit(rem, rem.acts_on_events(self.case))

    def _plot(self, case, a, rem) -> None:
        self.plot.show_remedy(case, a, rem, self.remedy_title(rem) if rem is not None else "")

    def table_text(self, rows: list[int] | None = None) -> str:
        """The remedies (``rows``; None: all) as tab-separated text under a header line:
        the table's columns with the change and the code location whole."""
        if self.advice is None:
            return "\t".join(COLUMNS)
        lines = ["\t".join(COLUMNS)]
        for r in range(len(self.advice.remedies)) if rows is None else rows:
            rem = self.advice.remedies[r]
            cells = [
                self.table.item(r, c).text() if self.table.item(r, c) else ""
                for c in range(len(COLUMNS))
            ]
            cells[COL_CHANGE], cells[COL_WHERE] = self.remedy_change(rem), rem.where or ""
            lines.append("\t".join(c.replace("\t", " ").replace("\n", " ") for c in cells))
        return "\n".join(lines)

    def copy_table(self) -> None:
        QGuiApplication.clipboard().setText(self.table_text())

    def copy_selection(self) -> None:
        """The selected remedies (all when none is selected) to the clipboard."""
        sm = self.table.selectionModel()
        rows = sorted({i.row() for i in sm.selectedRows()}) if sm is not None else []
        QGuiApplication.clipboard().setText(self.table_text(rows or None))


def stack_mask_of(snap: Snapshot, device: int, events: np.ndarray) -> np.ndarray:
    """Per stack of ``snap``: True where an allocation at one of ``events`` (indices into
    ``device``'s trace) has that stack; what the map and the timeline highlight."""
    mask = np.zeros(len(snap.stacks), bool)
    rows = np.flatnonzero(snap.trace.device == device)
    ev = np.asarray(events, np.int64)
    ev = ev[(ev >= 0) & (ev < len(rows))]
    stacks = snap.trace.stack[rows[ev]]
    mask[stacks[stacks >= 0]] = True
    return mask


def open_panel(window) -> DiagnosisPanel | None:
    """Open a Diagnosis panel over the main window's snapshot and start it.

    Selecting a remedy highlights, in the window's segment map and timeline, the
    allocations (by stack) it acts on (the legends say "acted on by: <remedy>") and
    overlays its predicted curve on the timeline
    (:class:`~..widgets.window_link.WindowLink`); closing the panel restores the
    window's own highlight.  The window keeps the panel alive (``add_aux_window``)."""
    doc = window.vs.doc
    if doc is None:
        return None
    # The device the window shows (a multi-GPU file opens at its OOM's, where the
    # banner's "What would fix it?" is): that run is diagnosed.
    panel = DiagnosisPanel(doc.root.snap, window, shown_device(window, doc.root.snap))
    window.add_aux_window(panel)

    link = WindowLink(window, OVERLAY_KEY, panel.closed)

    def selected(rem, events) -> None:
        if panel.case is None or not link.current:
            return
        if rem is None:  # cleared: the overlay and the highlight go
            link.clear()
            return
        mask = stack_mask_of(panel.snap, panel.case.device, events) if len(events) else None
        title = panel.remedy_title(rem)
        link.highlight(mask, f"acted on by: {title}")
        # Its predicted reserved curve (or, estimated, its level and range).
        link.overlay(
            panel.case.device,
            title,
            rem.curve_x,
            rem.curve,
            rem.predicted_peak_reserved_bytes,
            rem.predicted_peak_reserved_range,
        )

    panel.remedySelected.connect(selected)
    panel.show()
    panel.run()
    return panel
