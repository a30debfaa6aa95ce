"""Memory over time coloured by what it is: requested bytes stacked by category
(parameters at the bottom, then gradients, optimizer state, activations,
temporaries, inputs, unknown), with the iterations and their phases as bands.

Level of detail: the curves are sampled at the events of each horizontal pixel
column's lowest and highest requested bytes in the visible range (a min/max
decimation, :func:`~vramscope.viewer.model.view.curve_lod.decimate` with ``minmax``;
``MemoryBreakdown.category_curves``: O((allocations + samples) log allocations)),
recomputed when the view changes, so 10M events stay interactive and every
iteration's peak shows; the view's iterations' peak events are sampled too.
x is the event index (whole events, thousands separators).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QVBoxLayout, QWidget

from ...model.categories.iterations import PHASE_NAMES
from ...model.categories.reasons import CATEGORY_LABELS, CATEGORY_NAMES
from ...model.core.units import format_bytes
from ...model.view.curve_lod import decimate
from ..timeline.axes import XAxis
from ..timeline.items import VerticalBandsItem
from ..widgets import theme
from ..widgets.category_colors import ACCENT, CATEGORY_COLORS

if TYPE_CHECKING:
    from ...model.categories.breakdown import MemoryBreakdown

PHASE_COLORS = {"forward": "#ff7f0e", "backward": "#9467bd", "optimizer": "#2ca02c"}


class CategoryTimeline(QWidget):
    """Stacked category areas over events, iteration bands, a cursor line.

    ``eventClicked(k)``: the user clicked at event ``k`` (for time travel)."""

    eventClicked = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.bd: MemoryBreakdown | None = None
        self.plot = pg.PlotWidget(
            background=theme.background(), axisItems={"bottom": XAxis("bottom")}
        )
        self.plot.getAxis("bottom").enableAutoSIPrefix(False)  # (never "event (x0.001)")
        self.plot.setMenuEnabled(False)
        self.plot.getAxis("bottom").setLabel("event")
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.unit = (2**30, "GiB")
        self.plot.addLegend(offset=(10, 10))
        self.curves: list[pg.PlotDataItem] = []
        self.fills: list[pg.FillBetweenItem] = []
        # The iterations' bands: one batched item (VerticalBandsItem), not one each.
        self.band_item = VerticalBandsItem()
        self.band_item.setZValue(-10)
        self.plot.addItem(self.band_item, ignoreBounds=True)
        self._band_starts = np.zeros(0, np.int64)
        self._sampled = None  # (breakdown, first, last event, width) of the samples shown
        self.cursor = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(ACCENT, width=1))
        self.plot.addItem(self.cursor)
        self.cursor.hide()
        self.samples = np.zeros(0, np.int64)
        self.stacked = np.zeros((len(CATEGORY_NAMES), 0))
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.plot)
        self.plot.getViewBox().sigXRangeChanged.connect(lambda *_: self._resample())
        # (built while its tab is hidden: sampled again for the width it shows at)
        self.plot.getViewBox().sigResized.connect(lambda *_: self._resample())
        self.plot.scene().sigMouseClicked.connect(self._clicked)
        self.plot.scene().sigMouseMoved.connect(self._hovered)

    @property
    def bands(self) -> list:
        """The iterations' bands: (x0, x1, label, colour) each."""
        return self.band_item.bands

    def iteration_at(self, x: float):
        """The iteration whose band covers event ``x``, or None."""
        bd = self.bd
        if bd is None or not len(self._band_starts):
            return None
        i = int(np.searchsorted(self._band_starts, x + 0.5, side="right")) - 1
        if i < 0:
            return None
        it = bd.iterations[i]
        return it if it.start - 0.5 <= x <= it.end + 0.5 else None

    def _hovered(self, pos) -> None:
        p = self.plot.getViewBox().mapSceneToView(pos)
        it = self.iteration_at(p.x())
        self.plot.setToolTip(
            ""
            if it is None
            else (
                f"iteration {it.index} ({it.kind}{'' if it.complete else ', cut short'}): "
                f"events {it.start}-{it.end}, peak {format_bytes(it.peak_bytes)} in its "
                f"{it.peak_phase} phase"
            )
        )

    def set_breakdown(self, bd: MemoryBreakdown | None) -> None:
        """Show ``bd`` (None: empty), the whole trace in view."""
        self.bd = bd
        self._sampled = None
        for item in self.curves + self.fills:
            self.plot.removeItem(item)
        self.curves, self.fills = [], []
        self.band_item.set_bands([])
        self._band_starts = np.zeros(0, np.int64)
        legend = self.plot.plotItem.legend
        if legend is not None:
            legend.clear()
        if bd is None or bd.n_events == 0:
            # Empty: not the last file's events and bytes (nor negative ones around 0).
            self.samples = np.zeros(0, np.int64)
            self.stacked = np.zeros((len(CATEGORY_NAMES), 0))
            self.cursor.hide()
            self.plot.setToolTip("")
            self.plot.setXRange(0, 1, padding=0)
            self.plot.setYRange(0, 1, padding=0)
            return
        # Iteration bands: alternate shading, one batched item that paints only what is
        # visible (thousands of iterations in a long trace: one item each took seconds);
        # the tooltip of the iteration under the mouse is looked up on hover.
        shades = []
        for a in (12, 28):
            shade = QColor(theme.muted())
            shade.setAlpha(a)
            shades.append(shade)
        its = bd.iterations
        self.band_item.set_bands(
            [(it.start - 0.5, it.end + 0.5, "", shades[it.index % 2]) for it in its]
        )
        self._band_starts = np.array([it.start for it in its], np.int64)
        zero = pg.PlotDataItem([], [])
        prev = zero
        for c, name in enumerate(CATEGORY_NAMES):
            col = QColor(CATEGORY_COLORS[name])
            # No outline: with two samples a pixel column (its min and its max) a line
            # zigzags between them and paints the column over the areas below it; the
            # curve is only the fills' edge.
            curve = pg.PlotDataItem([], [], pen=pg.mkPen(QColor(0, 0, 0, 0), width=0))
            fill_col = QColor(col)
            fill_col.setAlpha(200)
            fill = pg.FillBetweenItem(prev, curve, brush=fill_col)
            self.plot.addItem(fill)
            self.plot.addItem(curve)
            legend.addItem(curve, CATEGORY_LABELS[c]) if legend is not None else None
            self.curves.append(curve)
            self.fills.append(fill)
            prev = curve
        self._zero = zero
        self.plot.enableAutoRange(axis="y")  # (an empty chart fixed it at 0..1)
        # (half an event each side: a one-event trace is one event wide, centred on 0)
        self.plot.setXRange(-0.5, bd.n_events - 0.5, padding=0.01)
        self._resample()

    def _resample(self) -> None:
        bd = self.bd
        if bd is None or not self.curves:
            return
        (x0, x1), _ = self.plot.getViewBox().viewRange()
        lo = max(0, int(np.floor(x0)))
        hi = min(bd.n_events - 1, int(np.ceil(x1)))
        if hi < lo:
            return
        width = max(200, int(self.plot.width()))
        key = (id(bd), lo, hi, width)
        if key == self._sampled:
            return  # (set_breakdown's setXRange already sampled this view)
        self._sampled = key
        events, _ = decimate(None, bd.requested, lo, hi, width, minmax=True)
        peaks = [it.peak_event for it in bd.iterations if lo <= it.peak_event <= hi]
        events = np.union1d(events, np.asarray(peaks, np.int64))
        curves = bd.category_curves(events)
        top = float(bd.requested.max()) if len(bd.requested) else 0.0
        self.unit = (2**30, "GiB") if top >= 2**30 else (2**20, "MiB")
        self.plot.getAxis("left").setLabel(f"requested ({self.unit[1]})")
        stacked = np.cumsum(curves, axis=0) / self.unit[0]
        self.samples, self.stacked = events, stacked
        x = events.astype(float)
        if len(x) == 1:  # one event: a bar one event wide, not a zero-width sliver
            x = np.array([x[0] - 0.45, x[0] + 0.45])
            stacked = np.repeat(stacked, 2, axis=1)
        self._zero.setData(x, np.zeros(len(x)))
        for c, curve in enumerate(self.curves):
            curve.setData(x, stacked[c])

    def set_cursor(self, k: int | None) -> None:
        """The time-travel cursor at event ``k`` (None hides it)."""
        if k is None:
            self.cursor.hide()
            return
        self.cursor.setValue(k)
        self.cursor.show()
        if self.bd is not None:
            split = self.bd.split_at(int(k))
            total = sum(split.values())
            self.cursor.setToolTip(
                f"after event {k} ({PHASE_NAMES[int(self.bd.phases.phase[k])]}): "
                + ", ".join(
                    f"{CATEGORY_LABELS[i]} {format_bytes(split[n])}"
                    for i, n in enumerate(CATEGORY_NAMES)
                    if split[n]
                )
                + f" = {format_bytes(total)}"
            )

    def _clicked(self, event) -> None:
        if self.bd is None or not self.bd.n_events:
            return
        p = self.plot.getViewBox().mapSceneToView(event.scenePos())
        k = int(round(min(max(p.x(), 0), self.bd.n_events - 1)))
        self.set_cursor(k)
        self.eventClicked.emit(k)
