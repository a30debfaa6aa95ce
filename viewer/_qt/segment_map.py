"""The segment map: every segment a row drawn to scale, blocks coloured by state.

Rendering never creates one QGraphicsItem per block.  :class:`MapLayout`
holds the blocks of the shown segments as numpy columns in display order;
:func:`lod_rects` turns them into a level-of-detail draw list for the current
zoom (runs of sub-pixel blocks merged into one rect of the dominant state);
:class:`SegmentMapItem` draws each colour of that list as one QPainterPath
built from numpy (``pyqtgraph.functions.arrayToQPath``).  Hit-testing is a
``searchsorted`` on the sorted offsets of one row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from pyqtgraph import functions as pgfn
from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QFontMetrics, QGuiApplication, QImage, QPainter, QPainterPath
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from ..model.analysis import Selection, largest_gaps
from ..model.snapshot import BlockState
from ..model.units import format_address, format_bytes
from . import theme
from .plotting import place_text_items, rects_path, segments_path, short_bytes, text_scene_rect
from ..model.document import Document, pool_label, stream_label

BAR_TOP = 0.17  # a row's bar spans [row + BAR_TOP, row + 1 - BAR_TOP]
REQUEST_Y = -1.6  # the OOM request's bracket, above the rows
LARGEST_Y = -0.75  # the largest free block's bracket
SORT_ADDRESS = "address"
SORT_SIZE = "size"
SORT_FREE = "free"  # segments holding the largest free gaps first
N_GAPS = 8
DOC_OOM = object()  # set_document's default: the document's own OOM


def _oom_in(o, selection: Selection) -> bool:
    """Is OOM ``o``'s request about segments in this selection?"""
    return not ((selection.device is not None and selection.device != o.device)
                or (selection.stream is not None and selection.stream != o.stream)
                or (selection.is_small is not None and selection.is_small != (o.pool_kind == "small"))
                or (selection.pool is not None and selection.pool != o.pool))


# --------------------------------------------------------------------------- layout


@dataclass
class MapLayout:
    """Blocks of the shown segments, in display order (row, then offset)."""

    seg_rows: np.ndarray  # int64: segment index of each row
    row_size: np.ndarray  # float64: segment size of each row
    row_ptr: np.ndarray  # int64, n_rows + 1: CSR into the block columns
    blocks: np.ndarray  # int64: block index (row in Snapshot.blocks)
    row: np.ndarray  # int64: row of each block
    x0: np.ndarray  # float64: offset of the block inside its segment
    x1: np.ndarray  # float64: x0 + size
    req_end: np.ndarray  # float64: x0 + requested size for active blocks, else x1
    state: np.ndarray  # int8 BlockState
    pos_of_block: np.ndarray  # int64 per snapshot block: position here, -1 if not shown

    @property
    def n_rows(self) -> int:
        return len(self.seg_rows)

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def max_size(self) -> float:
        return float(self.row_size.max()) if len(self.row_size) else 1.0

    @classmethod
    def build(cls, doc: Document, selection: Selection, sort: str = SORT_ADDRESS) -> "MapLayout":
        snap = doc.snap
        segs, blocks = snap.segments, snap.blocks
        idx = np.flatnonzero(selection.segment_mask(snap))
        if sort == SORT_SIZE:
            order = np.lexsort((segs.address[idx], -segs.total_size[idx]))
        elif sort == SORT_FREE:
            largest = np.zeros(len(segs), dtype=np.int64)
            free_total = np.zeros(len(segs), dtype=np.int64)
            free = blocks.state == BlockState.FREE
            np.maximum.at(largest, blocks.segment[free], blocks.size[free])
            np.add.at(free_total, blocks.segment[free], blocks.size[free])
            order = np.lexsort((segs.address[idx], -free_total[idx], -largest[idx]))
        else:
            order = np.lexsort((segs.address[idx], segs.device[idx]))
        rows = idx[order].astype(np.int64)
        counts = segs.block_count[rows].astype(np.int64)
        starts = segs.block_start[rows].astype(np.int64)
        row_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=row_ptr[1:])
        n = int(row_ptr[-1])
        row_of = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        blk = starts[row_of] + (np.arange(n, dtype=np.int64) - row_ptr[:-1][row_of])
        x0 = (blocks.address[blk] - segs.address[rows][row_of]).astype(np.float64)
        # Keep each row sorted by offset whatever the file's order.
        order = np.lexsort((x0, row_of))
        blk, row_of, x0 = blk[order], row_of[order], x0[order]
        size = blocks.size[blk].astype(np.float64)
        state = blocks.state[blk].astype(np.int8)
        active = (state == BlockState.ALLOCATED) | (state == BlockState.PENDING_FREE)
        req = np.minimum(blocks.requested_size[blk].astype(np.float64), size)
        x1 = x0 + size
        req_end = np.where(active, x0 + req, x1)
        pos = np.full(len(blocks), -1, dtype=np.int64)
        pos[blk] = np.arange(n, dtype=np.int64)
        return cls(rows, segs.total_size[rows].astype(np.float64), row_ptr, blk, row_of,
                   x0, x1, req_end, state, pos)

    def rect_of(self, block: int) -> QRectF | None:
        """The block's bar in view coordinates (x: bytes, y: rows)."""
        p = int(self.pos_of_block[block]) if 0 <= block < len(self.pos_of_block) else -1
        if p < 0:
            return None
        r = float(self.row[p])
        return QRectF(QPointF(self.x0[p], r + BAR_TOP), QPointF(self.x1[p], r + 1 - BAR_TOP))

    def block_at(self, x: float, y: float) -> int:
        """Block index under view point (x, y), or -1."""
        if not self.n_rows or not (0 <= y < self.n_rows):
            return -1
        r = int(math.floor(y))
        frac = y - r
        if frac < BAR_TOP / 2 or frac > 1 - BAR_TOP / 2:
            return -1
        lo, hi = int(self.row_ptr[r]), int(self.row_ptr[r + 1])
        i = int(np.searchsorted(self.x0[lo:hi], x, side="right")) - 1
        if i < 0 or x >= self.x1[lo + i]:
            return -1
        return int(self.blocks[lo + i])


