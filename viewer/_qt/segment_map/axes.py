"""The segment map's axes (byte offsets, one label per row) and its view box."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt

from ..widgets.plotting import short_bytes


class BytesAxis(pg.AxisItem):
    """Byte offsets with power-of-two ticks (4 MiB, 8 MiB, ...)."""

    def tickSpacing(self, minVal, maxVal, size):
        dif = abs(maxVal - minVal)
        if dif <= 0 or size <= 0:
            return []
        raw = dif / max(1.0, size / 90.0)
        major = 2.0 ** math.ceil(math.log2(max(raw, 1.0)))
        return [(major, 0), (major / 4, 0)]

    def tickStrings(self, values, scale, spacing):
        return [short_bytes(v) for v in values]


class SegmentAxis(pg.AxisItem):
    """One label per row (segment address and size) when rows are tall enough."""

    MIN_PX = 16

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.labels: list[str] = []

    def tickValues(self, minVal, maxVal, size):
        n = len(self.labels)
        if minVal > maxVal:  # inverted axis
            minVal, maxVal = maxVal, minVal
        if not n or size <= 0 or maxVal <= minVal:
            return []
        px_per_row = size / (maxVal - minVal)
        step = max(1, int(math.ceil(self.MIN_PX / px_per_row)))
        first = max(0, int(math.floor(minVal)))
        first -= first % step
        last = min(n - 1, int(math.ceil(maxVal)))
        rows = [r + 0.5 for r in range(first, last + 1, step)]
        return [(float(step), rows)]

    def tickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            r = int(math.floor(v))
            out.append(self.labels[r] if 0 <= r < len(self.labels) else "")
        return out

    def set_labels(self, labels: list[str]) -> None:
        """New row labels.  pyqtgraph caches the axis as a picture that it redraws
        only when the range or size changes: a new layout at the same range (the
        time cursor moved) must drop it, or the old rows' labels stay."""
        self.labels = labels
        self.picture = None
        self.update()


class MapViewBox(pg.ViewBox):
    """Wheel scrolls rows; Ctrl+wheel zooms bytes (x); Shift+wheel zooms rows; drag pans."""

    ROWS_PER_NOTCH = 3

    def wheelEvent(self, ev, axis=None):
        delta = ev.delta()
        if not delta:
            ev.ignore()
            return
        mods = ev.modifiers()
        center = self.mapToView(ev.pos())
        factor = 1.02 ** (-delta / 8.0)
        if ev.orientation() == Qt.Orientation.Horizontal:
            (xa, xb), _ = self.viewRange()
            self.translateBy(x=-(xb - xa) * delta / 1200.0)
        elif mods & Qt.KeyboardModifier.ControlModifier:
            self.scaleBy((factor, 1.0), center=center)
        elif mods & Qt.KeyboardModifier.ShiftModifier:
            self.scaleBy((1.0, factor), center=center)
        else:
            self.translateBy(y=-delta / 120.0 * self.ROWS_PER_NOTCH)
        ev.accept()
        self.sigRangeChangedManually.emit(self.state["mouseEnabled"])
