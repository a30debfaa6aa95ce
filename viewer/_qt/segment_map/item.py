"""The segment map's one graphics item: a :class:`MapLayout` drawn in a handful of
batched paths per paint (one per drawing category of the level-of-detail list), the
largest free gaps outlined, the OOM request to scale, the selection and highlight."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath

from ...model.core.snapshot import BlockState
from ...model.view.map_layout import BAR_TOP, LodRects, MapLayout, empty_lod, lod_rects
from ..widgets import theme
from ..widgets.plotting import rects_path, segments_path

REQUEST_Y = -1.6  # the OOM request's bracket, above the rows (rows; see the panel)
LARGEST_Y = -0.75  # the largest free block's bracket
EDGE_PX = 3  # a request wider than the view stops this many pixels inside its right edge
CHEVRON_PX = 6  # the width of each chevron of the mark that it goes on


def block_rect(layout: MapLayout | None, block: int) -> QRectF | None:
    """Block ``block``'s bar in view coordinates, or None when it is not shown."""
    e = layout.extent(block) if layout is not None else None
    return None if e is None else QRectF(QPointF(e[0], e[1]), QPointF(e[2], e[3]))


class SegmentMapItem(pg.GraphicsObject):
    """Draws a :class:`MapLayout` in a handful of batched paths per paint."""

    def __init__(self) -> None:
        super().__init__()
        self.layout: MapLayout | None = None
        self.gap_blocks = np.zeros(0, dtype=np.int64)
        self.request_bytes = 0
        self.largest_free = 0
        self.selected = -1
        self.request_y, self.largest_y = REQUEST_Y, LARGEST_Y  # rows (see ruler_ys)
        # The OOM request's ghost over the largest gap as last painted (view coordinates;
        # None: not drawn) and whether it ran past the view's right edge (drawn up to it,
        # open there, with a mark that it goes on): what a test can read of the paint.
        self.ghost_drawn: QRectF | None = None
        self.ghost_continues = False
        self.request_continues = False  # the request's bracket likewise
        self.lod: LodRects | None = None
        self.doc_blocks_stack: np.ndarray | None = None
        self._paths: dict[int, QPainterPath] = {}
        self._edges = QPainterPath()
        self._dirty = True
        self._lod_key = None
        # Highlight (search matches, a call-tree node): per stack, or None.
        self.highlight: np.ndarray | None = None
        self._hl_pos = np.zeros(0, np.int64)  # layout positions of highlighted blocks
        self._hl_path = QPainterPath()

    # -- data
    def set_layout(
        self,
        layout: MapLayout | None,
        gap_blocks=None,
        request_bytes: int = 0,
        largest_free: int = 0,
    ) -> None:
        self.prepareGeometryChange()
        self.layout = layout
        self.gap_blocks = np.zeros(0, np.int64) if gap_blocks is None else np.asarray(gap_blocks)
        self.request_bytes = int(request_bytes)
        self.largest_free = int(largest_free)
        self.selected = -1
        self._update_highlight()
        self.invalidate()

    def set_highlight(self, stack_mask: np.ndarray | None) -> None:
        """Blocks whose stack is in ``stack_mask`` stand out; the rest are dimmed."""
        self.highlight = stack_mask
        self._update_highlight()
        self.invalidate()

    def _update_highlight(self) -> None:
        layout, mask = self.layout, self.highlight
        if layout is None or mask is None or self.doc_blocks_stack is None:
            self._hl_pos = np.zeros(0, np.int64)
            return
        st = self.doc_blocks_stack[layout.blocks]
        active = (layout.state == BlockState.ALLOCATED) | (layout.state == BlockState.PENDING_FREE)
        ok = active & (st >= 0)
        ok[ok] = mask[st[ok]]
        self._hl_pos = np.flatnonzero(ok)

    def highlight_path(self) -> QPainterPath:
        """The highlighted blocks as drawn at the last paint (empty: none in view), for
        an item drawn over this one that keeps them visible."""
        return self._hl_path

    def highlighted_blocks(self) -> np.ndarray:
        """Block indices currently highlighted."""
        if self.layout is None:
            return np.zeros(0, np.int64)
        return self.layout.blocks[self._hl_pos]

    def set_selected(self, block: int) -> None:
        self.selected = int(block)
        self.update()

    def invalidate(self) -> None:
        self._dirty = True
        self.update()

    def viewRangeChanged(self) -> None:  # pyqtgraph hook
        self.invalidate()

    def viewTransformChanged(self) -> None:  # pyqtgraph hook
        self.invalidate()

    # -- geometry
    def boundingRect(self) -> QRectF:
        if self.layout is None or not self.layout.n_rows:
            return QRectF(0, 0, 1, 1)
        top = min(-2.2, self.request_y - 0.6) if self.request_bytes else 0.0
        return QRectF(
            0, top, max(self.layout.max_size, self.request_bytes), self.layout.n_rows - top
        )

    def bytes_per_px(self) -> float:
        vb = self.getViewBox()
        if vb is None:
            return 1.0
        w = vb.viewPixelSize()[0]
        return float(w) if w and np.isfinite(w) and w > 0 else 1.0

    def rebuild_lod(self) -> LodRects:
        """Recompute the draw list for the current view range and size."""
        layout = self.layout
        vb = self.getViewBox()
        if layout is None:
            self.lod = empty_lod()
        else:
            xr = yr = None
            if vb is not None:
                (xa, xb), (ya, yb) = vb.viewRange()
                xr, yr = (xa, xb), (ya, yb)
            self.lod = lod_rects(layout, self.bytes_per_px(), xr, yr)
        lod = self.lod
        y0 = lod.row + BAR_TOP
        y1 = lod.row + (1 - BAR_TOP)
        self._paths = {}
        for cat in theme.DRAW_ORDER:
            m = lod.cat == cat
            if m.any():
                self._paths[cat] = rects_path(lod.x0[m], lod.x1[m], y0[m], y1[m])
        self._edges = segments_path(
            lod.edges_x, lod.edges_row + BAR_TOP, lod.edges_row + 1 - BAR_TOP
        )
        self._hl_path = QPainterPath()
        if self.highlight is not None and layout is not None and len(self._hl_pos):
            pos = self._hl_pos
            if vb is not None:
                (xa, xb), (ya, yb) = vb.viewRange()
                r = layout.row[pos]
                pos = pos[
                    (r >= math.floor(ya) - 1)
                    & (r <= math.ceil(yb) + 1)
                    & (layout.x1[pos] >= xa)
                    & (layout.x0[pos] <= xb)
                ]
            px = self.bytes_per_px()
            x0 = layout.x0[pos]
            x1 = np.maximum(layout.x1[pos], x0 + px)
            r = layout.row[pos].astype(np.float64)
            self._hl_path = rects_path(x0, x1, r + BAR_TOP, r + 1 - BAR_TOP)
        self._dirty = False
        return lod

    # -- painting
    def paint(self, p: QPainter, *args) -> None:
        layout = self.layout
        if layout is None or not layout.n_rows:
            return
        if self._dirty:
            self.rebuild_lod()
        px = self.bytes_per_px()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        # Segment extents (also shows unmapped parts of expandable segments).
        rows = np.arange(layout.n_rows, dtype=np.float64)
        bg = theme.row_background()
        p.setPen(pg.mkPen(bg.darker(125), width=1, cosmetic=True))
        p.setBrush(bg)
        p.drawPath(
            rects_path(
                np.zeros(layout.n_rows), layout.row_size, rows + BAR_TOP / 2, rows + 1 - BAR_TOP / 2
            )
        )
        p.setPen(Qt.PenStyle.NoPen)
        for cat, path in self._paths.items():
            p.setBrush(theme.color(cat))
            p.drawPath(path)
        if not self._edges.isEmpty():
            p.setPen(pg.mkPen(theme.background(), width=1, cosmetic=True))
            p.drawPath(self._edges)
        if self.highlight is not None:
            # Dim everything, then the highlighted blocks on top, outlined.
            veil = theme.background()
            veil.setAlpha(185)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(veil)
            p.drawPath(
                rects_path(
                    np.zeros(layout.n_rows),
                    layout.row_size,
                    rows + BAR_TOP / 2,
                    rows + 1 - BAR_TOP / 2,
                )
            )
            if not self._hl_path.isEmpty():
                p.setBrush(theme.search_color())
                p.setPen(pg.mkPen(theme.foreground(), width=1, cosmetic=True))
                p.drawPath(self._hl_path)
        # The largest free gaps, outlined.
        gaps = [block_rect(layout, int(b)) for b in self.gap_blocks]
        gaps = [r for r in gaps if r is not None]
        if gaps:
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(pg.mkPen(theme.gap_outline(), width=2, cosmetic=True))
            for r in gaps:
                p.drawRect(_min_width(r, px))
        if self.request_bytes:
            self._paint_request(p, gaps)
        if self.selected >= 0:
            r = block_rect(layout, self.selected)
            if r is not None:
                r = _min_width(r, 3 * px)
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.setPen(pg.mkPen(theme.background(), width=5, cosmetic=True))
                p.drawRect(r)
                p.setPen(pg.mkPen(theme.foreground(), width=2.5, cosmetic=True))
                p.drawRect(r)

    def view_right(self) -> float:
        """Where the request's bracket and ghost stop when they run past the view: a few
        pixels inside its right edge (infinite without a view)."""
        vb = self.getViewBox()
        if vb is None:
            return math.inf
        return float(vb.viewRange()[0][1]) - EDGE_PX * self.bytes_per_px()

    def _paint_request(self, p: QPainter, gaps: list[QRectF]) -> None:
        """The OOM request to scale: a bracket on top and a ghost over the largest gap.
        A request wider than the view (wider than the row's segments, or zoomed in) is
        drawn up to the view's right edge, open there, with a mark that it goes on."""
        req = float(self.request_bytes)
        px = self.bytes_per_px()
        edge = self.view_right()
        red = QColor(theme.OOM_RED)
        pen = pg.mkPen(red, width=2, cosmetic=True)
        p.setPen(pen)
        tick = min(0.3, 0.3 * (self.largest_y - self.request_y))
        self.request_continues = req > edge
        if self.request_continues:
            _bracket(p, 0.0, edge, self.request_y, tick, open_end=True)
            _continues(p, edge, self.request_y, tick, px)
        else:
            _bracket(p, 0.0, req, self.request_y, tick)
        if self.largest_free:
            p.setPen(pg.mkPen(theme.gap_outline().lighter(115), width=2, cosmetic=True))
            _bracket(p, 0.0, float(self.largest_free), self.largest_y, tick)
        self.ghost_drawn, self.ghost_continues = None, False
        if gaps and gaps[0].left() < edge:
            g = gaps[0]
            ghost = QRectF(g.left(), g.top() - 0.06, req, g.height() + 0.12)
            self.ghost_continues = ghost.right() > edge
            if self.ghost_continues:
                ghost.setRight(edge)
            fill = QColor(red)
            fill.setAlpha(40)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(fill)
            p.drawRect(ghost)
            dash = pg.mkPen(red, width=2, cosmetic=True, style=Qt.PenStyle.DashLine)
            p.setPen(dash)
            p.setBrush(Qt.BrushStyle.NoBrush)
            outline = QPainterPath()
            if self.ghost_continues:  # open at the edge: top, left, bottom
                outline.moveTo(ghost.topRight())
                outline.lineTo(ghost.topLeft())
                outline.lineTo(ghost.bottomLeft())
                outline.lineTo(ghost.bottomRight())
            else:
                outline.addRect(ghost)
            p.drawPath(outline)
            if self.ghost_continues:
                p.setPen(pen)
                _continues(p, edge, ghost.center().y(), ghost.height() / 3, px)
            self.ghost_drawn = ghost


def _bracket(
    p: QPainter, x0: float, x1: float, y: float, tick: float, open_end: bool = False
) -> None:
    """|----| from ``x0`` to ``x1`` at row ``y``; ``open_end``: no tick at ``x1`` (the
    length goes on past it)."""
    path = QPainterPath()
    path.moveTo(x0, y - tick)
    path.lineTo(x0, y + tick)
    path.moveTo(x0, y)
    path.lineTo(x1, y)
    if not open_end:
        path.moveTo(x1, y - tick)
        path.lineTo(x1, y + tick)
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawPath(path)


def _continues(p: QPainter, x: float, y: float, half: float, px: float) -> None:
    """A double chevron (>>) ending at ``x``: what is drawn goes on past the view."""
    w = CHEVRON_PX * px
    path = QPainterPath()
    for end in (x - w, x):
        path.moveTo(end - w, y - half)
        path.lineTo(end, y)
        path.lineTo(end - w, y + half)
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawPath(path)


def _min_width(r: QRectF, w: float) -> QRectF:
    if r.width() >= w:
        return r
    c = r.center().x()
    return QRectF(c - w / 2, r.top(), w, r.height())