@dataclass
class LodRects:
    """A draw list: rects ``[x0, x1] x row`` of one drawing category each."""

    x0: np.ndarray
    x1: np.ndarray
    row: np.ndarray
    cat: np.ndarray  # theme.CAT_*
    edges_x: np.ndarray  # block boundaries worth drawing (wide blocks only)
    edges_row: np.ndarray

    def __len__(self) -> int:
        return len(self.x0)


def lod_rects(
    layout: MapLayout,
    bytes_per_px: float,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    min_px: float = 1.0,
) -> LodRects:
    """The level-of-detail draw list for a view of ``bytes_per_px`` bytes per pixel.

    Blocks outside the visible range are culled.  Consecutive blocks of a row
    narrower than ``min_px`` pixels that fall in the same pixel are merged into
    one rect coloured by the state holding most of its bytes (and widened to
    one pixel so it never vanishes); wider blocks are kept exactly, plus their
    rounding-waste tail.  The result has at most about one rect per pixel
    column per row, plus the wide blocks.
    """
    px = max(float(bytes_per_px), 1e-9) * min_px
    n_rows = layout.n_rows
    r0, r1 = 0, n_rows
    if y_range is not None:
        r0 = max(0, int(math.floor(y_range[0])))
        r1 = min(n_rows, int(math.ceil(y_range[1])) + 1)
    if r1 <= r0:
        return _empty_lod()
    lo, hi = int(layout.row_ptr[r0]), int(layout.row_ptr[r1])
    x0, x1 = layout.x0[lo:hi], layout.x1[lo:hi]
    row, state, req_end = layout.row[lo:hi], layout.state[lo:hi], layout.req_end[lo:hi]
    if x_range is not None:
        keep = np.flatnonzero((x1 >= x_range[0]) & (x0 <= x_range[1]))
        x0, x1, row, state, req_end = x0[keep], x1[keep], row[keep], state[keep], req_end[keep]
    n = len(x0)
    if n == 0:
        return _empty_lod()
    width = x1 - x0
    small = width < px
    pixel = np.floor(x0 / px).astype(np.int64)
    same = np.zeros(n, dtype=bool)
    same[1:] = small[1:] & small[:-1] & (row[1:] == row[:-1]) & (pixel[1:] == pixel[:-1])
    starts = np.flatnonzero(~same)
    ends = np.append(starts[1:], n) - 1
    g_x0 = x0[starts]
    g_x1 = x1[ends]
    g_row = row[starts]
    merged = ends > starts
    g_cat = state[starts].astype(np.int8)
    if merged.any():
        bytes_by_state = np.stack([
            np.add.reduceat(np.where(state == s, width, 0.0), starts) for s in range(4)
        ])
        g_cat = np.where(merged, np.argmax(bytes_by_state, axis=0), g_cat).astype(np.int8)
    g_small = small[starts] | merged
    g_x1 = np.where(g_small, np.maximum(g_x1, g_x0 + px), g_x1)
    # Waste tails of the blocks drawn exactly.
    exact = ~g_small
    # (sub-pixel tails are invisible: left out)
    waste = exact & (x1[starts] - req_end[starts] >= px)
    w_idx = starts[waste]
    # Block boundaries: only where blocks are a few pixels wide.
    wide = exact & (width[starts] >= 4 * px) & (g_x0 > 0)
    return LodRects(
        x0=np.concatenate([g_x0, req_end[w_idx]]),
        x1=np.concatenate([g_x1, x1[w_idx]]),
        row=np.concatenate([g_row, row[w_idx]]),
        cat=np.concatenate([g_cat, np.full(len(w_idx), theme.CAT_WASTE, np.int8)]),
        edges_x=g_x0[wide],
        edges_row=g_row[wide],
    )


