"""What the memory is, per rank: the model's :func:`~...model.reports.ranks.split_table`
drawn as a table (one row per category, one column per rank, the words and figures of
``vramscope summary DIR``) and as stacked bars, one per rank, in the categories' colours.

Only draws: the split is computed with the overview, on the Ranks window's loader thread.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import QLabel, QSplitter, QTreeWidgetItem, QVBoxLayout, QWidget

from ...model.categories import CATEGORY_NAMES
from ...model.reports.ranks import SPLIT_HEAD, RankOverview, SplitRow, split_table
from ..widgets import theme
from ..widgets.category_colors import color
from ..widgets.plotting import byte_unit
from ..widgets.tables import table_tree

KEY_ROLE = Qt.ItemDataRole.UserRole + 3  # the row's key (a category name, "total", ...)


class RanksSplit(QWidget):
    """The split of every rank side by side; :meth:`set_overview` fills it."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[SplitRow] = []
        self.head = QLabel(SPLIT_HEAD[:1].upper() + SPLIT_HEAD[1:].rstrip(":"))
        self.head.setWordWrap(True)
        self.table = table_tree(
            ["Memory"],
            "Per rank, what its memory is at its requested peak: the split vramscope "
            "summary gives for the rank's file (DDP's gradient buckets are gradients)",
            {0: 150},
            roots=False,
        )
        self.chart = pg.PlotWidget()
        self.chart.setMinimumWidth(220)
        self.chart.setMenuEnabled(False)
        self.chart.hideButtons()
        self.chart.setMouseEnabled(x=False, y=False)
        self.bars: dict[str, pg.BarGraphItem] = {}
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(self.chart)
        split.setSizes([760, 420])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.head)
        lay.addWidget(split, 1)

    def set_overview(self, ov: RankOverview | None) -> None:
        self.rows = split_table(ov) if ov is not None else []
        self._fill_table(ov)
        self._draw_bars(ov)

    def _fill_table(self, ov: RankOverview | None) -> None:
        t = self.table
        t.clear()
        ranks = ov.ranks if ov is not None else []
        t.setColumnCount(1 + len(ranks))
        t.setHeaderLabels(["Memory", *(f"rank {e.rank}" for e in ranks)])
        if not self.rows:
            if ov is not None:
                t.addTopLevelItem(
                    QTreeWidgetItem(["no rank's file has a trace to split it by category"])
                )
            return
        for row in self.rows:
            item = QTreeWidgetItem([row.label.strip(), *row.cells()])
            item.setData(0, KEY_ROLE, row.key)
            if row.key in CATEGORY_NAMES:
                item.setIcon(0, _swatch(color(row.key)))
            for c in range(1, 1 + len(ranks)):
                item.setTextAlignment(
                    c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                )
            if row.label.startswith(" "):  # a part of the row above it
                item.setText(0, "  " + row.label.strip())
            t.addTopLevelItem(item)
        # Columns as wide as their figures, side by side (a stretched last rank would
        # stand apart from the others).
        t.header().setStretchLastSection(False)
        for c in range(1, 1 + len(ranks)):
            t.resizeColumnToContents(c)
            t.setColumnWidth(c, max(t.columnWidth(c) + 8, 64))

    def _draw_bars(self, ov: RankOverview | None) -> None:
        p = self.chart.getPlotItem()
        p.clear()
        self.bars = {}
        self.chart.setBackground(theme.background())
        cats = [r for r in self.rows if r.key in CATEGORY_NAMES]
        if ov is None or not cats:
            return
        fg = theme.foreground()
        totals = [sum(v or 0 for v in vals) for vals in zip(*(r.values for r in cats))]
        unit, size = byte_unit(max(totals, default=0))
        x = np.arange(len(ov.ranks), dtype=float)
        bottom = np.zeros(len(x))
        for r in cats:
            h = np.array([(v or 0) / size for v in r.values], float)
            bars = pg.BarGraphItem(
                x=x, y0=bottom.copy(), height=h, width=0.6, brush=color(r.key), pen=pg.mkPen(None)
            )
            p.addItem(bars)
            self.bars[r.key] = bars
            bottom += h
        for name in ("bottom", "left"):
            ax = p.getAxis(name)
            ax.setPen(pg.mkPen(fg))
            ax.setTextPen(pg.mkPen(fg))
        p.getAxis("bottom").setTicks([[(i, str(e.rank)) for i, e in enumerate(ov.ranks)]])
        p.setLabel("bottom", "rank")
        p.setTitle(f"at each rank's requested peak ({unit})", color=fg)
        p.setXRange(-0.6, len(x) - 0.4, padding=0)
        p.setYRange(0, max(float(bottom.max()), 1e-9) * 1.05, padding=0)


def _swatch(c: QColor) -> QIcon:
    pm = QPixmap(10, 10)
    pm.fill(c)
    return QIcon(pm)
