"""The Over-time view's chart: A's and B's memory curves on one aligned axis, the spans
as alternating bands, and one cursor.

Reserved solid, allocated dashed, A and B in two colours; x is the aligned axis of
:mod:`vramscope.viewer.model.reports.aligned_axis` (``iteration i`` under each span, or
``% of the run``).  The curves are decimated to the plot's pixel columns (minimum and
maximum per column) again on every zoom.  A click or a drag moves the cursor; Left / Right
step it one span.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QCursor, QFontMetrics
from PySide6.QtWidgets import QLabel, QToolTip, QVBoxLayout, QWidget

from ...model.reports.aligned_axis import SpanAxis
from ...model.view.curve_lod import decimate
from ..timeline import BytesYAxis, VerticalBandsItem
from ..widgets import theme

A_COLOR = "#1f77b4"  # A: blue
B_COLOR = "#d95f02"  # B: orange (apart from blue for every common colour vision)
CURSOR_COLOR = "#c62828"
BAND_ALPHA = 26


def legend_html(names: tuple[str, str]) -> str:
    """ "A: <file>" and "B: <file>" in their colours, then what solid and dashed mean."""
    muted = theme.muted().name()
    parts = [
        f'<span style="color:{c}">&#9473;&#9473;</span>&nbsp;{side}: {_html(name)}'
        for side, c, name in (("A", A_COLOR, names[0]), ("B", B_COLOR, names[1]))
    ]
    parts.append(f'<span style="color:{muted}">&#9473;&#9473;</span>&nbsp;reserved')
    parts.append(f'<span style="color:{muted}">&#9476;&#9476;</span>&nbsp;allocated')
    return "&nbsp;&nbsp;&nbsp; ".join(parts)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SpanAxisItem(pg.AxisItem):
    """The aligned x axis: ``iteration i`` under each span (as many as fit), or
    percentages of the run at the span boundaries."""

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.labels: list[str] = []
        self.by = "iteration"

    def set_spans(self, labels: list[str], by: str) -> None:
        self.labels, self.by = list(labels), by
        self.picture = None
        self.update()

    def _label_px(self) -> float:
        fm = QFontMetrics(self.style.get("tickFont") or self.font())
        widest = max((fm.horizontalAdvance(t) for t in self.labels), default=40)
        return widest + 16.0

    def tickValues(self, minVal, maxVal, size):
        n = len(self.labels)
        if not n or maxVal <= minVal or size <= 0:
            return super().tickValues(minVal, maxVal, size)
        per_span = size / (maxVal - minVal)
        need = self._label_px() if self.by == "iteration" else 48.0
        step = next(
            (
                s
                for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
                if s * per_span >= need
            ),
            10000,
        )
        if self.by == "iteration":
            values = [i + 0.5 for i in range(0, n, step) if minVal <= i + 0.5 <= maxVal]
        else:
            values = [float(i) for i in range(0, n + 1, step) if minVal <= i <= maxVal]
        return [(float(step), values)]

    def tickStrings(self, values, scale, spacing):
        n = len(self.labels)
        if not n:
            return super().tickStrings(values, scale, spacing)
        if self.by == "iteration":
            return [self.labels[int(v)] if 0 <= int(v) < n else "" for v in values]
        return [f"{v * 100 / n:g} %" for v in values]


class _Keys(QObject):
    """Left / Right on the plot step the cursor one span (before the view scrolls)."""

    def __init__(self, chart: "AlignedChart") -> None:
        super().__init__(chart)
        self.chart = chart

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.KeyPress and event.key() in (
            Qt.Key.Key_Left,
            Qt.Key.Key_Right,
        ):
            self.chart.step(-1 if event.key() == Qt.Key.Key_Left else 1)
            return True
        return False


class AlignedChart(QWidget):
    """The two recordings' curves on the aligned axis, with the cursor (``cursorMoved``:
    its x, on every move; coalesced for the maps by the pane)."""

    cursorMoved = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.axis: SpanAxis | None = None
        self.by = "iteration"
        self.tooltips: list[str] = []  # per span: what its band's tooltip says
        self.names = ("A", "B")
        # per side: x of every event and the curves ("reserved", "allocated")
        self.data: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]] = {}
        self.x_axis = SpanAxisItem("bottom")
        self.y_axis = BytesYAxis("left")
        self.plot = pg.PlotWidget(axisItems={"bottom": self.x_axis, "left": self.y_axis})
        pi = self.plot.getPlotItem()
        pi.hideButtons()
        pi.setMenuEnabled(False)
        pi.showGrid(x=False, y=True, alpha=0.15)
        self.vb = pi.getViewBox()
        self.vb.setMouseEnabled(x=True, y=False)  # wheel zooms time; bytes stay whole
        self.plot.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.plot.installEventFilter(_Keys(self))
        self.bands = VerticalBandsItem()
        self.bands.setZValue(-20)
        self.plot.addItem(self.bands, ignoreBounds=True)
        # The legend above the plot, not over it: the curves' tops stay readable.
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setContentsMargins(6, 0, 6, 0)
        self.curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        for side, color in (("a", A_COLOR), ("b", B_COLOR)):
            for curve, style in (
                ("reserved", Qt.PenStyle.SolidLine),
                ("allocated", Qt.PenStyle.DashLine),
            ):
                item = pg.PlotDataItem(pen=pg.mkPen(color, width=1.4, style=style), antialias=False)
                item.setZValue(2 if curve == "reserved" else 1)
                self.plot.addItem(item)
                self.curves[(side, curve)] = item
        self.cursor = pg.InfiniteLine(
            angle=90,
            movable=True,
            pen=pg.mkPen(CURSOR_COLOR, width=2),
            hoverPen=pg.mkPen(CURSOR_COLOR, width=4),
        )
        self.cursor.setZValue(10)
        self.cursor.setToolTip(
            "The cursor: both maps show their recording here. Drag it, "
            "click the chart, or press Left / Right to step one span"
        )
        self.plot.addItem(self.cursor, ignoreBounds=True)
        self.cursor.sigPositionChanged.connect(self._on_cursor_dragged)
        self.plot.scene().sigMouseClicked.connect(self._on_click)
        self.plot.scene().sigMouseMoved.connect(self._on_hover)
        self._redraw_timer = QTimer(self)
        self._redraw_timer.setSingleShot(True)
        self._redraw_timer.setInterval(15)
        self._redraw_timer.timeout.connect(self.redraw_curves)
        self.vb.sigXRangeChanged.connect(lambda *_: self._redraw_timer.start())
        self.vb.sigResized.connect(lambda *_: self._redraw_timer.start())
        self.plot.setToolTip(
            "A's and B's memory on one axis: each span (iteration) takes "
            "the same width on both sides, its events spread across it.\n"
            "Solid: reserved; dashed: allocated. Wheel: zoom; drag: pan."
        )
        self.plot.setBackground(theme.background())
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.legend)
        lay.addWidget(self.plot, 1)

    # ------------------------------------------------------------------ content
    def set_data(
        self,
        axis: SpanAxis,
        by: str,
        names: tuple[str, str],
        sides: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]],
        tooltips: list[str],
    ) -> None:
        """Show ``sides`` ("a"/"b": x per event and curves) on ``axis``; ``names``: the
        files' base names for the legend; ``tooltips``: per span, its band's text."""
        self.axis, self.by, self.data, self.tooltips = axis, by, sides, list(tooltips)
        self.x_axis.set_spans(axis.labels, by)
        self.plot.getPlotItem().setLabel(
            "bottom", "aligned iterations" if by == "iteration" else "% of the run"
        )
        self.names = names
        self.legend.setText(legend_html(names))
        fg = theme.foreground()
        shade, edge = QColor(fg), QColor(fg)
        shade.setAlpha(BAND_ALPHA)
        edge.setAlpha(BAND_ALPHA // 2)
        bands = [(float(i), float(i + 1), "", shade) for i in range(1, axis.n_spans, 2)]
        lo, hi = axis.x_range
        if axis.lead:
            bands.append((lo, 0.0, "", edge))
        if axis.tail:
            bands.append((float(axis.n_spans), hi, "", edge))
        self.bands.set_bands(bands)
        top = max(
            (float(c.max()) for _x, cs in sides.values() for c in cs.values() if len(c)),
            default=1.0,
        )
        self.vb.setLimits(xMin=lo, xMax=hi, yMin=0, yMax=top * 1.08)
        self.vb.setRange(xRange=(lo, hi), yRange=(0, top * 1.08), padding=0)
        self.redraw_curves()

    def redraw_curves(self) -> None:
        """Each curve at the plot's resolution over the visible x range."""
        (lo, hi), _ = self.vb.viewRange()
        columns = max(int(self.vb.width()), 200)
        for (side, curve), item in self.curves.items():
            got = self.data.get(side)
            if got is None:
                item.setData([], [])
                continue
            x, cs = got
            xs, ys = decimate(x, cs[curve], 0, len(x) - 1, columns, minmax=True, x_range=(lo, hi))
            item.setData(xs, ys)

    def drawn_points(self, side: str, curve: str) -> int:
        """Points a curve draws now (for tests: decimated to the pixels)."""
        xs, _ys = self.curves[(side, curve)].getData()
        return 0 if xs is None else len(xs)

    # ------------------------------------------------------------------ cursor
    def cursor_x(self) -> float:
        return float(self.cursor.value())

    def set_cursor(self, x: float) -> None:
        """Move the cursor to ``x`` (clamped to the axis) and say so."""
        if self.axis is not None:
            lo, hi = self.axis.x_range
            x = float(min(max(x, lo), hi - 1e-9))
        self.cursor.blockSignals(True)
        self.cursor.setValue(x)
        self.cursor.blockSignals(False)
        self.cursorMoved.emit(float(x))

    def step(self, d: int) -> None:
        """One span left (-1) or right (+1), at the same place inside the span."""
        if self.axis is None or not self.axis.n_spans:
            return
        x = self.cursor_x() + d
        lo, hi = self.axis.x_range
        if x < 0 or x > self.axis.n_spans:  # stepping stays on the spans
            x = min(max(x, 0.0), self.axis.n_spans - 1e-6)
        if lo <= x <= hi:
            self.set_cursor(x)
            (va, vb_), _ = self.vb.viewRange()
            if not va <= x <= vb_:
                self.vb.translateBy(x=x - (va + vb_) / 2)

    def _on_cursor_dragged(self, *_args) -> None:
        self.set_cursor(self.cursor_x())

    def _on_click(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton or self.axis is None:
            return
        pos = ev.scenePos()
        if not self.vb.sceneBoundingRect().contains(pos):
            return
        ev.accept()
        self.plot.setFocus()
        self.set_cursor(self.vb.mapSceneToView(pos).x())

    def _on_hover(self, pos) -> None:
        if self.axis is None or not self.vb.sceneBoundingRect().contains(pos):
            return
        i = self.axis.span_of(self.vb.mapSceneToView(pos).x())
        text = self.band_tooltip(i)
        if text:
            QToolTip.showText(QCursor.pos(), text, self.plot)

    def band_tooltip(self, i: int) -> str:
        """What the band of span ``i`` says on hover (its peak phase on each side)."""
        if 0 <= i < len(self.tooltips):
            return self.tooltips[i]
        if self.axis is not None:
            return self.axis.where(i + 0.5 if i >= 0 else -1e-9)
        return ""
