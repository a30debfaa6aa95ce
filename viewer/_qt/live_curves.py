"""Live curves: the allocator's counters (and NVML's device use) over wall-clock time.

Fed at the stats rate (2 Hz) with ``memory_stats()`` counters, so the curve
moves between the slower trace updates; a bounded window (the last
``window_s`` seconds) keeps it cheap forever.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout, QWidget

from ..model.units import format_bytes
from . import theme
from .timeline_view import curve_colors

SERIES = (("reserved", "reserved_bytes.all.current", "Reserved"),
          ("allocated", "allocated_bytes.all.current", "Allocated"),
          ("active", "active_bytes.all.current", "Active"))


class _BytesAxis(pg.AxisItem):
    def tickStrings(self, values, scale, spacing):
        return [format_bytes(int(v)) for v in values]


class LiveCurves(QWidget):
    def __init__(self, window_s: float = 600.0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_s = window_s
        self.t0 = time.time()
        self.times: deque[float] = deque()
        self.values: dict[str, deque[int]] = {k: deque() for k, _, _ in SERIES}
        self.values["nvml"] = deque()
        self.plot = pg.PlotWidget(axisItems={"left": _BytesAxis("left")})
        self.plot.setMenuEnabled(False)
        self.plot.setBackground(theme.background())  # follow the light / dark palette
        for name in ("left", "bottom"):
            self.plot.getAxis(name).setTextPen(theme.foreground())
        self.plot.setLabel("bottom", "seconds since attach")
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.plot.addLegend(offset=(10, 5))
        colors = curve_colors()
        self.curves = {}
        for key, _, title in SERIES:
            self.curves[key] = self.plot.plot([], [], name=title,
                                              pen=pg.mkPen(colors.get(key, "#888"), width=2))
        self.curves["nvml"] = self.plot.plot([], [], name="Process on GPU (NVML)",
                                             pen=pg.mkPen("#888", width=1,
                                                                style=Qt.PenStyle.DashLine))
        self.plot.setToolTip("The allocator's own counters (memory_stats) twice a second, "
                             "and NVML's figure for the process when available")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.plot)

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

    def _redraw(self) -> None:
        x = np.fromiter(self.times, dtype=float, count=len(self.times))
        for key, curve in self.curves.items():
            y = np.fromiter(self.values[key], dtype=float, count=len(self.times))
            if key == "nvml":
                keep = y >= 0
                curve.setData(x[keep], y[keep])
            else:
                curve.setData(x, y)
