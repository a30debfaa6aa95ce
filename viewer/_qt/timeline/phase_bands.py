"""Iteration and phase bands on the timeline: forward, backward and optimizer
step of every iteration as translucent vertical bands under the curves, one
:class:`VerticalBandsItem` (batched, painting only what is visible).  The spans come
from the model (:func:`vramscope.viewer.model.view.category_view.phase_spans`)."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor

from .constants import X_TIME
from .items import VerticalBandsItem

PHASE_COLORS = {"forward": "#ff7f0e", "backward": "#9467bd", "optimizer": "#2ca02c"}


class PhaseBands:
    """Owns the bands item of one :class:`TimelinePanel`."""

    def __init__(self, panel) -> None:
        self.panel = panel
        self.item = VerticalBandsItem()
        self.item.setZValue(-11)  # under the record_function bands
        panel.plot.addItem(self.item, ignoreBounds=True)
        panel.legend.setToolTip(
            panel.legend.toolTip() + "\nTinted ranges under the curves: "
            "each iteration's forward (orange), backward (purple) and "
            "optimizer step (green); View > Iteration phases."
        )
        self.spans = []
        self.visible = True

    def set_spans(self, spans) -> None:
        self.spans = list(spans)
        self.redraw()

    def set_visible(self, on: bool) -> None:
        self.visible = bool(on)
        self.item.setVisible(self.visible)

    @property
    def bands(self):
        return self.item.bands

    def redraw(self) -> None:
        """(Again after the x axis changed between events and time.)"""
        panel = self.panel
        if not panel.n or not self.spans:
            self.item.set_bands([])
            return
        colors = {}
        for name, c in PHASE_COLORS.items():
            q = QColor(c)
            q.setAlpha(34)
            colors[name] = q
        n = panel.n
        pad = 0.0 if (panel.mode == X_TIME and panel.has_time) else 0.5
        spans = [s for s in self.spans if s.end < n]
        # Columns: every iteration's phases (thousands) mapped to x in one call each.
        x0 = np.asarray(panel.x_of(np.array([s.start for s in spans], np.int64)), np.float64) - pad
        x1 = np.asarray(panel.x_of(np.array([s.end for s in spans], np.int64)), np.float64) + pad
        # unlabelled: the legend names them
        self.item.set_bands(
            [(a, b, "", colors[s.phase]) for a, b, s in zip(x0.tolist(), x1.tolist(), spans)]
        )
