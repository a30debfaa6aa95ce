"""The What-if panel: the recorded run against other allocator settings.

Pick settings (a standard set as checkboxes, plus any PYTORCH_CUDA_ALLOC_CONF
typed in) and a memory limit; Run simulates them off the GUI thread
(the job of a :class:`~..widgets.job_panel.JobPanel`, progress + Cancel) with the model in
:mod:`vramscope.viewer.model.whatif`, then overlays reserved memory over the
trace for the recorded run and each alternative, marks predicted OOMs, and
lists the figures in a table (Copy puts it on the clipboard as TSV; Export
saves the chart as PNG).  Opened from the main window by Tools > What-if…
(Ctrl+Shift+W, :func:`open_panel`); selecting a row of the table overlays that
setting's predicted reserved curve on the window's timeline (key
:data:`OVERLAY_KEY`, :class:`~..widgets.window_link.WindowLink`), gone when the selection is
cleared, the panel closes or the window shows another document or device.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QStyle,
    QStyledItemDelegate,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...model.core import parallel
from ...model.core.allocator_rules import ConfError, parse_conf
from ...model.core.errors import SnapshotError
from ...model.core.snapshot import Snapshot
from ...model.core.units import format_bytes as fb
from ...model.core.units import plural
from ...model.remedies import seq_scale as seq_model
from ...model.remedies.batch_ranges import range_words
from ...model.whatif import RECOMMENDED, Prediction, native_sim, prepare
from ...model.whatif.predictions import vs_recorded_text
from ..widgets import theme
from ..widgets.job_panel import JobPanel
from ..widgets.jobs import Job
from ..widgets.plotting import set_byte_axis
from ..widgets.window_link import WindowLink, shown_device

DEFAULT_CHECKED = (
    "expandable_segments:True",
    "max_split_size_mb:64",
    "garbage_collection_threshold:0.6",
)
PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
]
# The OOM column right after the peak: the two answers people look for, visible without
# scrolling the table sideways.
COLUMNS = (
    "setting",
    "peak reserved",
    "vs recorded",
    "OOM",
    "peak allocated",
    "frag. at peak",
    "cudaMalloc",
    "cudaFree",
)
COL_SETTING, COL_PEAK, COL_VS, COL_OOM = 0, 1, 2, 3
# The header as shown: two lines where a name is wider than its figures, so that the
# setting keeps room at a 1300 px window (COLUMNS, one line each, heads the copied table).
HEADER = (
    "setting",
    "peak\nreserved",
    "vs\nrecorded",
    "OOM",
    "peak\nallocated",
    "frag.\nat peak",
    "cudaMalloc",
    "cudaFree",
)
GIB = 1 << 30
LIMIT_OFF_CHART = 3  # a limit above this many times the highest curve is left off the y range
OVERLAY_KEY = "whatif"  # the main timeline's overlay set by this panel


def run_limit(case, given: int | None) -> tuple[int | None, str]:
    """The memory limit the settings are simulated under and where it comes from: the
    case's one rule (:meth:`Case.effective_limit`), which the Diagnosis panel's advice
    takes too, so that both panels judge (and name) the same limit."""
    return case.effective_limit(given)


class WhatIfJob(Job):
    """The What-if run's job: ``rowDone(case, row, prediction)`` as each setting's
    simulation finishes (on a pool of processes, in the order they finish), before
    ``done`` brings them all."""

    rowDone = Signal(object, int, object)


def whatif_job(
    snap: Snapshot,
    confs: list[str],
    limit: int | None,
    case=None,
    parent=None,
    device: int | None = None,
    seq_scale: float | None = None,
) -> Job:
    """A :class:`Job` that prepares the request stream of ``device`` (once; None: the
    first with trace events) and simulates each setting under :func:`run_limit`, side by
    side on every core (:func:`~...model.core.parallel.pmap`; serially for a small case);
    ``done((case, predictions, self-check, the limit's source))``.  With ``seq_scale``
    each setting's run is at that sequence length instead (a
    :class:`~...model.remedies.seq_scale.SeqPrediction`, an estimate with its range; a
    recording without a sequence axis fails with the model's words)."""

    def work(job: WhatIfJob):
        case_ = case or prepare(snap, device)
        lim, source = run_limit(case_, limit)
        # The recorded run first (the self-check's, computed once and kept by the case):
        # the "recorded" row at the same limit is then that run.
        case_.recorded_run()
        names = ["recorded"] + confs
        cfgs = [case_.config_of(c) for c in names]
        preds: list = [None] * len(names)
        if seq_scale is not None:
            judged = seq_model.judge(case_)
            if not judged.is_sequence_model:
                raise SnapshotError(seq_model.NO_SEQUENCE)
            progress = job.progress()
            for j, name in enumerate(names):
                progress.update("simulate", j / len(names))
                label = f"seq x{seq_scale:g} (estimate)" + ("" if j == 0 else f" {name}")
                preds[j] = seq_model.predict_at(case_, judged, seq_scale, label, cfgs[j], lim)
                job.rowDone.emit(case_, j, preds[j])
            return case_, preds, case_.self_check(), source

        def finished(j: int, result) -> None:
            preds[j] = Prediction(names[j], cfgs[j], lim, result)
            job.rowDone.emit(case_, j, preds[j])

        parallel.pmap(
            lambda cfg, sub: case_.simulate(cfg, lim, sub),
            cfgs,
            work=parallel.simulation_work(len(case_.requests), native_sim.use_native()),
            progress=job.progress(),
            stage="simulate",
            with_progress=True,
            on_result=finished,
        )
        # The self-check here, not on the GUI thread: it may simulate.
        return case_, preds, case_.self_check(), source

    return WhatIfJob(work, parent)


class BreakableDelegate(QStyledItemDelegate):
    """Draws a setting so that a wrapped line may break after its commas and colons (a
    setting has no spaces to break at); the item's text itself is left as it is."""

    def initStyleOption(self, option, index) -> None:
        super().initStyleOption(option, index)
        # A zero-width space is a line-break opportunity that draws as nothing.
        option.text = option.text.replace(",", ",\u200b").replace(":", ":\u200b")


class WhatIfPanel(JobPanel):
    """A window over one snapshot: settings, chart, table (``device``: whose requests are
    simulated; None: the first with a trace)."""

    settingSelected = Signal(object)  # the selected row's Prediction (None: cleared)

    title = "What-if"
    run_text = "&Run"
    run_tip = "Simulate the checked settings (Ctrl+Enter)"
    running_text = "Simulating…"
    failed_text = "The simulation failed."

    def __init__(
        self, snap: Snapshot, parent: QWidget | None = None, device: int | None = None
    ) -> None:
        super().__init__(snap, parent, device)
        self.preds: list = []
        self.limit_text = ""  # the limit of the last run and its source, as the summary says
        self._seq_scale: float | None = None  # the run's sequence scale (None: as recorded)
        self._build()

    # -- layout ------------------------------------------------------------------
    def _build(self) -> None:
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.addWidget(QLabel("Settings to try (PYTORCH_CUDA_ALLOC_CONF):"))
        self.list = QListWidget()
        self.list.setToolTip(
            "Each is simulated from the allocator's defaults, as the allocator "
            "parses the variable; the recorded run is always shown"
        )
        # Settings are never cut: the pane is as wide as the longest (see _fit_settings).
        self.list.setTextElideMode(Qt.TextElideMode.ElideNone)
        for conf in RECOMMENDED:
            if conf:
                self._add_item(conf, conf in DEFAULT_CHECKED)
        lv.addWidget(self.list, 1)
        self.conf_edit = QLineEdit()
        self.conf_edit.setPlaceholderText("add a setting, e.g. max_split_size_mb:256  (Enter)")
        self.conf_edit.returnPressed.connect(self.add_conf)
        lv.addWidget(self.conf_edit)
        lv.addWidget(QLabel("Memory limit (bytes, or e.g. 10GB; empty: as recorded):"))
        self.limit_edit.setToolTip(
            "Like torch.cuda.set_per_process_memory_fraction: a new segment "
            "that would pass it makes the allocator free cache and retry, "
            "then raise OOM"
        )
        lv.addWidget(self.limit_edit)
        lv.addWidget(QLabel("Sequence length × (sequence models; empty: as recorded):"))
        self.seq_edit = QLineEdit()
        self.seq_edit.setPlaceholderText("e.g. 2 for twice the context length")
        self.seq_edit.setToolTip(
            "Each setting at another sequence length: what grows with the tokens is "
            "scaled, eager attention's scores by the square; an estimate with its range "
            "(as vramscope whatif --seq-scale)"
        )
        self.seq_edit.returnPressed.connect(self.run)
        lv.addWidget(self.seq_edit)
        lv.addWidget(self.error)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        lv.addLayout(buttons)
        lv.addWidget(self.progress)

        right = QSplitter(Qt.Orientation.Vertical)
        self.plot = pg.PlotWidget()
        self.plot.setBackground(theme.background())
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.unit = set_byte_axis(self.plot, "left", "reserved", GIB)  # bytes per axis unit
        self.plot.setLabel("bottom", "trace event")
        self.plot.setDownsampling(auto=True, mode="peak")
        self.plot.setClipToView(True)
        # The legend sits below the chart, in the plot's own layout, never over the curves,
        # the limit or the OOM marks.  It holds only short, fixed entries (recorded, OOM,
        # limit); each setting's colour is shown beside it in the table, so long settings
        # never widen the chart.
        self.legend = pg.LegendItem(offset=None, colCount=2)
        self.plot.getPlotItem().layout.addItem(self.legend, 4, 1)
        right.addWidget(self.plot)
        table_box = QWidget()
        tv = QVBoxLayout(table_box)
        tv.setContentsMargins(0, 0, 0, 0)
        self.summary = QLabel("Press Run to simulate the checked settings.")
        self.summary.setWordWrap(True)
        tv.addWidget(self.summary)
        self.link_note = QLabel("")  # why the selected row is not on the main timeline
        self.link_note.setWordWrap(True)
        self.link_note.setVisible(False)
        tv.addWidget(self.link_note)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(HEADER)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSortingEnabled(False)
        # One row at a time: its predicted curve goes on the main window's timeline.
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.setToolTip(
            "Select a setting: its predicted reserved memory is drawn on the main window's timeline"
        )
        self.table.itemSelectionChanged.connect(self._selection_changed)
        # The figures sized to their contents (never an elided "event 2590…"); the setting
        # takes what is left and wraps (anywhere: a setting has no spaces), so that every
        # column stays inside the table at a 1300 px window; rows grow to the wrapped text.
        header = self.table.horizontalHeader()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_SETTING, QHeaderView.ResizeMode.Fixed)
        self.table.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.table.setWordWrap(True)
        self.setting_delegate = BreakableDelegate(self.table)
        self.table.setItemDelegateForColumn(COL_SETTING, self.setting_delegate)
        self.table.verticalHeader().setVisible(False)  # (the colour swatch numbers the rows)
        # The setting's width is what the figures leave (set here, not by a Stretch
        # section, which kept the setting's whole width); the rows follow it.
        self.table.viewport().installEventFilter(self)
        tv.addWidget(self.table)
        row = QHBoxLayout()
        self.copy_button = QPushButton("&Copy table")
        self.copy_button.setToolTip("Copy the results as tab-separated text (Ctrl+Shift+C)")
        self.copy_button.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.copy_button.clicked.connect(self.copy_table)
        self.export_button = QPushButton("&Export PNG…")
        self.export_button.setToolTip("Save the chart as a PNG image")
        self.export_button.clicked.connect(self.export_dialog)
        row.addStretch(1)
        row.addWidget(self.copy_button)
        row.addWidget(self.export_button)
        tv.addLayout(row)
        right.addWidget(table_box)
        right.setSizes([460, 260])

        self.split = split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([330, 870])
        split.setStretchFactor(0, 0)  # a wider window widens the chart, not the list
        split.setStretchFactor(1, 1)
        self._fit_settings()
        outer = QVBoxLayout(self)
        outer.addWidget(split)

    def eventFilter(self, obj, event) -> bool:
        if obj is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_setting_column()
        return super().eventFilter(obj, event)

    def _fit_setting_column(self) -> None:
        """The setting column takes the table's width less the figures' (never less than
        a few characters); its text wraps in it and the rows grow to fit."""
        t = self.table
        others = sum(t.columnWidth(c) for c in range(t.columnCount()) if c != COL_SETTING)
        least = 8 * t.fontMetrics().averageCharWidth()
        want = max(t.viewport().width() - others, least)
        if t.columnWidth(COL_SETTING) != want:
            t.setColumnWidth(COL_SETTING, want)
        t.resizeRowsToContents()

    def _fit_settings(self) -> None:
        """Widen the settings pane so that the longest setting shows whole (up to half the
        window; beyond that the list scrolls sideways and the tooltip has it)."""
        fm = self.list.fontMetrics()
        widest = max(
            (fm.horizontalAdvance(self.list.item(i).text()) for i in range(self.list.count())),
            default=0,
        )
        style = self.list.style()
        extra = (
            style.pixelMetric(QStyle.PixelMetric.PM_IndicatorWidth)
            + 4 * fm.averageCharWidth()
            + style.pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
            + 24
        )
        want = min(widest + extra, max(self.width() // 2, 330))
        self.list.setMinimumWidth(min(widest + extra - 24, want))
        sizes = self.split.sizes() if hasattr(self, "split") else []
        if len(sizes) == 2 and sizes[0] < want:
            total = max(sum(sizes), self.width() - 20)
            self.split.setSizes([want, max(total - want, 300)])

    def _add_item(self, conf: str, checked: bool) -> QListWidgetItem:
        item = QListWidgetItem(conf)
        item.setToolTip(conf)
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
        self.list.addItem(item)
        return item

    # -- settings ------------------------------------------------------------------
    def add_conf(self) -> bool:
        """Add the typed setting (checked) if the allocator would accept it."""
        text = self.conf_edit.text().strip()
        if not text:
            return False
        try:
            parse_conf(text)
        except ConfError as exc:
            self.error.setText(f"{text}: {exc}")
            return False
        self.error.setText("")
        for i in range(self.list.count()):
            if self.list.item(i).text() == text:
                self.list.item(i).setCheckState(Qt.CheckState.Checked)
                break
        else:
            self._add_item(text, True)
            self._fit_settings()
        self.conf_edit.clear()
        return True

    def checked_confs(self) -> list[str]:
        return [
            self.list.item(i).text()
            for i in range(self.list.count())
            if self.list.item(i).checkState() == Qt.CheckState.Checked
        ]

    def set_checked(self, confs: list[str]) -> None:
        wanted = set(confs)
        for i in range(self.list.count()):
            item = self.list.item(i)
            item.setCheckState(
                Qt.CheckState.Checked if item.text() in wanted else Qt.CheckState.Unchecked
            )
        present = {self.list.item(i).text() for i in range(self.list.count())}
        for conf in confs:
            if conf not in present:
                self._add_item(conf, True)
        self._fit_settings()

    # -- running (JobPanel) ----------------------------------------------------------
    def run(self) -> None:
        """Start a run; a sequence scale that is no positive number is shown as the error."""
        if self.thread is not None:
            return
        text = self.seq_edit.text().strip()
        try:
            scale = float(text) if text else None
        except ValueError:
            scale = -1.0
        if scale is not None and not (0 < scale < float("inf")):
            self.error.setText(f"sequence length ×: not a positive number: {text!r}")
            return
        self._seq_scale = None if scale == 1 else scale
        super().run()

    def status_line(self) -> QLabel:
        return self.summary

    def make_job(self, limit: int | None) -> Job:
        confs = self.checked_confs()
        job = whatif_job(self.snap, confs, limit, self.case, self, self.device, self._seq_scale)
        self._partial: list | None = None
        self._partial_names = ["recorded"] + confs
        job.rowDone.connect(self.show_row)
        return job

    def show_row(self, case, row: int, pred) -> None:
        """One setting's row as its simulation finishes (the others say "simulating…"
        until theirs do); the chart and the selection wait for the whole run."""
        if getattr(self, "_partial", None) is None:
            self.table.clearSelection()  # (the old run's overlay goes)
            self.preds = []  # nothing to select until the run is in
            names = self._partial_names
            self._partial = [None] * len(names)
            self.table.setRowCount(len(names))
            for r, name in enumerate(names):
                self._fill_pending_row(case, r, name)
        if 0 <= row < len(self._partial):
            self._partial[row] = pred
            self._fill_row(case, row, pred)

    def _fill_pending_row(self, case, r: int, name: str) -> None:
        setting = "recorded: " + case.recorded.describe() if r == 0 else name
        for c in range(len(COLUMNS)):
            item = QTableWidgetItem(
                setting if c == COL_SETTING else "simulating…" if c == COL_PEAK else ""
            )
            if c == COL_SETTING:
                item.setData(Qt.ItemDataRole.DecorationRole, self._colour(r))
                item.setToolTip(setting)
            self.table.setItem(r, c, item)

    def _cancelled(self) -> None:
        super()._cancelled()
        self._restore_table()

    def _failed(self, message: str) -> None:
        super()._failed(message)
        self._restore_table()

    def _restore_table(self) -> None:
        """After a run that did not finish: the last finished run's rows again."""
        if getattr(self, "_partial", None) is None:
            return
        self._partial = None
        if self.case is not None and self.preds:
            self._fill_table(self.case, self.preds)
        else:
            self.table.setRowCount(0)

    # -- results -------------------------------------------------------------------
    def show_result(self, case, preds, check, source: str = "") -> None:
        """Draw the predictions ``preds`` of ``case`` (``check``: the model's self-check;
        ``source``: where the limit they were simulated under came from)."""
        self.case, self.preds = case, preds
        self._partial = None
        self.progress.setValue(1000)
        self._plot(case, preds)
        self.table.clearSelection()  # (the old run's overlay goes)
        self._fill_table(case, preds)
        lim = preds[0].limit if preds else case.limit
        if not source:
            source = case.limit_source if lim == case.limit else "given"
        self.limit_text = (
            f"{fb(lim)} ({source})" if lim else "none known: type one in the Memory limit box"
        )
        text = (
            f"{plural(len(case.requests), 'request')} of device {case.device}; memory limit "
            f"{self.limit_text}. "
        )
        text += check.sentence()
        w = getattr(case, "window", None)
        if w is not None and w.started_late:  # what a trace started mid-run cannot show
            text += (
                f" Note: {w.describe()}. Those segments keep their recorded places under "
                "every setting, so a setting's effect on them is unknown; cudaMalloc/"
                "cudaFree count the window only."
            )
            if any(p.peak_is_window_start(case) for p in preds):
                text += (
                    " * = the peak is the layout the window started with: recorded, "
                    "not a prediction."
                )
        self.summary.setText(text)

    def _plot(self, case, preds) -> None:
        self.plot.clear()
        self.legend.clear()
        x = case.curve_x().astype(np.float64)
        lim = preds[0].limit if preds else None
        top = max(
            [float(p.result.reserved.max()) if len(p.result.reserved) else 0.0 for p in preds]
            + [0.0]
        )
        # A limit far above the curves (the whole GPU for a run that fits easily) would
        # flatten them to the axis: the chart keeps to the curves and the legend says so
        # (as the Diagnosis chart).
        above = lim is not None and lim > LIMIT_OFF_CHART * top
        if lim and not above:
            top = max(top, float(lim))
        # The unit from what is drawn: a run under 1 GiB reads in MiB.
        u = self.unit = set_byte_axis(self.plot, "left", "reserved", top)
        named_oom = False
        for j, p in enumerate(preds):
            y = p.result.reserved / u
            recorded = j == 0 and getattr(p, "estimate", None) is None
            color = self._colour(j)
            pen = pg.mkPen(color, width=2.5 if recorded else 1.6)
            label = "recorded" if recorded else p.conf
            oom = p.result.first_oom
            # After its first OOM the program would have stopped: the rest dashed.
            cut = len(y) if oom is None else oom.request + 1
            curve = self.plot.plot(x[:cut], y[:cut], pen=pen, name=label)
            if j < 2:
                # (At another sequence length the first row is the recorded settings'.)
                self.legend.addItem(
                    curve,
                    "recorded"
                    if recorded
                    else p.conf
                    if j == 0
                    else "settings (colours: see the table)",
                )
            if cut < len(y):
                self.plot.plot(
                    x[cut - 1 :],
                    y[cut - 1 :],
                    pen=pg.mkPen(color, width=1, style=Qt.PenStyle.DashLine),
                )
            if oom is not None:
                mark = self.plot.plot(
                    [float(oom.event)],
                    [oom.reserved_bytes / u],
                    pen=None,
                    symbol="x",
                    symbolSize=16,
                    symbolPen=pg.mkPen("#d62728", width=3),
                    symbolBrush=None,
                    name="predicted OOM",
                )
                if not named_oom:
                    self.legend.addItem(mark, "predicted OOM")
                named_oom = True
        # From zero, so differences look as large as they are; the limit and the OOM
        # marks (at most at the limit) inside the view, not on its edge.
        self.plot.setYRange(0, max(top, 1.0) * 1.08 / u, padding=0)
        if len(x):
            self.plot.setXRange(float(x[0]), float(x[-1]), padding=0.03)
        if lim:
            pen = pg.mkPen(theme.muted(), width=1.5, style=Qt.PenStyle.DashLine)
            self.plot.addItem(pg.InfiniteLine(lim / u, angle=0, pen=pen))
            # Named in the legend, not by a label on the line under the curves.
            self.legend.addItem(
                pg.PlotDataItem([], [], pen=pen),
                f"memory limit {fb(lim)}" + (" (above the chart)" if above else ""),
            )

    def _fill_table(self, case, preds) -> None:
        self.table.setRowCount(len(preds))
        for r, p in enumerate(preds):
            self._fill_row(case, r, p, resize=False)
        self.table.resizeColumnsToContents()
        self._fit_setting_column()

    def _fill_row(self, case, r: int, p, resize: bool = True) -> None:
        d = p.to_dict(case)
        oom = d["oom"]
        fixed = d["peak_reserved_is_window_start"]
        est = getattr(p, "estimate", None)
        span = range_words(est.low, est.high) if est is not None else None
        cells = [
            "recorded: " + case.recorded.describe() if r == 0 and est is None else p.conf,
            (span or fb(d["peak_reserved_bytes"])) + ("*" if fixed else ""),
            vs_recorded_text(d),
            "-"
            if oom is None
            else f"event {oom['event']} ({oom['kind']})",  # an index, as --at takes it
            fb(d["peak_allocated_bytes"]),
            f"{d['fragmentation_at_peak'] * 100:.1f}%",
            str(d["cuda_malloc_count"]),
            str(d["cuda_free_count"]),
        ]
        for c, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if c == COL_SETTING:
                item.setData(Qt.ItemDataRole.DecorationRole, self._colour(r))  # = its curve
                item.setToolTip(cells[0])
            if c == COL_PEAK:
                item.setToolTip(
                    (
                        f"an estimate: {text}; {fb(d['peak_reserved_bytes'])} as judged: "
                        f"{seq_model.RANGE_WHAT}\n"
                        if est is not None
                        else ""
                    )
                    + f"{text} = {d['peak_reserved_bytes']:,} bytes "
                    "(up to the first OOM, where the program would stop)"
                    + (
                        "\n* the layout the trace window started with, never "
                        "exceeded: recorded, not predicted"
                        if fixed
                        else ""
                    )
                )
            if c == COL_OOM and oom is not None:
                item.setToolTip(
                    f"{text}: {fb(oom['size_bytes'])} requested at event "
                    f"{oom['event']}: {fb(oom['free_in_pool_bytes'])} free in "
                    f"the {oom['pool']} pool, largest block "
                    f"{fb(oom['largest_free_bytes'])}"
                )
            if not item.toolTip():  # every cell's text reachable, wrapped or not
                item.setToolTip(text)
            self.table.setItem(r, c, item)
        if resize:
            self.table.resizeColumnsToContents()
            self._fit_setting_column()

    def selected_prediction(self):
        """The selected row's Prediction (None: no row is selected)."""
        sm = self.table.selectionModel()
        rows = sm.selectedRows() if sm is not None else []
        if not rows or not 0 <= rows[0].row() < len(self.preds):
            return None
        return self.preds[rows[0].row()]

    def _selection_changed(self) -> None:
        if self.case is not None:
            self.settingSelected.emit(self.selected_prediction())

    def predicted_curve(self, pred) -> tuple[np.ndarray, np.ndarray]:
        """``pred``'s reserved bytes after each request (x: trace events of the case's
        device) up to its first OOM, where the program would have stopped (as its
        table row's peak)."""
        assert self.case is not None  # a prediction exists only once a case was run
        x = self.case.curve_x()
        y = pred.result.reserved
        oom = pred.result.first_oom
        cut = len(y) if oom is None else oom.request + 1
        return x[:cut], y[:cut]

    def overlay_label(self, pred) -> str:
        """The timeline's name of ``pred``'s curve."""
        if getattr(pred, "estimate", None) is not None:
            return "what-if: " + pred.conf
        return "what-if: " + ("recorded settings" if pred is self.preds[0] else pred.conf)

    def _colour(self, row: int):
        """The colour of row ``row``'s curve (row 0: the recorded run)."""
        return theme.foreground() if row == 0 else pg.mkColor(PALETTE[(row - 1) % len(PALETTE)])

    def table_text(self) -> str:
        rows = ["\t".join(COLUMNS)]
        for r in range(self.table.rowCount()):
            items = (self.table.item(r, c) for c in range(self.table.columnCount()))
            rows.append("\t".join(it.text() if it is not None else "" for it in items))
        return "\n".join(rows)

    def copy_table(self) -> None:
        QGuiApplication.clipboard().setText(self.table_text())

    def export_png(self, path: str) -> bool:
        return self.plot.grab().save(path, "PNG")

    def export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export chart as PNG", "whatif.png", "PNG images (*.png)"
        )
        if path:
            self.export_png(path)


def open_panel(window) -> WhatIfPanel | None:
    """Open a What-if panel over the main window's snapshot (kept alive by the window);
    the selected setting's predicted curve is overlaid on the window's timeline."""
    doc = window.vs.doc
    if doc is None:
        return None
    # The device the window shows (a multi-GPU file opens at its OOM's): its requests
    # are simulated, so that the selected setting's curve can go on its timeline.
    snap = doc.root.snap
    panel = WhatIfPanel(snap, window, shown_device(window, snap))
    window.add_aux_window(panel)
    link = WindowLink(window, OVERLAY_KEY, panel.closed)

    def selected(pred) -> None:
        panel.link_note.setVisible(False)
        if pred is None or panel.case is None:
            link.clear()
            return
        x, y = panel.predicted_curve(pred)
        if (
            link.overlay(
                panel.case.device,
                panel.overlay_label(pred),
                x,
                y,
                ends=pred.result.first_oom is not None,
            )
            or not link.current
        ):
            return
        tl = getattr(window, "timeline", None)
        shown = getattr(tl, "device", None)
        if shown is not None and shown != panel.case.device:  # say why it is not drawn
            panel.link_note.setText(
                f"Not drawn on the main window's timeline: it shows "
                f"device {shown}, this prediction is of device "
                f"{panel.case.device}."
            )
            panel.link_note.setVisible(True)

    panel.settingSelected.connect(selected)
    panel.show()
    return panel
