"""The Diagnosis panel's chart: the recorded reserved curve, a remedy's prediction, the limit.

A simulated remedy is its reserved curve; an estimated one its predicted peak as a
dashed level; an estimate with a range (a batch prediction hanging on cuDNN-like
workspaces) a shaded band.  The legend sits below the chart, in the plot's own
layout (as the What-if panel's), never over the curves or the limit.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from ...model.core.units import format_bytes as fb
from ..timeline.overlay import overlay_color
from ..widgets import theme
from ..widgets.plotting import set_byte_axis

LIMIT_OFF_CHART = 3  # a limit above this many times the highest curve is left off the y range


class RemedyChart(pg.PlotWidget):
    """Reserved bytes over trace events: recorded, predicted, limit (see the module); the
    y axis in the unit the shown values read best in (MiB under 1 GiB), :attr:`unit`
    bytes each."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setBackground(theme.background())
        self.showGrid(x=True, y=True, alpha=0.2)
        self.unit = set_byte_axis(self, "left", "reserved", 1 << 30)
        self.setLabel("bottom", "trace event")
        self.setDownsampling(auto=True, mode="peak")
        self.setClipToView(True)
        self.legend = pg.LegendItem(offset=None, colCount=3, labelTextColor=theme.foreground())
        self.getPlotItem().layout.addItem(self.legend, 4, 1)

    def show_remedy(self, case, a, rem, title: str = "") -> None:
        """The recorded reserved curve of ``case``, ``rem``'s prediction (None: none),
        named ``title`` (empty: the remedy's own), and the advice ``a``'s memory limit."""
        title = title or (rem.title if rem is not None else "")
        self.clear()
        self.legend.clear()
        rec = case.recorded_run()
        x = case.curve_x().astype(np.float64)
        fg = theme.foreground()
        top = float(rec.reserved.max()) if len(rec.reserved) else 0.0
        rng = rem.predicted_peak_reserved_range if rem is not None else None
        simulated = rem is not None and rem.curve is not None and len(rem.curve)
        if rng is not None:
            top = max(top, float(rng[1]))
        if simulated:
            top = max(top, float(rem.curve.max()))
        elif rem is not None:
            top = max(top, float(rem.predicted_peak_reserved_bytes))
        lim = a.memory_limit_bytes
        # A limit far above the curves (the whole GPU for a run that fits easily)
        # would flatten them to the axis: the chart keeps to the curves and says so.
        above = bool(lim) and lim > LIMIT_OFF_CHART * top
        if lim and not above:
            top = max(top, float(lim))
        # The unit from what is drawn: a run under 1 GiB reads in MiB.
        u = self.unit = set_byte_axis(self, "left", "reserved", top)
        self.plot(x, rec.reserved / u, pen=pg.mkPen(fg, width=2.0))
        self.legend.addItem(self.listDataItems()[-1], "recorded")
        color = overlay_color()
        if rng is not None:
            lo, hi = rng
            shade = pg.mkColor(color)
            shade.setAlpha(45)
            self.addItem(
                pg.LinearRegionItem(
                    (lo / u, hi / u),
                    orientation="horizontal",
                    movable=False,
                    brush=pg.mkBrush(shade),
                    pen=pg.mkPen(None),
                )
            )
            self.legend.addItem(
                pg.BarGraphItem(x=[0], height=[1], width=1, brush=shade),
                f"estimate {fb(lo)} - {fb(hi)}",
            )
        if simulated:
            cx = rem.curve_x.astype(np.float64)
            curve = self.plot(
                cx, rem.curve / u, pen=pg.mkPen(color, width=1.8), name=f"{title} (simulated)"
            )
            self.legend.addItem(curve, "predicted: " + _short(title))
        elif rem is not None:
            pen = pg.mkPen(color, width=1.8, style=Qt.PenStyle.DashLine)
            self.addItem(pg.InfiniteLine(rem.predicted_peak_reserved_bytes / u, angle=0, pen=pen))
            self.legend.addItem(
                pg.PlotDataItem([], [], pen=pen),
                f"estimated peak: {_short(title)} {fb(rem.predicted_peak_reserved_bytes)}",
            )
        if lim:
            pen = pg.mkPen(theme.muted(), width=1, style=Qt.PenStyle.DashLine)
            self.addItem(pg.InfiniteLine(lim / u, angle=0, pen=pen))
            self.legend.addItem(
                pg.PlotDataItem([], [], pen=pen),
                f"memory limit {fb(lim)}" + (" (above the chart)" if above else ""),
            )
        self.setYRange(0, max(top, 1.0) * 1.05 / u, padding=0)
        self.enableAutoRange(axis="x")


def _short(title: str, most: int = 60) -> str:
    return title if len(title) <= most else title[: most - 1] + "…"
