"""What the timeline marks about the recording itself: allocation annotations
(``_annotate_memory``) as small markers along the top, stretches that are not exact
(hatched) or estimated (shaded), and the left edge of a trace whose earlier history
the allocator's ring overwrote.

One item draws all of them (one path per kind, never an item per marker); positions
and texts come from :mod:`...model.analysis.alloc_details`.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QPainter, QPainterPath, QPolygonF

from ...model.analysis.alloc_details import OVERWRITTEN_TEXT
from ..widgets import theme

MARKER_PX = 7  # the markers' triangles: width and height in pixels
EDGE_PX = 10  # the width of the "earlier history overwritten" edge
ANNOTATION_COLOR = "#8e44ad"
STRETCH_LABELS = {"inconsistent": "not exact (hover for why)", "estimated": "estimated sizes"}


class NotesItem(pg.GraphicsObject):
    """Annotation markers, untrusted stretches and the overwritten edge (see module)."""

    def __init__(self) -> None:
        super().__init__()
        self.marker_x = np.zeros(0, np.float64)
        self.stretches: list[tuple[float, float, str]] = []  # (x0, x1, kind)
        self.edge_x: float | None = None  # x of the first event when history was overwritten
        self.setZValue(6)

    def set_notes(self, marker_x: np.ndarray, stretches, edge_x: float | None) -> None:
        self.prepareGeometryChange()
        self.marker_x = np.asarray(marker_x, np.float64)
        self.stretches = list(stretches)
        self.edge_x = edge_x
        self.update()

    def clear(self) -> None:
        self.set_notes(np.zeros(0), [], None)

    def _view(self):
        vb = self.getViewBox()
        if vb is None:
            return (0.0, 1.0), (0.0, 1.0)
        return vb.viewRange()

    def boundingRect(self) -> QRectF:
        (xa, xb), (ya, yb) = self._view()
        return QRectF(xa, ya, max(xb - xa, 1e-9), yb - ya)

    def viewRangeChanged(self) -> None:
        self.prepareGeometryChange()
        self.update()

    @staticmethod
    def _label_stretches(p: QPainter, path: QPainterPath, text: str, color: QColor) -> None:
        """Name each shaded stretch wide enough for it, at its bottom left (the tooltip
        says why)."""
        fm = QFontMetrics(p.font())
        w = fm.horizontalAdvance(text)
        bg = theme.background()
        bg.setAlpha(200)
        for poly in path.toSubpathPolygons():
            r = poly.boundingRect()
            if r.width() < w + 8 or r.height() < fm.height() + 4:
                continue
            box = QRectF(r.left() + 3, r.bottom() - fm.height() - 3, w + 4, fm.height())
            p.fillRect(box, bg)
            p.setPen(color)
            p.drawText(QPointF(box.left() + 2, box.top() + fm.ascent()), text)

    def paint(self, p: QPainter, *args) -> None:
        (xa, xb), (ya, yb) = self._view()
        tr = p.transform()
        top = min(tr.map(QPointF(0, ya)).y(), tr.map(QPointF(0, yb)).y())
        bottom = max(tr.map(QPointF(0, ya)).y(), tr.map(QPointF(0, yb)).y())
        left_px, right_px = tr.map(QPointF(xa, 0)).x(), tr.map(QPointF(xb, 0)).x()
        p.save()
        p.resetTransform()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        warn = QColor(theme.OOM_RED)
        for kind in ("estimated", "inconsistent"):
            path = QPainterPath()
            for x0, x1, k in self.stretches:
                if k != kind or x1 < xa or x0 > xb:
                    continue
                a = max(tr.map(QPointF(x0, 0)).x(), left_px)
                b = min(tr.map(QPointF(x1, 0)).x(), right_px)
                path.addRect(QRectF(a, top, max(b - a, 2.0), bottom - top))
            if path.isEmpty():
                continue
            c = QColor(warn if kind == "inconsistent" else theme.muted())
            c.setAlpha(70 if kind == "inconsistent" else 45)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(
                QBrush(
                    c,
                    Qt.BrushStyle.BDiagPattern
                    if kind == "inconsistent"
                    else Qt.BrushStyle.Dense6Pattern,
                )
            )
            p.drawPath(path)
            self._label_stretches(
                p,
                path,
                STRETCH_LABELS[kind],
                QColor(warn if kind == "inconsistent" else theme.muted()),
            )
        if self.edge_x is not None and xa <= self.edge_x <= xb:
            x = tr.map(QPointF(self.edge_x, 0)).x()
            c = QColor(warn)
            c.setAlpha(150)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QBrush(c, Qt.BrushStyle.BDiagPattern))
            p.drawRect(QRectF(x - EDGE_PX, top, EDGE_PX, bottom - top))
            p.setPen(pg.mkPen(c, width=2))
            p.drawLine(QPointF(x, top), QPointF(x, bottom))
            # Its name along the edge, read bottom-up, where there is room for it.
            font = p.font()
            font.setPointSizeF(max(font.pointSizeF() * 0.8, 6.0))
            p.setFont(font)
            fm = QFontMetrics(font)
            if fm.horizontalAdvance(OVERWRITTEN_TEXT) + 8 < bottom - top:
                p.save()
                p.translate(x + 3 + fm.ascent(), bottom - 4)
                p.rotate(-90)
                p.setPen(QColor(warn))
                p.drawText(QPointF(0, 0), OVERWRITTEN_TEXT)
                p.restore()
        vis = self.marker_x[(self.marker_x >= xa) & (self.marker_x <= xb)]
        if len(vis):
            px = vis * tr.m11() + tr.dx()
            px = np.unique(np.rint(px))  # one triangle per pixel column at most
            path = QPainterPath()
            h = MARKER_PX / 2
            for x in px.tolist():
                path.addPolygon(
                    QPolygonF(
                        [QPointF(x - h, top), QPointF(x + h, top), QPointF(x, top + MARKER_PX)]
                    )
                )
                path.closeSubpath()
            p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            p.setPen(pg.mkPen(theme.background(), width=1))
            p.setBrush(QColor(ANNOTATION_COLOR))
            p.drawPath(path)
        p.restore()