def _empty_lod() -> LodRects:
    z = np.zeros(0)
    return LodRects(z, z, z.astype(np.int64), z.astype(np.int8), z, z.astype(np.int64))


# --------------------------------------------------------------------------- item


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
    def set_layout(self, layout: MapLayout | None, gap_blocks=None, request_bytes: int = 0,
                   largest_free: int = 0) -> None:
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
        return QRectF(0, top, max(self.layout.max_size, self.request_bytes), self.layout.n_rows - top)

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
            self.lod = _empty_lod()
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
        self._edges = segments_path(lod.edges_x, lod.edges_row + BAR_TOP, lod.edges_row + 1 - BAR_TOP)
        self._hl_path = QPainterPath()
        if self.highlight is not None and layout is not None and len(self._hl_pos):
            pos = self._hl_pos
            if vb is not None:
                (xa, xb), (ya, yb) = vb.viewRange()
                r = layout.row[pos]
                pos = pos[(r >= math.floor(ya) - 1) & (r <= math.ceil(yb) + 1)
                          & (layout.x1[pos] >= xa) & (layout.x0[pos] <= xb)]
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
        p.drawPath(rects_path(np.zeros(layout.n_rows), layout.row_size,
                              rows + BAR_TOP / 2, rows + 1 - BAR_TOP / 2))
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
            p.drawPath(rects_path(np.zeros(layout.n_rows), layout.row_size,
                                  rows + BAR_TOP / 2, rows + 1 - BAR_TOP / 2))
            if not self._hl_path.isEmpty():
                p.setBrush(theme.search_color())
                p.setPen(pg.mkPen(theme.foreground(), width=1, cosmetic=True))
                p.drawPath(self._hl_path)
        # The largest free gaps, outlined.
        gaps = [layout.rect_of(int(b)) for b in self.gap_blocks]
        gaps = [r for r in gaps if r is not None]
        if gaps:
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(pg.mkPen(theme.gap_outline(), width=2, cosmetic=True))
            for r in gaps:
                p.drawRect(_min_width(r, px))
        if self.request_bytes:
            self._paint_request(p, gaps)
        if self.selected >= 0:
            r = layout.rect_of(self.selected)
            if r is not None:
                r = _min_width(r, 3 * px)
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.setPen(pg.mkPen(theme.background(), width=5, cosmetic=True))
                p.drawRect(r)
                p.setPen(pg.mkPen(theme.foreground(), width=2.5, cosmetic=True))
                p.drawRect(r)

    def _paint_request(self, p: QPainter, gaps: list[QRectF]) -> None:
        """The OOM request to scale: a bracket on top and a ghost over the largest gap."""
        req = float(self.request_bytes)
        red = QColor(theme.OOM_RED)
        pen = pg.mkPen(red, width=2, cosmetic=True)
        p.setPen(pen)
        tick = min(0.3, 0.3 * (self.largest_y - self.request_y))
        _bracket(p, 0.0, req, self.request_y, tick)
        if self.largest_free:
            p.setPen(pg.mkPen(theme.gap_outline().lighter(115), width=2, cosmetic=True))
            _bracket(p, 0.0, float(self.largest_free), self.largest_y, tick)
        if gaps:
            g = gaps[0]
            ghost = QRectF(g.left(), g.top() - 0.06, req, g.height() + 0.12)
            dash = pg.mkPen(red, width=2, cosmetic=True, style=Qt.PenStyle.DashLine)
            p.setPen(dash)
            fill = QColor(red)
            fill.setAlpha(40)
            p.setBrush(fill)
            p.drawRect(ghost)


