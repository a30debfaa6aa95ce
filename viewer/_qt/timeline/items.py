"""The timeline's graphics items: the stacked allocations' image with its outlines, and
the full-height annotation bands with marker lines and their labels."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from pyqtgraph import functions as pgfn
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPainterPath

from ..widgets import theme
from .constants import HIGHLIGHT_PEN


class StackedItem(pg.GraphicsObject):
    """The stacked allocations: one image per view (rebuilt on every view change), plus
    outline paths for the selected and highlighted allocations."""

    def __init__(self) -> None:
        super().__init__()
        self.image: QImage | None = None
        self._pixels: np.ndarray | None = None  # the QImage's memory
        self.image_rect = QRectF(0, 0, 1, 1)
        self.selected_path = QPainterPath()
        self.highlight_path = QPainterPath()  # outlines: thin matches stay visible
        self.bounds = QRectF(0, 0, 1, 1)
        self.setZValue(-5)

    def set_image(
        self,
        pixels: np.ndarray | None,
        rect: QRectF,
        selected: QPainterPath,
        bounds: QRectF,
        highlight: QPainterPath | None = None,
    ) -> None:
        """``pixels``: (h, w) uint32 ARGB, row 0 at the bottom of ``rect`` (view coordinates)."""
        self.prepareGeometryChange()
        if pixels is None or not pixels.size:
            self.image, self._pixels = None, None
        else:
            self._pixels = pixels
            h, w = pixels.shape
            self.image = QImage(pixels.data, w, h, 4 * w, QImage.Format.Format_ARGB32)
        self.image_rect, self.selected_path, self.bounds = rect, selected, bounds
        self.highlight_path = highlight if highlight is not None else QPainterPath()
        self.update()

    def clear(self) -> None:
        self.set_image(None, QRectF(0, 0, 1, 1), QPainterPath(), QRectF(0, 0, 1, 1))

    def boundingRect(self) -> QRectF:
        return self.bounds

    def paint(self, p: QPainter, *args) -> None:
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        p.setPen(Qt.PenStyle.NoPen)
        if self.image is not None:
            # View y points up, image rows down: row 0 lands at the rect's bottom.
            p.drawImage(self.image_rect, self.image)
        if not self.highlight_path.isEmpty():
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(pg.mkPen(theme.search_color().darker(130), width=1, cosmetic=True))
            p.drawPath(self.highlight_path)
        if not self.selected_path.isEmpty():
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(pg.mkPen(HIGHLIGHT_PEN, width=2.5, cosmetic=True))
            p.drawPath(self.selected_path)


class VerticalBandsItem(pg.GraphicsObject):
    """Full-height translucent bands with labels (record_function ranges), and
    vertical marker lines (OOM, snapshot): drawn over the visible y range."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[np.ndarray, QColor, str, Qt.PenStyle]] = []
        self.avoid = lambda: []  # scene rects of labels drawn by others (the peaks)
        self.placed: list[tuple[str, QRectF]] = []  # labels of the last paint, scene rects
        self.set_bands([])
        self.setZValue(-10)

    def set_bands(self, bands) -> None:
        self.prepareGeometryChange()
        self.bands = bands
        # Columns for painting only what is visible (thousands of steps in a long trace).
        order = sorted(range(len(bands)), key=lambda i: bands[i][0])
        self._x0 = np.array([bands[i][0] for i in order], np.float64)
        self._x1 = np.array([bands[i][1] for i in order], np.float64)
        self._names = [bands[i][2] for i in order]
        colors = {}
        self._color_id = np.array(
            [colors.setdefault(bands[i][3].rgba(), len(colors)) for i in order], np.int64
        )
        self._colors = [QColor.fromRgba(c) for c in colors]
        self._advance: dict[str, float] = {}
        self.update()

    def set_lines(self, lines) -> None:
        self.prepareGeometryChange()
        self.lines = lines
        self.update()

    def _yrange(self):
        vb = self.getViewBox()
        if vb is None:
            return 0.0, 1.0
        (_, _), (ya, yb) = vb.viewRange()
        return ya, yb

    def _xrange(self):
        vb = self.getViewBox()
        if vb is None:
            return 0.0, 1.0
        (xa, xb), _ = vb.viewRange()
        return xa, xb

    def boundingRect(self) -> QRectF:
        ya, yb = self._yrange()
        xs = [float(self._x0.min()), float(self._x1.max())] if len(self._x0) else []
        for arr, *_ in self.lines:
            if len(arr):
                xs += [float(arr.min()), float(arr.max())]
        if not xs:
            return QRectF(0, ya, 1, yb - ya)
        return QRectF(min(xs), ya, max(max(xs) - min(xs), 1e-9), yb - ya)

    def viewRangeChanged(self) -> None:
        self.prepareGeometryChange()
        self.update()

    def paint(self, p: QPainter, *args) -> None:
        ya, yb = self._yrange()
        xa, xb = self._xrange()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setPen(Qt.PenStyle.NoPen)
        # Only the visible bands, one path per colour.
        vis = np.flatnonzero((self._x1 >= xa) & (self._x0 <= xb))
        x0 = np.maximum(self._x0[vis], xa)
        x1 = np.minimum(self._x1[vis], xb)
        cid = self._color_id[vis]
        # One row of pixels, blended here and stretched to the full height: thousands of
        # translucent full-height rectangles (a path in data coordinates, or a fillRect
        # each) cost the rasteriser 10-100 ms; this costs one drawImage.
        tr = p.transform()
        y_px = sorted((tr.map(QPointF(0, ya)).y(), tr.map(QPointF(0, yb)).y()))
        left = math.floor(tr.map(QPointF(xa, 0)).x())
        width = max(1, math.ceil(tr.map(QPointF(xb, 0)).x()) - left)
        if len(vis) and width <= 16384:
            rgba = np.zeros((width, 4), np.float64)  # premultiplied, 0..1
            for c in np.flatnonzero(np.bincount(cid)).tolist():  # the colours present
                m = np.flatnonzero(cid == c)
                lo = np.clip(np.floor(x0[m] * tr.m11() + tr.dx()) - left, 0, width).astype(np.int64)
                hi = np.clip(np.ceil(x1[m] * tr.m11() + tr.dx()) - left, 0, width).astype(np.int64)
                hi = np.maximum(hi, np.minimum(lo + 1, width))
                cover = (
                    np.cumsum(
                        np.bincount(lo, minlength=width + 1)[: width + 1]
                        - np.bincount(hi, minlength=width + 1)[: width + 1]
                    )[:width]
                    > 0
                )
                col = self._colors[c]
                alpha = col.alphaF()
                src = np.array(
                    [col.redF() * alpha, col.greenF() * alpha, col.blueF() * alpha, alpha]
                )
                rgba[cover] = src + rgba[cover] * (1.0 - alpha)  # "over"
            px = np.rint(rgba * 255).astype(np.uint32)
            row = (px[:, 3] << 24) | (px[:, 0] << 16) | (px[:, 1] << 8) | px[:, 2]
            img = QImage(row.data, width, 1, 4 * width, QImage.Format.Format_ARGB32_Premultiplied)
            p.save()
            p.resetTransform()
            p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            p.drawImage(QRectF(left, y_px[0], width, y_px[1] - y_px[0]), img)
            p.restore()
        for xs, color, _text, style in self.lines:
            if not len(xs):
                continue
            p.setPen(pg.mkPen(color, width=1.5, cosmetic=True, style=style))
            path = pgfn.arrayToQPath(
                np.repeat(xs, 2), np.tile([ya, yb], len(xs)), connect="pairs", finiteCheck=False
            )
            p.drawPath(path)
        self._paint_labels(p, xa, xb, ya, yb, vis, cid)

    def _paint_labels(self, p: QPainter, xa, xb, ya, yb, vis, cid) -> None:
        """Marker labels (OOM, snapshot), then band names, in device pixels (the item's
        transform scales x and y independently); a label is drawn only where it
        overlaps no peak label (``avoid``) and no label drawn before it, and fits."""
        tr = p.transform()
        p.resetTransform()
        fm = QFontMetrics(p.font())
        top_px = min(tr.map(QPointF(0, yb)).y(), tr.map(QPointF(0, ya)).y())
        y_text = top_px + fm.ascent() + 2
        left_px, right_px = tr.map(QPointF(xa, 0)).x(), tr.map(QPointF(xb, 0)).x()
        to_device = tr * 1  # (a copy) item -> device
        from_device, _ok = tr.inverted()
        taken = [to_device.mapRect(self.mapRectFromScene(r)) for r in self.avoid()]
        self.placed = []

        def free(r: QRectF) -> bool:
            if r.left() < left_px - 1 or r.right() > right_px + 1:
                return False
            grown = r.adjusted(-2, -1, 2, 1)
            return not any(grown.intersects(t) for t in taken)

        def draw(r: QRectF, baseline: float, text: str) -> None:
            p.drawText(QPointF(r.left(), baseline), text)
            taken.append(r)
            self.placed.append((text, self.mapRectToScene(from_device.mapRect(r))))

        for xs, color, text, _style in self.lines:
            if not text or not len(xs) or len(xs) > 20:
                continue
            p.setPen(QColor(color))
            w = fm.horizontalAdvance(text)
            for x in xs.tolist():
                px = tr.map(QPointF(x, 0)).x()
                left = px - 3 - w if px + 3 + w > right_px else px + 3
                r = QRectF(left, y_text - fm.ascent(), w, fm.height())
                if free(r):
                    draw(r, y_text, text)
        # Band names at the band's start, one text line lower; skipped where they would
        # overlap: jump straight to the next band that starts far enough to the right.
        a_px = np.maximum(self._x0[vis] * tr.m11() + tr.dx(), left_px)
        i, last_right = 0, -1e9
        base = y_text + fm.height()
        while i < len(vis):
            i += int(np.searchsorted(a_px[i:], last_right + 6, side="left"))
            if i >= len(vis):
                break
            name = self._names[vis[i]]
            w = self._advance.get(name)
            if w is None:
                w = self._advance[name] = fm.horizontalAdvance(name)
            r = QRectF(float(a_px[i]) + 2, base - fm.ascent(), w, fm.height())
            if not free(r):
                i += 1
                continue
            c = QColor(self._colors[int(cid[i])])
            c.setAlpha(255)
            p.setPen(c.darker(140) if not theme.is_dark() else c.lighter(160))
            draw(r, base, name)
            last_right = r.right()
            i += 1
