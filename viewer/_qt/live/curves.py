"""Live curves: the allocator's counters (and NVML's device use) over wall-clock time.

Fed at the stats rate (2 Hz) with ``memory_stats()`` counters, so the curve
moves between the slower trace updates; a bounded window (the last
``window_s`` seconds) keeps it cheap forever.  The y axis is the timeline's
(:class:`BytesYAxis`: round binary steps, 256 MiB, 512 MiB, 1 GiB…) and
starts at 0, as the timeline does, so both read the same.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from ...model.core.units import format_bytes
from ..timeline import BytesYAxis, curve_colors
from ..widgets import theme

SERIES = (
    ("reserved", "reserved_bytes.all.current", "Reserved"),
    ("allocated", "allocated_bytes.all.current", "Allocated"),
    ("active", "active_bytes.all.current", "Active"),
)
NVML_TITLE = "process on GPU (NVML)"


class LiveCurves(QWidget):
    """The counters of the last ``window_s`` seconds, one point per stats reply."""

    def __init__(self, window_s: float = 600.0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_s = window_s
        self.t0 = time.time()
        self.times: deque[float] = deque()
        self.values: dict[str, deque[int]] = {k: deque() for k, _, _ in SERIES}
        self.values["nvml"] = deque()
        self.y_axis = BytesYAxis("left")
        self.y_axis.setWidth(64)
        self.plot = pg.PlotWidget(axisItems={"left": self.y_axis})
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(x=False, y=False)  # a live view: it always shows the window
        self.plot.setLabel("bottom", "seconds since attach")
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.curves = {key: self.plot.plot([], []) for key, _, _ in SERIES}
        self.curves["nvml"] = self.plot.plot([], [])
        for key, curve in self.curves.items():
            curve.setZValue(5 if key == "reserved" else 4)
        self.plot.setToolTip(
            "The allocator's own counters (memory_stats) twice a second, "
            "and NVML's figure for the process when available"
        )
        # The legend is a label above the plot (as in the timeline): a legend inside
        # the plot hides the curves of a narrow dock.
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.legend.setToolTip(
            "reserved_bytes / allocated_bytes / active_bytes .all.current "
            "of memory_stats(); dashed: the process's memory on the GPU "
            "as NVML reports it (CUDA context and non-PyTorch memory "
            "included)"
        )
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 2, 0, 0)
        lay.setSpacing(1)
        lay.addWidget(self.legend)
        lay.addWidget(self.plot, 1)
        self.apply_palette()

    def apply_palette(self) -> None:
        """Follow the light / dark palette (background, axes, curve colours)."""
        self.plot.setBackground(theme.background())
        fg = theme.foreground()
        for name in ("left", "bottom"):
            ax = self.plot.getAxis(name)
            ax.setPen(pg.mkPen(fg))
            ax.setTextPen(pg.mkPen(fg))
        colors = curve_colors()
        # NVML's curve: the text colour, faded (the placeholder colour of some dark
        # palettes is nearly the background).
        nv = QColor(fg)
        nv.setAlpha(170)
        for key, curve in self.curves.items():
            if key == "nvml":
                curve.setPen(pg.mkPen(nv, width=1.5, style=Qt.PenStyle.DashLine))
            else:
                curve.setPen(
                    pg.mkPen(colors.get(key, "#888"), width=2 if key == "reserved" else 1.5)
                )
        parts = [
            f'<span style="color:{colors[k]}">&#9473;</span>&nbsp;{title.lower()}'
            for k, _, title in SERIES
        ]
        parts.append(f'<span style="color:{fg.name()}">&#9476;</span>&nbsp;{NVML_TITLE}')
        self.legend.setText("&nbsp; ".join(parts))

    def add(self, when: float, stats: dict, nvml_bytes: int | None = None) -> None:
        self.times.append(when - self.t0)
        for key, counter, _ in SERIES:
            self.values[key].append(int(stats.get(counter, 0) or 0))
        self.values["nvml"].append(nvml_bytes if nvml_bytes is not None else -1)
        while self.times and self.times[-1] - self.times[0] > self.window_s:
            self.times.popleft()
            for q in self.values.values():
                q.popleft()
        self._redraw()

    def count(self) -> int:
        return len(self.times)

    def last(self, key: str) -> int | None:
        q = self.values.get(key)
        return q[-1] if q else None

    def tick_labels(self) -> list[str]:
        """The y axis's labels as drawn now (tests)."""
        (_, _), (ya, yb) = self.plot.getViewBox().viewRange()
        size = self.plot.getViewBox().height() or 200.0
        out = []
        for spacing, _off in self.y_axis.tickSpacing(ya, yb, size):
            first = np.ceil(ya / spacing) * spacing
            values = list(np.arange(first, yb + spacing * 0.001, spacing))
            out += self.y_axis.tickStrings(values, 1.0, spacing)
        return out

    def _redraw(self) -> None:
        x = np.fromiter(self.times, dtype=float, count=len(self.times))
        top = 1.0
        for key, curve in self.curves.items():
            y = np.fromiter(self.values[key], dtype=float, count=len(self.times))
            if key == "nvml":
                keep = y >= 0
                curve.setData(x[keep], y[keep])
            else:
                curve.setData(x, y)
            if len(y):
                top = max(top, float(y.max()))
        vb = self.plot.getViewBox()
        vb.setYRange(0, top * 1.12, padding=0)
        if len(x):
            vb.setXRange(float(x[0]), max(float(x[-1]), float(x[0]) + 1.0), padding=0.02)

    def summary(self) -> str:
        """The latest point as one line (tooltips, tests)."""
        if not self.times:
            return ""
        return " · ".join(
            f"{title.lower()} {format_bytes(self.values[k][-1])}" for k, _, title in SERIES
        )
