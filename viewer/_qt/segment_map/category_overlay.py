"""The segment map coloured by memory category: the live blocks of the map's
layout repainted in their category's colour, one batched path per category (never one
item per block); blocks outside the category filter veiled.  The categories come from
the model (:meth:`CategoryView.block_categories`); this item only draws."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath

from ...model.core.snapshot import BlockState
from ...model.view.map_layout import BAR_TOP
from ..widgets import theme
from ..widgets.category_colors import rgba_table
from ..widgets.plotting import rects_path


class CategoryOverlay(pg.GraphicsObject):
    """Drawn over a :class:`SegmentMapItem` (``item``) while colouring by category."""

    def __init__(self, item) -> None:
        super().__init__()
        self.item = item
        self.categories = np.zeros(0, np.int8)  # per layout position (-1: not live)
        self.keep: np.ndarray | None = None  # per layout position: kept by the filter
        self._paths: dict[int, QPainterPath] = {}
        self._veil = QPainterPath()
        self.setZValue(item.zValue() + 1)
        self.hide()

    def set_categories(self, categories: np.ndarray | None, keep: np.ndarray | None) -> None:
        """``categories``: per block of the item's layout (None: hide the overlay)."""
        self.prepareGeometryChange()
        layout = self.item.layout
        self._paths, self._veil = {}, QPainterPath()
        if categories is None or layout is None:
            self.categories = np.zeros(0, np.int8)
            self.keep = None
            self.hide()
            return
        self.categories = np.asarray(categories)
        self.keep = keep
        live = (layout.state == BlockState.ALLOCATED) | (layout.state == BlockState.PENDING_FREE)
        r = layout.row.astype(np.float64)
        for c in range(len(rgba_table())):
            m = live & (self.categories == c)
            if m.any():
                self._paths[c] = rects_path(
                    layout.x0[m], layout.x1[m], r[m] + BAR_TOP, r[m] + 1 - BAR_TOP
                )
        if keep is not None:
            m = ~keep
            self._veil = rects_path(layout.x0[m], layout.x1[m], r[m] + BAR_TOP, r[m] + 1 - BAR_TOP)
        self.show()
        self.update()

    def drawn_categories(self) -> list[int]:
        """The categories painted now (one path each)."""
        return sorted(self._paths)

    def boundingRect(self) -> QRectF:
        return self.item.boundingRect()

    def paint(self, p: QPainter, *args) -> None:
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setPen(Qt.PenStyle.NoPen)
        table = rgba_table()
        for c, path in self._paths.items():
            p.setBrush(QColor(*table[c].tolist()))
            p.drawPath(path)
        veil = theme.background()
        veil.setAlpha(200)
        if not self._veil.isEmpty():
            p.setBrush(veil)
            p.drawPath(self._veil)
        # The window's highlight (a leak, a search) stays visible over the colours.
        highlighted = self.item.highlight_path()
        if self.item.highlight is not None and not highlighted.isEmpty():
            p.setBrush(theme.search_color())
            p.setPen(pg.mkPen(theme.foreground(), width=1, cosmetic=True))
            p.drawPath(highlighted)
