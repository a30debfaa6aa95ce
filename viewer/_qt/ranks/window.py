"""The Ranks window: a directory of per-rank snapshots (torchrun + capture).

An adapter over :mod:`vramscope.viewer.model.reports.ranks`: a table with one row per
rank (its files as children), small multiples of reserved / allocated / peak /
fragmentation per rank with the outlier ranks in red and the median dashed, what
each rank's memory is (:mod:`.split`: the categories side by side, table and stacked
bars), and ``openRequested(path)`` when a rank (or one of its files) is
double-clicked, so the main window opens it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSplitter,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...model.core.units import format_bytes, plural
from ...model.reports.ranks import METRIC_LABELS, OUTLIER_RULE, RankEntry, RankOverview, load_ranks
from ..widgets import theme
from ..widgets.jobs import Job
from ..widgets.plotting import byte_unit
from ..widgets.tables import table_tree
from .split import RanksSplit

OUTLIER_RED = "#c62828"
BAR_BLUE = "#2f6db5"
PATH_ROLE = Qt.ItemDataRole.UserRole + 1
RANK_ROLE = Qt.ItemDataRole.UserRole + 2
COLUMNS = (
    "Rank",
    "Reserved",
    "Allocated",
    "Peak reserved",
    "Peak allocated",
    "Fragmentation",
    "OOM",
    "Outlier",
    "File",
)
CHART_METRICS = (
    "reserved_bytes",
    "allocated_bytes",
    "peak_reserved_bytes",
    "peak_allocated_bytes",
    "fragmentation",
)


def ranks_job(directory: str, parent=None) -> Job:
    """A :class:`Job` running :func:`load_ranks` (``done(RankOverview)``); its progress
    stage names the rank file being read."""

    def work(job: Job):
        def progress(i: int, n: int, name: str) -> None:
            job.report(f"rank file {i + 1} of {n}: {name}" if name else "", i / max(n, 1))

        return load_ranks(directory, progress=progress, cancelled=job.cancel_event.is_set)

    job = Job(work, parent)
    job.directory = directory  # (what the window's messages name)
    return job


class RanksChart(pg.GraphicsLayoutWidget):
    """One small bar chart per metric, ranks on x; outliers red, the median dashed."""

    rankClicked = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setBackground(theme.background())
        self.plots: dict[str, pg.PlotItem] = {}
        self.bars: dict[str, pg.BarGraphItem] = {}
        self.brushes: dict[str, list[str]] = {}
        self.ranks: list[int] = []
        self.scene().sigMouseClicked.connect(self._on_click)
        self.setMinimumHeight(180)

    def set_overview(self, ov: RankOverview | None) -> None:
        self.clear()
        self.plots, self.bars, self.brushes = {}, {}, {}
        if ov is None:
            return
        fg = theme.foreground()
        self.ranks = [e.rank for e in ov.ranks]
        x = np.arange(len(self.ranks), dtype=float)
        for col, metric in enumerate(CHART_METRICS):
            frac = metric == "fragmentation"
            values = [e.value(metric) for e in ov.ranks]
            # Bytes in the unit the largest reads best in (MiB for ranks under 1 GiB).
            unit, size = byte_unit(max([v or 0 for v in values], default=0))
            title = METRIC_LABELS[metric] + (" (%)" if frac else f" ({unit})")
            p = self.addPlot(row=0, col=col, title=title)
            p.setMenuEnabled(False)
            p.hideButtons()
            p.setMouseEnabled(x=False, y=False)
            p.showGrid(y=True, alpha=0.15)
            for name in ("bottom", "left"):
                ax = p.getAxis(name)
                ax.setPen(pg.mkPen(fg))
                ax.setTextPen(pg.mkPen(fg))
            p.getAxis("bottom").setTicks([[(i, str(r)) for i, r in enumerate(self.ranks)]])
            p.setLabel("bottom", "rank")
            scale = 100.0 if frac else 1 / size
            heights = np.array([(v or 0) * scale for v in values], dtype=float)
            brushes = [OUTLIER_RED if metric in e.deviations else BAR_BLUE for e in ov.ranks]
            # A rank that ran out of memory alone is outlined in every chart; its bars
            # are red only where its own figure stands out.
            pens = [
                pg.mkPen(OUTLIER_RED, width=2) if _oom_alone(e) else pg.mkPen(None)
                for e in ov.ranks
            ]
            bars = pg.BarGraphItem(x=x, height=heights, width=0.7, brushes=brushes, pens=pens)
            p.addItem(bars)
            med = ov.medians.get(metric)
            if med is not None:
                line = pg.InfiniteLine(
                    pos=med * scale, angle=0, pen=pg.mkPen(fg, style=Qt.PenStyle.DashLine, width=1)
                )
                p.addItem(line)
            p.setXRange(-0.6, len(x) - 0.4, padding=0)
            p.setYRange(
                0, max(float(heights.max()) if len(heights) else 1.0, 1e-9) * 1.1, padding=0
            )
            self.plots[metric] = p
            self.bars[metric] = bars
            self.brushes[metric] = brushes

    def _on_click(self, ev) -> None:
        for p in self.plots.values():
            if p.sceneBoundingRect().contains(ev.scenePos()):
                x = p.vb.mapSceneToView(ev.scenePos()).x()
                i = int(round(x))
                if 0 <= i < len(self.ranks) and abs(x - i) <= 0.4:
                    self.rankClicked.emit(self.ranks[i])
                return


def _oom_alone(e: RankEntry) -> bool:
    """The rank ran out of memory while other ranks did not."""
    return any(r.startswith("ran out of memory") for r in e.outlier_reasons)


class RanksWindow(QMainWindow):
    """Overview of every rank of a directory; double-click opens one."""

    openRequested = Signal(str)
    loadFinished = Signal(str)  # "loaded" | "failed" | "cancelled"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("ranks — vramscope")
        self.overview: RankOverview | None = None
        self.loader: Job | None = None
        self.last_error: str | None = None

        self.caption = QLabel("Open a directory of per-rank snapshots")
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.caption.setWordWrap(True)
        self.caption.setToolTip("Outlier rule: " + OUTLIER_RULE)
        self.table = table_tree(
            COLUMNS,
            "One row per rank: the figures of its preferred snapshot (its OOM dump, "
            "else its latest); expand a rank to see all its files. Double-click to open one "
            "in the main window.",
            dict(enumerate((70, 96, 96, 110, 110, 100, 60, 70))),
        )
        self.table.itemDoubleClicked.connect(self._on_double_click)
        self.table.currentItemChanged.connect(self._on_current)
        self.chart = RanksChart()
        self.chart.rankClicked.connect(self.select_rank)
        self.reasons = QLabel()
        self.reasons.setWordWrap(True)
        self.reasons.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_button = QPushButton("Open in main window")
        self.open_button.setToolTip("Open the selected rank's snapshot (or the selected file)")
        self.open_button.clicked.connect(self.open_selected)
        self.open_button.setEnabled(False)

        self.split = RanksSplit()
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.chart)
        split.addWidget(self.table)
        split.addWidget(self.split)
        split.setSizes([230, 170, 360])
        bottom = QHBoxLayout()
        bottom.addWidget(self.reasons, 1)
        bottom.addWidget(self.open_button, 0, Qt.AlignmentFlag.AlignTop)
        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addWidget(self.caption)
        lay.addWidget(split, 1)
        lay.addLayout(bottom)
        self.setCentralWidget(central)
        self.resize(1280, 820)
        app = QApplication.instance()
        if app is not None:  # never leave a loader running past the event loop
            app.aboutToQuit.connect(self.cancel)

    # ------------------------------------------------------------------ loading
    def open_directory(self, directory: str | os.PathLike) -> Job:
        self.cancel()
        directory = os.fspath(directory)
        t = ranks_job(directory, self)
        t.progressed.connect(self._on_progress)
        t.done.connect(self._on_loaded)
        t.failed.connect(self._on_failed)
        t.cancelled.connect(self._on_cancelled)
        self.loader = t
        self.caption.setText(f"Loading {directory}…")
        self.setWindowTitle(f"{Path(directory).name}: ranks — vramscope")
        t.start()
        return t

    def is_loading(self) -> bool:
        return self.loader is not None

    def cancel(self) -> None:
        t = self.loader
        if t is not None:
            t.cancel()
            t.wait(30000)
        self.loader = None

    def closeEvent(self, event) -> None:
        self.cancel()
        super().closeEvent(event)

    def _on_progress(self, stage: str, _fraction: float) -> None:
        if self.sender() is self.loader and stage:
            self.statusBar().showMessage(f"Loading {stage}")

    def _on_loaded(self, overview: RankOverview) -> None:
        if self.sender() is not self.loader:
            return
        self.loader = None
        self.set_overview(overview)
        self.statusBar().showMessage(f"Loaded {plural(len(overview.ranks), 'rank')}", 5000)
        self.loadFinished.emit("loaded")

    def _on_failed(self, message: str) -> None:
        t = self.sender()
        if t is not self.loader:
            return
        self.loader = None
        self.last_error = f"{t.directory}: {message}"
        self.caption.setText(f"Could not open {t.directory}: {message}")
        self.loadFinished.emit("failed")

    def _on_cancelled(self) -> None:
        if self.sender() is self.loader:
            self.loader = None
            self.loadFinished.emit("cancelled")

    # ------------------------------------------------------------------ content
    def set_overview(self, ov: RankOverview) -> None:
        self.overview = ov
        outl = ov.outliers
        head = f"<b>{ov.directory}</b>: {plural(len(ov.ranks), 'rank')}" + (
            f" (world size {ov.world_size})" if ov.world_size else ""
        )
        if outl:
            # Each flagged rank with its first reason: two ranks flagged for different
            # things (one ran out of memory, the other holds more) read as such, not as
            # a contradiction.
            why = "; ".join(
                f"rank {e.rank}: {_html(_short_reason(e.outlier_reasons[0]))}" for e in outl[:4]
            )
            head += (
                f" · <span style='color:{OUTLIER_RED}'><b>outlier rank"
                f"{'s' if len(outl) > 1 else ''}: {', '.join(str(e.rank) for e in outl)}</b>"
                f"</span> ({why}{'; …' if len(outl) > 4 else ''})"
            )
        else:
            head += " · no outlier rank"
        if ov.skipped:
            head += f" · {len(ov.skipped)} file(s) without a rank skipped"
        self.caption.setText(head)
        self.chart.set_overview(ov)
        self._fill_table(ov)
        self.split.set_overview(ov)
        if outl:
            self.select_rank(outl[0].rank)

    def _fill_table(self, ov: RankOverview) -> None:
        self.table.clear()
        bold = QFont(self.table.font())
        bold.setBold(True)
        red = QBrush(QColor(OUTLIER_RED))
        for e in ov.ranks:
            frag = f"{e.fragmentation:.1%}" if e.fragmentation is not None else "?"
            item = QTreeWidgetItem(
                [
                    str(e.rank),
                    _b(e.reserved_bytes),
                    _b(e.allocated_bytes),
                    _b(e.peak_reserved_bytes),
                    _b(e.peak_allocated_bytes),
                    frag,
                    "yes" if e.oom else "no",
                    "yes" if e.outlier else "",
                    e.file.name,
                ]
            )
            item.setData(0, PATH_ROLE, e.file.path)
            item.setData(0, RANK_ROLE, e.rank)
            for c in range(1, 6):
                item.setTextAlignment(
                    c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                )
            tip = (
                [f"figures from {e.source}"]
                + e.outlier_reasons
                + ([e.verdict] if e.verdict else [])
            )
            if e.error:
                tip.append(f"could not load: {e.error}")
            for c in range(len(COLUMNS)):
                item.setToolTip(c, "\n".join(tip))
            if e.outlier:
                for c in range(len(COLUMNS)):
                    item.setForeground(c, red)
                    item.setFont(c, bold)
            for f in e.files:
                child = QTreeWidgetItem(
                    [
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        f.reason or "?",
                        "(shown)" if f is e.file else "",
                        f.name,
                    ]
                )
                child.setData(0, PATH_ROLE, f.path)
                child.setData(0, RANK_ROLE, e.rank)
                child.setToolTip(len(COLUMNS) - 1, f.path)
                item.addChild(child)
            self.table.addTopLevelItem(item)

    # ------------------------------------------------------------------ selection
    def rank_item(self, rank: int) -> QTreeWidgetItem | None:
        for i in range(self.table.topLevelItemCount()):
            item = self.table.topLevelItem(i)
            if item.data(0, RANK_ROLE) == rank:
                return item
        return None

    def select_rank(self, rank: int) -> None:
        item = self.rank_item(rank)
        if item is not None:
            self.table.setCurrentItem(item)

    def selected_path(self) -> str | None:
        item = self.table.currentItem()
        return item.data(0, PATH_ROLE) if item is not None else None

    def _on_current(self, current: QTreeWidgetItem | None, _prev) -> None:
        self.open_button.setEnabled(current is not None)
        if current is None or self.overview is None:
            self.reasons.setText("")
            return
        e = self.overview.entry(current.data(0, RANK_ROLE))
        lines = [
            f"<b>rank {e.rank}</b> · {Path(current.data(0, PATH_ROLE)).name} · "
            f"figures from {e.source}"
        ]
        lines += [f"<span style='color:{OUTLIER_RED}'>{_html(r)}</span>" for r in e.outlier_reasons]
        if e.verdict:
            lines.append(_html(e.verdict))
        if e.error:
            lines.append(f"could not load: {_html(e.error)}")
        self.reasons.setText("<br>".join(lines))

    def _on_double_click(self, item: QTreeWidgetItem, _col: int) -> None:
        path = item.data(0, PATH_ROLE)
        if path:
            self.openRequested.emit(path)

    def open_selected(self) -> None:
        path = self.selected_path()
        if path:
            self.openRequested.emit(path)


def _b(v) -> str:
    return format_bytes(v) if v is not None else "?"


def _short_reason(reason: str) -> str:
    """ "reserved 1.45 GiB is 1.13 GiB above the other ranks' median (326.00 MiB)" ->
    "reserved 1.13 GiB above the others'"."""
    import re

    m = re.match(r"(.+?) \S+ \S+ is (\S+ \S+) above", reason)
    return f"{m.group(1)} {m.group(2)} above the other ranks" if m else reason


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
