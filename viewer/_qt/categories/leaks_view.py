"""The Leaks view: lines of the user's code whose memory grows iteration after
iteration and is never freed, largest growth first, with a small chart of what each
iteration left behind.  Clicking a row asks the other views to highlight its blocks
(``allocationsSelected``: interval ids of the device's allocations) and shows its
stack (``stackSelected``).  The model does the work
(:class:`vramscope.viewer.model.categories.MemoryBreakdown`); this widget only draws."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...model.categories import Leak
from ...model.core.units import format_bytes, plural
from ..widgets import theme
from ..widgets.category_colors import ACCENT

COLUMNS = ("Line", "Function", "Per iteration", "Iterations", "Live now")
NO_LINE_LEAKS = (
    "No line leaks: no line of your code keeps more memory iteration after "
    "iteration, so there is no line to list and no growth to chart."
)
NOTHING_JUDGED = "No leaks listed: they could not be judged (see above)."


class LeaksView(QWidget):
    """A table of leaks and a per-iteration bar chart of the selected one."""

    allocationsSelected = Signal(object)  # np.ndarray of interval ids
    stackSelected = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.leaks: list[Leak] = []
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setToolTip(
            "Lines whose allocations survive iteration after iteration "
            "(the first iteration's one-off growth, e.g. optimizer state, "
            "and the last, still in use, are not judged). Ctrl+C copies."
        )
        self.table.itemSelectionChanged.connect(self._selected)
        self.chart = pg.PlotWidget(background=theme.background())
        self.chart.setMinimumHeight(110)
        self.chart.setMenuEnabled(False)
        self.chart.setMouseEnabled(False, False)
        self.chart.getAxis("left").setLabel("kept (MiB)")
        self.chart.getAxis("bottom").setLabel("iteration")
        self.chart.getAxis("left").enableAutoSIPrefix(False)
        self.bars: pg.BarGraphItem | None = None
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.chart)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        # Without a leak an empty table and an empty chart would read as "not drawn yet"
        # or as broken: a sentence saying there is nothing to list or chart instead.
        self.empty = _InPlaceOf(split)
        self.empty.setObjectName("noLeaks")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setStyleSheet(theme.caption_style(10))
        self.body = split
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.caption)
        lay.addWidget(split, 1)
        lay.addWidget(self.empty, 1)  # (one of the two shows: set_leaks, show_empty)
        # Ctrl+C in the table copies the leaks.  Not a QShortcut: one of the window's
        # context would be ambiguous with Edit > Copy stack (Ctrl+C then does nothing
        # anywhere); the table takes the key while it has the focus instead.
        self.table.installEventFilter(self)
        self.set_leaks([])

    def eventFilter(self, obj, event) -> bool:
        kind = event.type()
        if (
            obj is self.table
            and kind in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress)
            and event.matches(QKeySequence.StandardKey.Copy)
        ):
            event.accept()  # (ShortcutOverride accepted: the key comes here, not to a shortcut)
            if kind == QEvent.Type.KeyPress:
                self.copy()
            return True
        return super().eventFilter(obj, event)

    def set_leaks(self, leaks: list[Leak], iterations: int | str | None = None) -> None:
        """Show ``leaks`` (largest growth first); ``iterations``: how many were judged (a
        number of iterations, or their description: "3 generation requests (...)")."""
        self.leaks = list(leaks)
        self.table.setRowCount(len(self.leaks))
        for row, lk in enumerate(self.leaks):
            cells = (
                lk.frame,
                lk.function,
                format_bytes(lk.bytes_per_iteration),
                str(lk.iterations),
                format_bytes(lk.live_bytes),
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col >= 2:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                item.setToolTip(
                    lk.sentence() + (f"\n{lk.filename}:{lk.line}" if lk.filename else "")
                )
                self.table.setItem(row, col, item)
        if self.leaks:
            self.empty.hide()
            self.body.show()
            self.caption.setText(
                f"{len(self.leaks)} line(s) keep memory every iteration: "
                + self.leaks[0].sentence()
            )
            self.table.selectRow(0)
        else:
            judged = (
                (
                    f" in {iterations}"
                    if isinstance(iterations, str)
                    else f" in {plural(iterations, 'iteration')}"
                )
                if iterations
                else ""
            )
            self.caption.setText(
                f"No leak{judged}: nothing a line allocates survives iteration after iteration."
            )
            self._draw(None)
            self.show_empty(NO_LINE_LEAKS)

    def set_unavailable(self, why: str) -> None:
        """No leaks to show, and ``why`` (a file without a trace: not "no leak")."""
        self.set_leaks([])
        self.caption.setText(why)
        self.show_empty(NOTHING_JUDGED)

    def show_empty(self, text: str) -> None:
        """``text`` where the table and the chart are (there is no leak to list)."""
        self.empty.setText(text)
        self.body.hide()
        self.empty.show()

    def empty_text(self) -> str:
        """The sentence shown instead of the table and chart ("" while they show)."""
        return "" if self.empty.isHidden() else self.empty.text()

    def selected_leak(self) -> Leak | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        return self.leaks[rows[0].row()] if rows else None

    def _selected(self) -> None:
        lk = self.selected_leak()
        self._draw(lk)
        if lk is not None:
            self.allocationsSelected.emit(np.asarray(lk.allocations))
            if lk.stack >= 0:
                self.stackSelected.emit(int(lk.stack))

    def _draw(self, lk: Leak | None) -> None:
        if self.bars is not None:
            self.chart.removeItem(self.bars)
            self.bars = None
        empty = lk is None or not lk.per_iteration
        for side in ("bottom", "left"):  # no 0..1 ticks on an empty chart: nothing to read
            self.chart.getAxis(side).setStyle(showValues=not empty)
        if empty:
            self.chart.setToolTip("")
            self.chart.setXRange(0, 1, padding=0)  # (not the last leak's iterations)
            self.chart.setYRange(0, 1, padding=0)
            return
        heights = np.asarray(lk.per_iteration, float)
        self.bars = pg.BarGraphItem(
            x=np.arange(len(heights)), height=heights / 2**20, width=0.7, brush=ACCENT
        )
        self.chart.addItem(self.bars)
        self.chart.enableAutoRange()  # (an empty chart fixed its range at 0..1)
        self.chart.setToolTip(
            f"{lk.frame}: bytes each iteration left alive "
            f"({', '.join(format_bytes(int(h)) for h in heights)})"
        )

    def copy(self) -> None:
        """Every leak in words, to the clipboard."""
        QGuiApplication.clipboard().setText("\n".join(lk.sentence() for lk in self.leaks))


class _InPlaceOf(QLabel):
    """A sentence shown instead of ``other`` (hidden meanwhile) that asks for the room
    ``other`` would (its width at least, and its size hint): the tab's layout stays the
    same, and the window's minimum size is never raised by it."""

    def __init__(self, other: QWidget) -> None:
        super().__init__()
        self.other = other

    def sizeHint(self) -> QSize:
        return self.other.sizeHint()

    def minimumSizeHint(self) -> QSize:
        return QSize(self.other.minimumSizeHint().width(), 0)

    def hasHeightForWidth(self) -> bool:
        return False  # (its room is the other's, not its wrapped text's)

    def heightForWidth(self, _width: int) -> int:
        return -1
