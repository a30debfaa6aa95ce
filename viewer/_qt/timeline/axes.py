"""The timeline's axes (bytes in the header's unit, events or time) and its view box."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt

from ..widgets.plotting import short_bytes
from .constants import X_EVENTS, X_TIME


class BytesYAxis(pg.AxisItem):
    """Bytes at round binary units: 0, 2 GiB, 4 GiB…  Once the range reaches 1 GiB the
    ticks are in GiB (0.5 GiB, 1 GiB, 1.5 GiB), the unit of the header's figures: never
    "1500 MiB" beside a header saying "1.34 GiB"."""

    def tickSpacing(self, minVal, maxVal, size):
        dif = abs(maxVal - minVal)
        if dif <= 0 or size <= 0:
            return []
        target = dif / max(1.0, size / 40.0)
        if max(abs(minVal), abs(maxVal)) >= (1 << 30):
            unit, steps = 1 << 30, (0.125, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100)
        else:
            unit = 1 << 20 if target >= (1 << 19) else 1 << 10
            steps = (0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000)
        x = target / unit
        for m in steps:
            if m >= x:
                return [(m * unit, 0)]
        return [(steps[-1] * unit * math.ceil(x / steps[-1]), 0)]

    def tickStrings(self, values, scale, spacing):
        top = max((abs(v) for v in values), default=0)
        if top >= (1 << 30):
            return [f"{v / (1 << 30):g} GiB" if v else "0" for v in values]
        # In the unit of the spacing: 500 MiB, 1000 MiB (below 1 GiB).
        for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
            if spacing >= unit:
                return [f"{v / unit:g} {name}" if v else "0" for v in values]
        return [short_bytes(v) for v in values]


def event_tick_step(span: float, pixels: float, label_px: float) -> float:
    """A round step (1, 2, 2.5, 5 x 10^n; never below one event) between event ticks so
    that labels ``label_px`` wide never touch over ``pixels``: "200,000  400,000", not
    "200000400000" run together, and one tick at 0 for a one-event trace."""
    if span <= 0 or pixels <= 0:
        return 1.0
    most = max(1.0, pixels / max(label_px, 1.0))  # labels that fit side by side
    raw = span / most
    base = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * base >= raw:
            return max(1.0, m * base)
    return max(1.0, 10 * base)


class XAxis(pg.AxisItem):
    """Event index (thousands separators) or time relative to the first event."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.mode = X_EVENTS

    def tickSpacing(self, minVal, maxVal, size):
        if self.mode != X_EVENTS:
            return super().tickSpacing(minVal, maxVal, size)
        # Whole events only, spaced for labels as wide as the largest one.
        chars = len(f"{int(max(abs(minVal), abs(maxVal))):,}") + 1
        step = event_tick_step(maxVal - minVal, size, chars * 7.5 + 12)
        return [(step, 0)]

    def tickStrings(self, values, scale, spacing):
        if self.mode == X_TIME:
            if spacing >= 1:
                return [f"{v:.0f} s" if spacing >= 1 else f"{v:.1f} s" for v in values]
            if spacing >= 0.1:
                return [f"{v:.1f} s" for v in values]
            if spacing >= 1e-3:
                return [f"{v * 1e3:.0f} ms" for v in values]
            return [f"{v * 1e6:.0f} µs" for v in values]
        return [f"{int(round(v)):,}" if v >= 0 else "" for v in values]


class TimelineViewBox(pg.ViewBox):
    """Wheel zooms x around the mouse; drag pans x; y follows the data."""

    def wheelEvent(self, ev, axis=None):
        delta = ev.delta()
        if not delta:
            ev.ignore()
            return
        if ev.orientation() == Qt.Orientation.Horizontal:
            (xa, xb), _ = self.viewRange()
            self.translateBy(x=-(xb - xa) * delta / 1200.0)
        else:
            center = self.mapToView(ev.pos())
            self.scaleBy((1.02 ** (-delta / 8.0), 1.0), center=center)
        ev.accept()
        self.sigRangeChangedManually.emit(self.state["mouseEnabled"])


# --------------------------------------------------------------------------- panel