def _bracket(p: QPainter, x0: float, x1: float, y: float, tick: float) -> None:
    path = QPainterPath()
    path.moveTo(x0, y - tick)
    path.lineTo(x0, y + tick)
    path.moveTo(x0, y)
    path.lineTo(x1, y)
    path.moveTo(x1, y - tick)
    path.lineTo(x1, y + tick)
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawPath(path)


def _min_width(r: QRectF, w: float) -> QRectF:
    if r.width() >= w:
        return r
    c = r.center().x()
    return QRectF(c - w / 2, r.top(), w, r.height())


# --------------------------------------------------------------------------- axes


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
        time cursor moved) must drop it, or the old rows' labels stay (issue 17)."""
        self.labels = labels
        self.picture = None
        self.update()


# --------------------------------------------------------------------------- view box


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


# --------------------------------------------------------------------------- widget


class SegmentMapView(QWidget):
    """The map plus its legend and controls."""

    blockClicked = Signal(int)
    sortChanged = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc: Document | None = None
        self.oom = None  # the OOM whose request is drawn (see set_document)
        self.selection = Selection()
        self.sort = SORT_ADDRESS
        self.layout_data: MapLayout | None = None
        self._hover = -1
        self._labels: list[pg.TextItem] = []
        # True while the view is the automatic one (home / fit); a user's zoom or
        # pan makes it False, and a newer document (live attach) then keeps it.
        self.view_auto = True
        self.has_private_rows = False  # a row label has the "P" suffix: the legend says why
        self._had_ruler = False  # the last layout drew an OOM request

        self.x_axis = BytesAxis("bottom")
        self.x_axis.enableAutoSIPrefix(False)
        self.y_axis = SegmentAxis("left")
        self.y_axis.setWidth(120)
        # Show every row label that fits (pyqtgraph drops dense labels by default).
        self.y_axis.setStyle(textFillLimits=[(0, 1.0)], tickLength=0)
        self.vb = MapViewBox(enableMenu=False)  # no context menu: none built
        self.plot = pg.PlotWidget(viewBox=self.vb,
                                  axisItems={"bottom": self.x_axis, "left": self.y_axis})
        self.plot.setMinimumSize(QSize(200, 120))
        self.plot.setToolTip("")
        pi = self.plot.getPlotItem()
        pi.hideButtons()
        pi.setMenuEnabled(False)
        pi.showGrid(x=True, y=False, alpha=0.15)
        pi.setLabel("bottom", "offset inside segment")
        self.vb.invertY(True)
        self.vb.setDefaultPadding(0.01)
        self.item = SegmentMapItem()
        self.plot.addItem(self.item)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.vb.sigRangeChanged.connect(self._place_gap_labels)
        self.vb.sigRangeChangedManually.connect(self._on_manual_range)
        self.vb.sigResized.connect(self._place_gap_labels)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self._request_label = pg.TextItem(anchor=(0, 0.5), color=theme.OOM_RED)
        self._largest_label = pg.TextItem(anchor=(0, 0.5))
        for t in (self._request_label, self._largest_label):
            t.setZValue(10)
            self.plot.addItem(t, ignoreBounds=True)
            t.hide()

        # Controls + legend.
        self.by_address = QToolButton(text="By address", checkable=True, checked=True)
        self.by_address.setToolTip("Rows in address order (device, then address)")
        self.by_size = QToolButton(text="By size", checkable=True)
        self.by_size.setToolTip("Rows by segment size, largest first")
        self.by_free = QToolButton(text="By free gap", checkable=True)
        self.by_free.setToolTip("Segments holding the largest free gaps first (the default "
                                "after an OOM: the top rows show the best the cache had)")
        group = QButtonGroup(self)
        group.setExclusive(True)
        for button in (self.by_address, self.by_size, self.by_free):
            group.addButton(button)
        # Slots must return None: PySide6 mishandles the refcount of returned bools.
        self.by_address.toggled.connect(self._on_sort_button)
        self.by_size.toggled.connect(self._on_sort_button)
        self.by_free.toggled.connect(self._on_sort_button)
        self.fit_button = QToolButton(text="Fit all")
        self.fit_button.setToolTip("Show every segment (Ctrl+0)")
        self.fit_button.clicked.connect(self.fit)
        self.home_button = QToolButton(text="Readable")
        self.home_button.setToolTip("Rows tall enough to read their labels, from the top (Ctrl+9)")
        self.home_button.clicked.connect(self.home)
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)  # two lines in a narrow window, never cut off
        self.legend.setToolTip(
            "Each row is one segment (a cudaMalloc), drawn to scale: x is the byte offset "
            "inside the segment.\nBlocks are coloured by state; the largest free gaps are "
            "outlined in red with their size.\nAfter an OOM the red bracket is the requested "
            "size: a request only fits inside ONE free gap.\nRow labels: segment address and "
            "size (P: a private pool, e.g. CUDA graphs).\n\nWheel: scroll rows · "
            "Ctrl+wheel: zoom bytes · Shift+wheel: zoom rows · drag: pan · click: select")
        self._update_legend()
        self.caption = QLabel()
        self.caption.setToolTip("What the map shows")
        top = QHBoxLayout()
        top.setContentsMargins(4, 2, 4, 0)
        sort_label = QLabel("Rows:")
        top.addWidget(sort_label)
        top.addWidget(self.by_address)
        top.addWidget(self.by_size)
        top.addWidget(self.by_free)
        top.addWidget(self.fit_button)
        top.addWidget(self.home_button)
        top.addSpacing(12)
        top.addWidget(self.legend, 1)
        top.addWidget(self.caption)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(top)
        lay.addWidget(self.plot, 1)
        self.apply_palette()
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    # -- appearance
    def apply_palette(self) -> None:
        self.plot.setBackground(theme.background())
        fg = theme.foreground()
        for name in ("bottom", "left"):
            ax = self.plot.getPlotItem().getAxis(name)
            ax.setPen(pg.mkPen(fg))
            ax.setTextPen(pg.mkPen(fg))
        self._largest_label.setColor(theme.gap_outline())
        self._update_legend()
        self.item.invalidate()

    def _update_legend(self) -> None:
        parts = [theme.swatch_html(c) for c in (theme.CAT_ALLOCATED, theme.CAT_WASTE,
                                                 theme.CAT_PENDING, theme.CAT_FREE,
                                                 theme.CAT_UNKNOWN)]
        parts.append(f'<span style="color:{theme.gap_outline().name()}">&#9633;</span>'
                     "&nbsp;largest free gaps")
        if self.item.request_bytes:
            parts.append(f'<span style="color:{theme.OOM_RED}">&#9482;&#9472;&#9482;</span>'
                         "&nbsp;OOM request")
        if self.item.highlight is not None:
            parts.append(theme.search_swatch_html())
        if self.has_private_rows:
            parts.append("<b>P</b>&nbsp;private pool")
        self.legend.setText("&nbsp;&nbsp; ".join(parts))

    # -- data
    def set_document(self, doc: Document | None, selection: Selection | None = None,
                     sort: str | None = None, fit: bool = True, oom=DOC_OOM) -> None:
        """Show ``doc``; ``fit=False`` keeps the view (time travel: same file, another moment).
        ``oom``: the OOM whose request the map draws (None: none; default: ``doc.oom``)."""
        self.doc = doc
        self.oom = doc.oom if oom is DOC_OOM and doc is not None else (None if oom is DOC_OOM
                                                                      else oom)
        self.selection = selection or Selection()
        if sort is not None and sort != self.sort:
            self.sort = sort
            self._check_sort_button()
            self.sortChanged.emit(sort)
        self.rebuild(fit=fit)

    def _on_sort_button(self, on: bool) -> None:
        if on:
            button = self.sender()
            self.set_sort(SORT_SIZE if button is self.by_size else
                          SORT_FREE if button is self.by_free else SORT_ADDRESS)

    def _check_sort_button(self) -> None:
        {SORT_SIZE: self.by_size, SORT_FREE: self.by_free}.get(self.sort, self.by_address).setChecked(True)

    def set_selection(self, selection: Selection) -> None:
        self.selection = selection
        self.rebuild(fit=True)

    def set_sort(self, sort: str) -> None:
        if sort == self.sort:
            return
        self.sort = sort
        self._check_sort_button()
        selected = self.item.selected
        self.rebuild(fit=True)
        if selected >= 0:
            self.select_block(selected, ensure_visible=False)
        self.sortChanged.emit(sort)

    def rebuild(self, fit: bool = False) -> None:
        for t in self._labels:
            self.plot.removeItem(t)
        self._labels = []
        doc = self.doc
        if doc is None:
            self.layout_data = None
            self.item.set_layout(None)
            self.y_axis.set_labels([])
            self.has_private_rows = False
            self._request_label.hide()
            self._largest_label.hide()
            self.caption.setText("")
            self._update_legend()
            return
        snap = doc.snap
        layout = MapLayout.build(doc, self.selection, self.sort)
        self.layout_data = layout
        gaps = largest_gaps(snap, N_GAPS, self.selection)
        gaps = gaps[layout.pos_of_block[gaps] >= 0] if len(gaps) else gaps
        oom = self.oom
        oom = oom if oom is not None and _oom_in(oom, self.selection) and oom.kind != "changed" \
            else None
        req = oom.requested_bytes if oom else 0
        largest = int(snap.blocks.size[gaps[0]]) if len(gaps) else 0
        self.item.doc_blocks_stack = snap.blocks.stack
        self.item.set_layout(layout, gaps, req, largest)
        segs = snap.segments
        private = [tuple(p) != (0, 0) for p in snap.pools]
        self.has_private_rows = any(private[int(p)] for p in segs.pool[layout.seg_rows].tolist())
        self.y_axis.set_labels([
            f"{format_address(segs.address[s])}  {short_bytes(segs.total_size[s])}"
            + ("  P" if private[int(segs.pool[s])] else "")
            for s in layout.seg_rows.tolist()
        ])
        self._fit_axis_width()
        fill = theme.background()
        fill.setAlpha(210)
        for b in gaps.tolist():
            t = pg.TextItem(format_bytes(int(snap.blocks.size[b])), color=theme.gap_outline(),
                            anchor=(0, 0.5), fill=fill)
            t.gap_block = b
            t.setZValue(5)
            self.plot.addItem(t, ignoreBounds=True)
            self._labels.append(t)
        if req:
            self._request_label.setText(
                f"{format_bytes(req)} requested ({oom.pool_kind} pool): no free gap is this wide")
            self._request_label.setPos(req, self.item.request_y)
            self._largest_label.setText(f"largest free block: {format_bytes(largest)}")
            self._largest_label.setPos(largest, self.item.largest_y)
        else:
            self._request_label.hide()
            self._largest_label.hide()
        n_small = int(segs.is_small[layout.seg_rows].sum()) if layout.n_rows else 0
        self.caption.setText(f"{layout.n_rows} segments ({n_small} small), {len(layout)} blocks")
        self._update_legend()
        self._hover = -1
        maxs = max(layout.max_size, float(req), 1.0)
        top = -2.3 if req else -0.5
        self.vb.setLimits(xMin=-0.05 * maxs, xMax=maxs * 1.05, yMin=top - 1,
                          yMax=max(layout.n_rows, 1) + 1, minXRange=64, minYRange=1)
        ruler_changed = bool(req) != self._had_ruler
        self._had_ruler = bool(req)
        if fit or (ruler_changed and self.view_auto):
            self.home()  # (an automatic view makes room for the OOM ruler, or gives it back)
        else:
            (_, _), (ya, _yb) = self.vb.viewRange()
            if ya > layout.n_rows:  # fewer rows now than the view's top
                self.home()
        self._place_gap_labels()  # (also on every range change)

    def set_highlight(self, stack_mask: np.ndarray | None) -> None:
        self.item.set_highlight(stack_mask)
        self._update_legend()

    def _on_manual_range(self, *_args) -> None:
        self.view_auto = False

    def view_state(self) -> dict | None:
        """The view as the user left it, for :meth:`restore_view_state` after a newer
        document of the same process (live attach): the range, anchored on the
        address of the segment at the top of the view."""
        layout = self.layout_data
        if layout is None:
            return None
        (xa, xb), (ya, yb) = self.vb.viewRange()
        row = int(min(max(math.floor(ya), 0), max(layout.n_rows - 1, 0)))
        segs = self.doc.snap.segments
        anchor = int(segs.address[layout.seg_rows[row]]) if layout.n_rows else -1
        return {"auto": self.view_auto, "x": (xa, xb), "y": (ya, yb), "row": row,
                "anchor": anchor}

    def restore_view_state(self, state: dict | None) -> None:
        """Back to ``state``'s view: the automatic view again if it was automatic,
        else the same range, moved by as many rows as its top segment moved."""
        layout = self.layout_data
        if state is None or layout is None:
            return
        if state["auto"]:
            self.home()
            return
        shift = 0
        if state["anchor"] >= 0 and layout.n_rows:
            addr = self.doc.snap.segments.address[layout.seg_rows]
            hit = np.flatnonzero(addr == state["anchor"])
            if len(hit):
                shift = int(hit[0]) - state["row"]
        (ya, yb) = state["y"]
        self.vb.setRange(xRange=state["x"], yRange=(ya + shift, yb + shift), padding=0)
        self.view_auto = False

    ROW_PX = 17
    MAX_ROW_PX = 42

    def _fit_axis_width(self) -> None:
        labels = self.y_axis.labels
        fm = QFontMetrics(self.y_axis.style.get("tickFont") or self.font())
        longest = max((fm.horizontalAdvance(t) for t in labels), default=40)
        self.y_axis.setWidth(min(240, longest + 14))

    def _place_gap_labels(self, *_args) -> None:
        """Gap sizes inside their gap when they fit, else beside it (inside the row);
        then every label of the map is shown only where it overlaps no more important
        one and lies wholly in the view: the OOM request's caption first, the largest
        free block's, then the gaps largest first (issue 17: never a pile of labels)."""
        layout = self.layout_data
        if layout is None:
            return
        px = self.item.bytes_per_px()
        gaps = []
        for t in self._labels:
            r = layout.rect_of(t.gap_block)
            if r is None:
                t.hide()
                continue
            text_w = (t.textItem.boundingRect().width() + 6) * px
            y = r.center().y()
            if r.width() >= text_w:
                t.setAnchor((0, 0.5))
                t.setPos(r.left(), y)
            elif r.left() >= text_w:
                t.setAnchor((1, 0.5))
                t.setPos(r.left(), y)
            else:
                t.setAnchor((0, 0.5))
                t.setPos(r.right(), y)
            gaps.append(t)
        rulers = []
        if self.item.request_bytes:
            # The brackets at least so many pixels above the rows, however small the rows.
            row_px = self.vb.viewPixelSize()[1] or 0.0
            text_h = self._request_label.textItem.boundingRect().height()
            req_y = min(REQUEST_Y, -(1.5 * text_h + 5) * row_px)
            # one caption's height (and a little) below the request's, whatever the rows
            big_y = min(req_y + (text_h + 4) * row_px, -(0.5 * text_h + 1) * row_px)
            if (req_y, big_y) != (self.item.request_y, self.item.largest_y):
                self.item.prepareGeometryChange()
                self.item.request_y, self.item.largest_y = req_y, big_y
                self.item.update()
            self._request_label.setPos(self.item.request_bytes, req_y)
            self._largest_label.setPos(self.item.largest_free, big_y)
            rulers.append(self._request_label)
            if self.item.largest_free:
                rulers.append(self._largest_label)
        self.shown_labels = place_text_items(rulers + gaps, self.vb)

    def label_items(self) -> list[pg.TextItem]:
        """Every text the map may draw over the rows (tests: none overlap)."""
        return [self._request_label, self._largest_label, *self._labels]

    def _ruler_px(self) -> float:
        """Pixels above the first row that the OOM's two captions take."""
        return 2 * self._request_label.textItem.boundingRect().height() + 10

    def _ruler_top(self, px_per_row: float) -> float:
        """The view's top (rows) leaving room for the OOM ruler at ``px_per_row``."""
        top = min(-2.3, -self._ruler_px() / max(px_per_row, 1e-9))
        self.vb.setLimits(yMin=top - 1)
        return top

    def home(self) -> None:
        """Whole segments across; from the top, as many rows as stay readable."""
        layout = self.layout_data
        if layout is None:
            return
        h = self.vb.height() if self.vb.height() > 50 else 400.0
        rows = max(8.0, h / self.ROW_PX)
        if layout.n_rows <= rows:
            self.fit()
            return
        maxs = max(layout.max_size, float(self.item.request_bytes), 1.0)
        top = self._ruler_top(h / rows) if self.item.request_bytes else -0.3
        self.vb.setRange(xRange=(0, maxs), yRange=(top, top + rows), padding=0.01)
        self.view_auto = True

    def fit(self) -> None:
        layout = self.layout_data
        if layout is None:
            return
        maxs = max(layout.max_size, float(self.item.request_bytes), 1.0)
        top = -2.3 if self.item.request_bytes else -0.3
        h = self.vb.height() if self.vb.height() > 50 else 400.0
        ruler_px = self._ruler_px()
        if self.item.request_bytes and h > 3 * ruler_px:
            # Many rows: the OOM ruler and its captions keep their pixels above them.
            top = min(top, -ruler_px * (layout.n_rows + 0.3) / (h - ruler_px))
            self.vb.setLimits(yMin=top - 1)
        elif self.item.request_bytes:
            top = self._ruler_top(h / max(layout.n_rows + 0.3 - top, 1.0))
        # Few segments: rows no taller than MAX_ROW_PX, from the top.
        bottom = max(layout.n_rows + 0.3, top + h / self.MAX_ROW_PX)
        self.vb.setRange(xRange=(0, maxs), yRange=(top, bottom), padding=0.01)
        self.view_auto = True

    # -- selection
    def select_block(self, block: int, ensure_visible: bool = True) -> None:
        self.item.set_selected(block)
        if not ensure_visible or self.layout_data is None:
            return
        r = self.layout_data.rect_of(block)
        if r is None:
            return
        (xa, xb), (ya, yb) = self.vb.viewRange()
        view = QRectF(QPointF(xa, ya), QPointF(xb, yb))
        if not view.contains(r.center()):
            dy = r.center().y() - (ya + yb) / 2 if not ya <= r.center().y() <= yb else 0.0
            dx = r.center().x() - (xa + xb) / 2 if not xa <= r.center().x() <= xb else 0.0
            self.vb.translateBy(x=dx, y=dy)
            self.view_auto = False  # scrolled to what the user picked: keep it there

    def block_viewport_pos(self, block: int) -> QPoint | None:
        """Where block ``block``'s bar centre is, in the plot's viewport pixels."""
        if self.layout_data is None:
            return None
        r = self.layout_data.rect_of(block)
        if r is None:
            return None
        scene = self.vb.mapViewToScene(r.center())
        return self.plot.mapFromScene(scene)

    # -- mouse
    def _block_at_scene(self, scene_pos) -> int:
        if self.layout_data is None or not self.vb.sceneBoundingRect().contains(scene_pos):
            return -1
        p = self.vb.mapSceneToView(scene_pos)
        return self.layout_data.block_at(p.x(), p.y())

    def _on_mouse_moved(self, scene_pos) -> None:
        b = self._block_at_scene(scene_pos)
        if b == self._hover:
            return
        self._hover = b
        if b < 0:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.block_tooltip(b), self.plot)

    def _on_mouse_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        b = self._block_at_scene(ev.scenePos())
        if b >= 0:
            ev.accept()
            self.select_block(b, ensure_visible=False)
            self.blockClicked.emit(b)

    def block_tooltip(self, b: int) -> str:
        doc = self.doc
        snap = doc.snap
        blocks, segs = snap.blocks, snap.segments
        s = int(blocks.segment[b])
        state = BlockState(int(blocks.state[b]))
        size, req = int(blocks.size[b]), int(blocks.requested_size[b])
        active = state in (BlockState.ALLOCATED, BlockState.PENDING_FREE)
        lines = [
            f"<b>{state.label}</b> block <tt>{format_address(blocks.address[b])}</tt>",
            f"size {format_bytes(size)} ({size:,} B)",
        ]
        if active:
            lines.append(f"requested {format_bytes(req)}, rounding waste {format_bytes(size - req)}")
        seg_kind = "small" if segs.is_small[s] else "large"
        extra = ", expandable" if segs.is_expandable[s] else ""
        lines.append(
            f"segment <tt>{format_address(segs.address[s])}</tt> "
            f"{format_bytes(int(segs.total_size[s]))} ({seg_kind}{extra}), "
            f"{stream_label(int(segs.stream[s]))}, {pool_label(snap.pools[int(segs.pool[s])])}"
        )
        top = doc.block_top_label(b)
        if top:
            lines.append(f"from <tt>{_html(top)}</tt>")
        return "<br>".join(lines)

    # -- export
    def render_image(self, scale: float = 1.0) -> QImage:
        size = self.plot.size() * scale
        img = QImage(size, QImage.Format.Format_ARGB32)
        img.fill(theme.background())
        p = QPainter(img)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        self.plot.render(p)
        p.end()
        return img

    def export_png(self, path: str) -> bool:
        return self.render_image().save(path, "PNG")

    def export_svg(self, path: str) -> bool:
        from PySide6.QtSvg import QSvgGenerator

        gen = QSvgGenerator()
        gen.setFileName(path)
        size = self.plot.size()
        gen.setSize(size)
        gen.setViewBox(QRectF(0, 0, size.width(), size.height()))
        gen.setTitle("vramscope segment map")
        gen.setDescription(self.doc.name if self.doc else "")
        p = QPainter()
        if not p.begin(gen):
            return False
        self.plot.render(p)
        p.end()
        return True

    def copy_image(self) -> None:
        QGuiApplication.clipboard().setImage(self.render_image())


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
