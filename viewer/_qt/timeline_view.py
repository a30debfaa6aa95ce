"""The timeline: memory over time, the stacked allocations, and the time-travel cursor.

One plot, x = events (or time), y = bytes:

* every allocation stacked bottom-up in the order it was made, like
  memory_viz's Active Memory Timeline, from :func:`stacked_layout` recomputed
  (debounced) on every view change with one column per pixel; drawn as one
  QPainterPath of step polygons per colour (colour by code site), the
  allocations too small to draw individually one grey band at the bottom;
* the requested / allocated / active / reserved curves, their peaks marked;
* OOM (red) and ``snapshot`` markers, ``record_function`` ranges as labelled
  translucent bands;
* the cursor: a vertical line; click, drag, arrow keys move it, and the whole
  window shows the block layout after that event.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyqtgraph as pg
from pyqtgraph import functions as pgfn
from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QCursor, QFontMetrics, QImage, QPainter, QPainterPath
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

from ..model.annotations import pair_ranges
from ..model.document import Document, stream_label
from ..model.snapshot import Action
from ..model.stacking import StackedLayout, stacked_layout
from ..model.units import format_bytes
from . import theme
from .plotting import place_text_items, rects_path, short_bytes, text_scene_rect

X_TIME = "time"
X_EVENTS = "events"
CURVES = ("reserved", "active", "allocated", "requested")
CURVE_COLORS = {"reserved": "#37474f", "active": "#8e24aa", "allocated": "#0d47a1",
                "requested": "#2e7d32"}
CURVE_COLORS_DARK = {"reserved": "#eceff1", "active": "#e1bee7", "allocated": "#82b1ff",
                     "requested": "#b9f6ca"}
CURVE_TIPS = {
    "reserved": "Reserved: bytes in segments (torch.cuda.memory_reserved())",
    "active": "Active: allocated + pending-free blocks (the top of the stacked allocations)",
    "allocated": "Allocated: blocks handed to live tensors (torch.cuda.memory_allocated())",
    "requested": "Requested: what the callers asked for, before rounding",
}
# Bands: soft colours so the curves stay readable; one per code site.
BAND_COLORS = ("#90caf9", "#a5d6a7", "#ffcc80", "#ce93d8", "#80deea", "#e6ee9c", "#bcaaa4",
               "#aed581", "#9fa8da", "#c5e1a5", "#ffe082", "#80cbc4", "#b39ddb", "#4fc3f7",
               "#81d4fa", "#dce775")
SUMMARY_COLOR = "#bdbdbd"
DIM_COLOR = "#e0e0e0"
HIGHLIGHT_PEN = "#ff6f00"
ANNOTATION_COLORS = ("#7e57c2", "#26a69a", "#ef6c00", "#5c6bc0", "#8d6e63")
ACTION_TEXT = {
    Action.ALLOC: "alloc", Action.FREE_REQUESTED: "free requested",
    Action.FREE_COMPLETED: "free completed", Action.SEGMENT_ALLOC: "segment alloc (cudaMalloc)",
    Action.SEGMENT_FREE: "segment free (cudaFree)", Action.SEGMENT_MAP: "segment map",
    Action.SEGMENT_UNMAP: "segment unmap", Action.OOM: "OOM", Action.SNAPSHOT: "snapshot",
}
DEBOUNCE_MS = 30
STACK_PX = 2  # pixels per column of the stacked allocations (curves: one point per pixel)
ENVELOPE_LEVELS = (64, 4096)  # events per envelope block (as curve_index, for plain arrays)


def curve_colors() -> dict[str, str]:
    return CURVE_COLORS_DARK if theme.is_dark() else CURVE_COLORS


def format_seconds(s: float) -> str:
    """+12.3 s, +45.6 ms, +789 µs."""
    a = abs(s)
    if a >= 60:
        return f"{s / 60:.1f} min"
    if a >= 1:
        return f"{s:.2f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


class EventXs:
    """x of every event in event mode (x = k), indexable like an array of n floats
    without holding one (10M events would be 80 MB, rebuilt per document)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key):
        if isinstance(key, slice):
            return np.arange(*key.indices(self.n), dtype=np.float64)
        a = np.asarray(key)
        if a.ndim == 0:
            k = int(a) + (self.n if int(a) < 0 else 0)
            if not 0 <= k < self.n:
                raise IndexError(int(a))
            return np.float64(k)
        a = a.astype(np.int64)
        return np.where(a < 0, a + self.n, a).astype(np.float64)


def band_color_index(keys: np.ndarray) -> np.ndarray:
    """A stable colour per code site (frame id; -1: no stack)."""
    k = keys.astype(np.int64)
    h = (k * 2654435761 + 97) % 4294967296
    return np.where(k < 0, len(BAND_COLORS) - 1, (h >> 7) % len(BAND_COLORS)).astype(np.int64)


# --------------------------------------------------------------------------- geometry


def column_edges(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left/right edges of each column centred on ``xs`` (midpoints between samples)."""
    n = len(xs)
    if n == 0:
        z = np.zeros(0)
        return z, z
    if n == 1:
        return xs - 0.5, xs + 0.5
    mid = (xs[1:] + xs[:-1]) / 2
    left = np.concatenate([[xs[0] - (mid[0] - xs[0])], mid])
    right = np.concatenate([mid, [xs[-1] + (xs[-1] - mid[-1])]])
    return left, right


def band_rects(lay: StackedLayout, xl: np.ndarray, xr: np.ndarray):
    """Every band as rectangles: one per run of columns where it keeps its place.

    Returns ``(x0, x1, y0, y1, band)``.  Rectangles rather than one polygon per
    band: a band whose base jumps from column to column (things below it come
    and go) would make a zigzag polygon whose long edges cost the rasteriser
    dearly; a rect per run keeps the work proportional to the painted area.
    """
    pb, pc = lay.pair_band, lay.pair_column
    top, bot = lay.pair_top, lay.pair_bottom
    n = len(pb)
    if n == 0:
        z = np.zeros(0)
        return z, z, z, z, np.zeros(0, np.int64)
    new = np.ones(n, bool)
    new[1:] = (pb[1:] != pb[:-1]) | (top[1:] != top[:-1]) | (bot[1:] != bot[:-1]) \
        | (pc[1:] != pc[:-1] + 1)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n) - 1
    return (xl[pc[starts]], xr[pc[ends]], bot[starts].astype(np.float64),
            top[starts].astype(np.float64), pb[starts])


def summary_polygon(lay: StackedLayout, xl: np.ndarray, xr: np.ndarray) -> QPainterPath:
    h = lay.summary_height.astype(np.float64)
    if not len(h) or not h.any():
        return QPainterPath()
    xs = np.stack([xl, xr], axis=1).ravel()
    ys = np.repeat(h, 2)
    xs = np.concatenate([[xl[0]], xs, [xr[-1]]])
    ys = np.concatenate([[0.0], ys, [0.0]])
    return pgfn.arrayToQPath(xs, ys, connect="all", finiteCheck=False)


def stacked_raster(lay: StackedLayout, band_argb: np.ndarray, summary_argb: int, y0: float,
                   y1: float, height: int, col_of_px: np.ndarray) -> np.ndarray:
    """The stacked layout as pixels: (height, len(col_of_px)) uint32 ARGB, row 0 at ``y0``.

    Every column of the layout is a partition of [0, top] into the summary band
    and the bands stacked on it, so each pixel column is a run-length sequence:
    one ``np.repeat`` paints them all, whatever the number of bands (10M events
    cost the same as 10k).  ``col_of_px``: the layout column each pixel column shows.
    """
    ncol = len(lay.samples)
    scale = height / max(y1 - y0, 1e-9)

    def px(values: np.ndarray) -> np.ndarray:
        return np.clip(np.rint((values - y0) * scale), 0, height).astype(np.int64)

    order = lay.pair_order  # pairs by (column, stacking order)
    pc = lay.pair_column[order]
    counts = np.bincount(pc, minlength=ncol)[:ncol]
    before = np.cumsum(counts) - counts  # pairs in the columns before each column
    c2 = 2 * np.arange(ncol)
    # Per column: the summary band, its bands bottom-up, the empty rest (placed, not sorted).
    sum_pos, end_pos = before + c2, before + counts + c2 + 1
    pair_pos = np.arange(len(order)) + 2 * pc + 1
    bound = np.empty(len(order) + 2 * ncol, np.int64)
    color = np.empty(len(bound), np.uint32)
    bound[sum_pos], color[sum_pos] = px(lay.summary_height.astype(np.float64)), summary_argb
    bound[pair_pos] = px(lay.pair_top[order].astype(np.float64))
    color[pair_pos] = band_argb[lay.pair_band[order]]
    bound[end_pos], color[end_pos] = height, 0
    cols = np.repeat(np.arange(ncol), counts + 2)
    # Rounding never runs a column backwards (offsets keep the columns apart).
    offset = cols * (height + 1)
    bound = np.maximum.accumulate(bound + offset) - offset
    prev = np.concatenate([[0], bound[:-1]])
    prev[np.flatnonzero(np.diff(cols, prepend=-1))] = 0  # each column starts at row 0
    per_col = np.repeat(color, bound - prev).reshape(ncol, height)
    return np.ascontiguousarray(per_col[col_of_px].T)


# --------------------------------------------------------------------------- items


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

    def set_image(self, pixels: np.ndarray | None, rect: QRectF, selected: QPainterPath,
                  bounds: QRectF, highlight: QPainterPath | None = None) -> None:
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
        self._color_id = np.array([colors.setdefault(bands[i][3].rgba(), len(colors))
                                   for i in order], np.int64)
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
            for c in np.unique(cid).tolist():
                m = np.flatnonzero(cid == c)
                lo = np.clip(np.floor(x0[m] * tr.m11() + tr.dx()) - left, 0, width).astype(np.int64)
                hi = np.clip(np.ceil(x1[m] * tr.m11() + tr.dx()) - left, 0, width).astype(np.int64)
                hi = np.maximum(hi, np.minimum(lo + 1, width))
                cover = np.cumsum(np.bincount(lo, minlength=width + 1)[:width + 1]
                                  - np.bincount(hi, minlength=width + 1)[:width + 1])[:width] > 0
                col = self._colors[c]
                alpha = col.alphaF()
                src = np.array([col.redF() * alpha, col.greenF() * alpha, col.blueF() * alpha,
                                alpha])
                rgba[cover] = src + rgba[cover] * (1.0 - alpha)  # "over"
            px = np.rint(rgba * 255).astype(np.uint32)
            row = (px[:, 3] << 24) | (px[:, 0] << 16) | (px[:, 1] << 8) | px[:, 2]
            img = QImage(row.data, width, 1, 4 * width, QImage.Format.Format_ARGB32_Premultiplied)
            p.save()
            p.resetTransform()
            p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            p.drawImage(QRectF(left, y_px[0], width, y_px[1] - y_px[0]), img)
            p.restore()
        for xs, color, text, style in self.lines:
            if not len(xs):
                continue
            p.setPen(pg.mkPen(color, width=1.5, cosmetic=True, style=style))
            path = pgfn.arrayToQPath(np.repeat(xs, 2), np.tile([ya, yb], len(xs)),
                                     connect="pairs", finiteCheck=False)
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


class BytesYAxis(pg.AxisItem):
    """Bytes at round binary units: 0, 2 GiB, 4 GiB…  Once the range reaches 1 GiB the
    ticks are in GiB (0.5 GiB, 1 GiB, 1.5 GiB), the unit of the header's figures: never
    "1500 MiB" beside a header saying "1.34 GiB" (issue 17)."""

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


class XAxis(pg.AxisItem):
    """Event index (thousands separators) or time relative to the first event."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.mode = X_EVENTS

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


class TimelinePanel(QWidget):
    """Header (cursor position, navigation) over the plot."""

    cursorRequested = Signal(int)  # the user moved the cursor to event k
    intervalClicked = Signal(int)  # an allocation band was clicked (interval id)
    latestRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc: Document | None = None
        self.device: int | None = None
        self.stream: int | None = None
        self.pool: int | None = None
        self.n = 0
        self.k = -1
        self.mode = X_EVENTS
        self.has_time = False
        self._time = np.zeros(0, np.int64)  # time_us per event
        self._tx: np.ndarray | None = None  # seconds since the first event (built on use)
        self.iv = None
        self.iv_ids = np.zeros(0, np.int64)  # interval ids drawn (stream filter)
        self._sub_iv = None  # the intervals of iv_ids (filtered views)
        self.band_color = np.zeros(0, np.int64)  # per interval
        self.stack_mask: np.ndarray | None = None  # per stack: highlighted
        self.selected_interval = -1
        self.layout: StackedLayout | None = None
        self.layout_ids = np.zeros(0, np.int64)  # interval id per band of self.layout
        self.layout_range = (0, 0)
        self.last_refresh_s = 0.0
        self.xs_cols = np.zeros(0)
        self.curves: dict[str, np.ndarray] = {}
        self.peaks: dict[str, tuple[int, int]] = {}
        self._hover = -1
        self.source_text = ""  # what instant the trace reaches (live attach)
        self.latest_text = "latest (as recorded)"  # the last event, in the position line

        # -- header
        self.title = QLabel("<b>Timeline</b>")
        self.position = QLabel()
        self.position.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.position.setToolTip("The cursor: the window shows the block layout after this event")
        self.time_button = QToolButton(text="Time", checkable=True)
        self.time_button.setToolTip("x axis: time since the first event (Ctrl+T toggles)")
        self.events_button = QToolButton(text="Events", checkable=True, checked=True)
        self.events_button.setToolTip("x axis: event index in the device's trace (Ctrl+T toggles)")
        group = QButtonGroup(self)
        group.setExclusive(True)
        group.addButton(self.time_button)
        group.addButton(self.events_button)
        self.time_button.toggled.connect(self._on_mode_button)
        self.peak_button = QToolButton(text="Peak")
        self.peak_button.setToolTip("Jump to the peak of allocated memory (Ctrl+Shift+P)")
        self.prev_oom_button = QToolButton(text="◀")
        self.prev_oom_button.setToolTip("Previous OOM (Ctrl+Shift+[)")
        self.oom_button = QToolButton(text="OOM")
        self.oom_button.setToolTip("Jump to the last out-of-memory event (Ctrl+J)")
        self.next_oom_button = QToolButton(text="▶")
        self.next_oom_button.setToolTip("Next OOM (Ctrl+Shift+])")
        self.latest_button = QToolButton(text="Latest (as recorded)")
        self.latest_button.setToolTip("Back to the snapshot as it was recorded: the end of the trace (End)")
        self.fit_button = QToolButton(text="Fit")
        self.fit_button.setToolTip("Show the whole trace")
        self.fit_button.clicked.connect(self.fit)
        self.latest_button.clicked.connect(self.latestRequested)
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setToolTip(
            "Curves: bytes after each event.\nBands: every allocation stacked bottom-up in "
            "the order it was made (memory_viz's active memory timeline), one colour per code "
            "site; grey at the bottom: allocations too small to draw one by one at this zoom.\n"
            "Red lines: out-of-memory events. Shaded ranges: record_function annotations.\n\n"
            "Click: move the cursor there (and select the allocation) · drag the cursor line · "
            "←/→ one event (Shift: 100) · Home/End · wheel: zoom · drag: pan")
        top = QHBoxLayout()
        top.setContentsMargins(4, 2, 4, 0)
        top.setSpacing(4)
        top.addWidget(self.title)
        top.addWidget(self.time_button)
        top.addWidget(self.events_button)
        top.addSpacing(8)
        for b in (self.peak_button, self.prev_oom_button, self.oom_button, self.next_oom_button,
                  self.latest_button, self.fit_button):
            top.addWidget(b)
        top.addSpacing(8)
        top.addWidget(self.position, 1)
        top.addWidget(self.legend)

        # -- plot
        self.x_axis = XAxis("bottom")
        self.x_axis.enableAutoSIPrefix(False)
        self.y_axis = BytesYAxis("left")
        self.y_axis.setWidth(64)
        self.vb = TimelineViewBox(enableMenu=False)  # no context menu: none built
        self.vb.setMouseEnabled(x=True, y=False)
        self.plot = pg.PlotWidget(viewBox=self.vb, axisItems={"bottom": self.x_axis, "left": self.y_axis})
        self.plot.setMinimumSize(QSize(200, 90))
        self.plot.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.plot.installEventFilter(self)
        pi = self.plot.getPlotItem()
        pi.hideButtons()
        pi.setMenuEnabled(False)
        pi.showGrid(x=False, y=True, alpha=0.12)
        self.vb.disableAutoRange()
        self.bands_item = VerticalBandsItem()
        self.bands_item.avoid = lambda: [text_scene_rect(t, self.vb) for t in self.peak_labels
                                         if t.isVisible()]
        self.plot.addItem(self.bands_item, ignoreBounds=True)
        self.stacked = StackedItem()
        self.plot.addItem(self.stacked, ignoreBounds=True)
        self.curve_items: dict[str, pg.PlotCurveItem] = {}
        for z, name in enumerate(CURVES):
            item = pg.PlotCurveItem()  # data decimated here, per view (see _update_curves)
            item.setZValue(7 - z)  # reserved on top, requested at the bottom
            self.plot.addItem(item)
            self.curve_items[name] = item
        self.peak_scatter = pg.ScatterPlotItem(size=9, symbol="o")
        self.peak_scatter.setZValue(8)
        self.plot.addItem(self.peak_scatter, ignoreBounds=True)
        self.peak_labels: list[pg.TextItem] = []
        self.cursor = pg.InfiniteLine(pos=0, angle=90, movable=True,
                                      pen=pg.mkPen(theme.foreground(), width=2),
                                      hoverPen=pg.mkPen(HIGHLIGHT_PEN, width=4))
        self.cursor.setZValue(20)
        self.cursor.setToolTip("The time-travel cursor: drag it")
        self.plot.addItem(self.cursor, ignoreBounds=True)
        self.cursor.sigDragged.connect(self._on_cursor_dragged)
        self.cursor.sigPositionChangeFinished.connect(self._on_cursor_drag_finished)
        self.vb.sigXRangeChanged.connect(self._on_x_range)
        self.vb.sigResized.connect(self._on_x_range)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self._timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._timer.timeout.connect(self.refresh_stack)
        self._update_legend()

        # A trace that starts mid-run (a late start, a wrapped ring): what it cannot show.
        self.window_note = QLabel()
        self.window_note.setObjectName("traceWindowNote")
        self.window_note.setWordWrap(True)
        self.window_note.setStyleSheet("font-size: 8pt;")
        self.window_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.window_note.hide()
        self.starts_mid_run = False
        self.empty = QLabel("No allocator trace in this snapshot: record with "
                            "torch.cuda.memory._record_memory_history() to see memory over time.")
        self.empty.setEnabled(False)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(1)
        lay.addLayout(top)
        lay.addWidget(self.window_note)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.empty, 1)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.apply_palette()

    # ------------------------------------------------------------------ appearance
    def apply_palette(self) -> None:
        self.plot.setBackground(theme.background())
        fg = theme.foreground()
        for name in ("bottom", "left"):
            ax = self.plot.getPlotItem().getAxis(name)
            ax.setPen(pg.mkPen(fg))
            ax.setTextPen(pg.mkPen(fg))
        self.cursor.setPen(pg.mkPen(fg, width=2))
        colors = curve_colors()
        for name, item in self.curve_items.items():
            item.setPen(pg.mkPen(colors[name], width=1.5 if name == "reserved" else 1))
        self._update_legend()

    def _update_legend(self) -> None:
        colors = curve_colors()
        parts = [f'<span style="color:{colors[c]}">&#9473;</span>&nbsp;{c}' for c in CURVES]
        parts.append(f'<span style="color:{theme.OOM_RED}">&#9475;</span>&nbsp;OOM')
        if self.stack_mask is not None:
            parts.append(theme.search_swatch_html())
        self.legend.setText("&nbsp; ".join(parts))

    # ------------------------------------------------------------------ data
    def set_document(self, doc: Document | None, device: int | None, stream: int | None = None,
                     pool: int | None = None) -> None:
        """Show ``device``'s trace of ``doc`` (``stream``/``pool``: only that stream's or
        pool's curves and allocations)."""
        self.doc = doc
        self.device = device
        self.stream = stream
        self.pool = pool
        self.selected_interval = -1
        rep = doc.timeline.replay(device) if doc is not None and doc.timeline is not None \
            and device is not None else None
        has = rep is not None and len(rep) > 0
        self.plot.setVisible(has)
        self.empty.setVisible(not has)
        for w in (self.time_button, self.events_button, self.peak_button, self.oom_button,
                  self.latest_button, self.fit_button, self.prev_oom_button, self.next_oom_button):
            w.setEnabled(has)
        if not has:
            self.window_note.hide()
            self.starts_mid_run = False
            self.n = 0
            self.k = -1
            self.iv = None
            self.layout = None
            self.curves = {}
            self.stacked.clear()
            for item in self.curve_items.values():
                item.setData([], [])
            self.position.setText("")
            return
        self.n = len(rep)
        t = rep.time_us
        self._time, self._tx = t, None
        # Timestamps that never go back (a bool per event, not a diff of int64s).
        self.has_time = bool(t[0] >= 0 and t[-1] > t[0] and (t[1:] >= t[:-1]).all())
        if not self.has_time and self.mode == X_TIME:
            self.mode = X_EVENTS
        self.time_button.setEnabled(self.has_time)
        self.time_button.setToolTip("x axis: time since the first event (Ctrl+T toggles)"
                                    if self.has_time else "This trace has no timestamps")
        self.iv = doc.intervals(device)
        if stream is None and pool is None:
            self.iv_ids = np.arange(len(self.iv))
        else:
            keep = np.ones(len(self.iv), bool)
            if stream is not None:
                keep &= self.iv.stream == stream
            if pool is not None:
                keep &= self.iv.pool == pool
            self.iv_ids = np.flatnonzero(keep)
        self._sub_iv = None
        # Colour by the allocation's top frame: one colour per stack, gathered per
        # interval (stack -1, none, picks the last entry: the colour of no frame).
        per_stack = band_color_index(np.append(doc.top_frame, -1))
        self.band_color = per_stack[np.maximum(self.iv.stack, -1)]
        self.curves = doc.curves(device, stream, pool)
        self._build_envelopes()
        self.peaks = {c: self.curves[c].peak() if hasattr(self.curves[c], "peak")
                      else (int(self.curves[c].max()), int(np.argmax(self.curves[c])))
                      for c in CURVES}
        self._set_mode_buttons()
        self.starts_mid_run = len(getattr(getattr(rep, "initial", None), "seg_addr", ())) > 0
        self._place_all(fit=True)
        self._set_window_note(rep)  # (last: showing it resizes the plot, which redraws)

    def _set_window_note(self, rep) -> None:
        """Say what a trace that starts mid-run cannot show (issue 17): the segments and
        blocks that existed before its first event were made outside it, so their
        creation, and any peak before it, are not in the recording."""
        init = getattr(rep, "initial", None)
        n_seg = len(init.seg_addr) if init is not None else 0
        self.starts_mid_run = n_seg > 0
        if not n_seg:
            self.window_note.hide()
            self.window_note.setText("")
            return
        reserved = int(init.seg_size.sum())
        n_blk = len(init.blk_addr)
        self.window_note.setText(
            f"<span style='color:{theme.gap_outline().name()}'>&#9888;</span> Trace starts "
            f"mid-run: {n_seg:,} segment{'s' if n_seg != 1 else ''} ({format_bytes(reserved)}) "
            "existed before event 0; their creation and any earlier peak are not recorded.")
        self.window_note.setToolTip(
            f"{n_seg:,} segments ({format_bytes(reserved)} reserved) and {n_blk:,} blocks were "
            "there before the first recorded event.\nThe allocator's history is a ring buffer "
            "(max_entries): a long run keeps only its last events, or recording started after "
            "the model was loaded.\nPeaks are peaks of this window; a what-if replay cannot "
            "predict the segments made before it.\nRecord from the start of the program, or "
            "with a larger max_entries, to see everything.")
        self.window_note.show()

    def set_source(self, text: str, tip: str = "") -> None:
        """A note in the x axis's title saying what instant the trace reaches (live
        attach; "" for none).  The axis title has room; the header row has not."""
        if text != self.source_text:
            self.source_text = text
            self._set_mode_buttons()
        self.plot.getPlotItem().getAxis("bottom").setToolTip(tip)

    def set_filter(self, stream: int | None, pool: int | None) -> None:
        """Restrict curves and allocations to one stream and/or pool."""
        if self.doc is not None and (stream, pool) != (self.stream, self.pool):
            k = self.k
            (xa, xb), _ = self.vb.viewRange()
            ka, kb = self.k_of(xa), self.k_of(xb)
            self.set_document(self.doc, self.device, stream, pool)
            self.set_cursor(k)
            self.vb.setXRange(self.x_of(ka), self.x_of(kb), padding=0)

    def view_state(self) -> dict | None:
        """The x range as the user left it, for :meth:`restore_view_state` over a newer
        document of the same trace (live attach).  ``following``: the latest event is
        at the right edge; ``whole``: the whole trace is in view."""
        if not self.n:
            return None
        (xa, xb), _ = self.vb.viewRange()
        first, last = float(self.x_of(0)), float(self.x_of(self.n - 1))
        return {"xa": xa, "xb": xb, "last": last, "time": self._time, "has_time": self.has_time,
                "following": xb >= last, "whole": xa <= first and xb >= last}

    def restore_view_state(self, state: dict | None) -> None:
        """Show the range of ``state`` (taken by :meth:`view_state` before this document
        replaced an older one of the same trace): the same events stay in view; a view
        that followed the latest event follows the new latest, at the same zoom."""
        if state is None or not self.n:
            return
        if state["whole"]:
            self.fit()
            return
        old_t, new_t = state["time"], self._time
        # The live window is bounded: the oldest events may have been dropped since, so
        # x (event index, or seconds since the first event) moves by what was dropped.
        shift = 0.0
        if state["has_time"] and self.has_time and len(old_t) and int(new_t[0]) != int(old_t[0]):
            if self.mode == X_TIME:
                shift = (int(new_t[0]) - int(old_t[0])) / 1e6
            else:
                shift = float(np.searchsorted(old_t, new_t[0], side="left"))
        xa, xb = state["xa"] - shift, state["xb"] - shift
        if state["following"]:
            margin = xb - (state["last"] - shift)
            xb = float(self.x_of(self.n - 1)) + margin
            xa = xb - (state["xb"] - state["xa"])
        self.vb.setXRange(xa, xb, padding=0)
        self._on_x_range()

    def x_of(self, k) -> float | np.ndarray:
        if self.mode == X_TIME and self.has_time:
            return self.tx[np.clip(k, 0, self.n - 1)]
        return np.asarray(k, dtype=np.float64) if not np.isscalar(k) else float(k)

    @property
    def tx(self) -> np.ndarray:
        """Seconds since the first event, per event (only built when time is shown)."""
        if self._tx is None or len(self._tx) != self.n:
            t = self._time
            self._tx = (t - t[0]) / 1e6 if self.has_time and len(t) else np.zeros(self.n)
        return self._tx

    def seconds_at(self, k: int) -> float:
        return float(self._time[k] - self._time[0]) / 1e6

    def xs(self):
        """x of every event: seconds, or the event index (no array of n floats)."""
        if self.mode == X_TIME and self.has_time:
            return self.tx
        return EventXs(self.n)

    def k_of(self, x: float) -> int:
        """The event nearest to view x."""
        if not self.n:
            return -1
        if self.mode == X_TIME and self.has_time:
            i = int(np.searchsorted(self.tx, x))
            if i >= self.n:
                return self.n - 1
            if i > 0 and x - self.tx[i - 1] <= self.tx[i] - x:
                i -= 1
            # Several events can share one timestamp: the last of them.
            return int(np.searchsorted(self.tx, self.tx[i], side="right") - 1)
        return int(min(max(round(x), 0), self.n - 1))

    def set_mode(self, mode: str) -> None:
        if mode == X_TIME and not self.has_time:
            mode = X_EVENTS
        if mode == self.mode:
            self._set_mode_buttons()
            return
        ka = kb = None
        if self.n:
            (xa, xb), _ = self.vb.viewRange()
            ka, kb = self.k_of(xa), self.k_of(xb)
        self.mode = mode
        self._set_mode_buttons()
        if self.n:
            self._place_all(fit=False)
            self.vb.setXRange(float(self.x_of(ka)), float(self.x_of(kb)), padding=0)

    def toggle_mode(self) -> None:
        self.set_mode(X_EVENTS if self.mode == X_TIME else X_TIME)

    def _set_mode_buttons(self) -> None:
        self.x_axis.mode = self.mode
        for b in (self.time_button, self.events_button):
            b.blockSignals(True)
        self.time_button.setChecked(self.mode == X_TIME)
        self.events_button.setChecked(self.mode != X_TIME)
        for b in (self.time_button, self.events_button):
            b.blockSignals(False)
        label = ("time since the first event" if self.mode == X_TIME
                 else f"event ({self.n:,} on device {self.device})" if self.n else "event")
        if self.source_text:
            label += f"  ·  {self.source_text}"
        self.plot.getPlotItem().setLabel("bottom", label)
        self.x_axis.picture = None
        self.x_axis.update()

    def _on_mode_button(self, on: bool) -> None:
        self.set_mode(X_TIME if on else X_EVENTS)

    def _place_all(self, fit: bool) -> None:
        """Curves, markers, bands and peaks for the current x mode."""
        xs = self.xs()
        self._update_curves(0, self.n - 1)
        self._place_peaks()
        self._place_markers()
        x_lo, x_hi = float(xs[0]), float(xs[-1])
        span = max(x_hi - x_lo, 1e-9)
        self.vb.setLimits(xMin=x_lo - span * 0.02, xMax=x_hi + span * 0.02, yMin=-1,
                          minXRange=min(span, 4.0 if self.mode == X_EVENTS else 1e-6))
        if fit:
            self.fit()
        self.set_cursor(self.k if 0 <= self.k < self.n else self.n - 1)

    def fit(self) -> None:
        if not self.n:
            return
        xs = self.xs()
        span = max(float(xs[-1] - xs[0]), 1e-9)
        self.vb.setXRange(float(xs[0]) - span * 0.005, float(xs[-1]) + span * 0.01, padding=0)
        self._on_x_range()

    def _place_peaks(self) -> None:
        for t in self.peak_labels:
            self.plot.removeItem(t)
        self.peak_labels = []
        colors = curve_colors()
        spots = []
        groups: list[list[str]] = []
        xs = self.xs()
        span = max(float(xs[-1] - xs[0]), 1e-9)
        vmax = max(max(v for v, _ in self.peaks.values()), 1)
        # Peaks close together share one label (allocated, active and requested often do).
        for name in CURVES:
            v, k = self.peaks[name]
            spots.append({"pos": (float(xs[k]), float(v)), "brush": pg.mkBrush(colors[name]),
                          "pen": pg.mkPen(theme.background(), width=1.5), "data": name})
            for g in groups:
                gv, gk = self.peaks[g[0]]
                if abs(float(xs[gk] - xs[k])) < span * 0.08 and abs(gv - v) < vmax * 0.06:
                    g.append(name)
                    break
            else:
                groups.append([name])
        self.peak_scatter.setData(spots)
        fill = theme.background()
        fill.setAlpha(235)
        placed: list[float] = []  # x of the labels placed so far, highest peak first
        groups.sort(key=lambda g: -self.peaks[g[0]][0])
        for g in groups:
            v, k = self.peaks[g[0]]
            near = sum(1 for x in placed if abs(x - float(xs[k])) < span * 0.3)
            placed.append(float(xs[k]))
            html = ("peak in this window " if self.starts_mid_run else "peak ") + " · ".join(
                f'<span style="color:{colors[n]}">{n} {format_bytes(self.peaks[n][0])}</span>'
                for n in g)
            right = float(xs[k] - xs[0]) > span * 0.6
            t = pg.TextItem(html=f'<div style="font-size:8pt">{html}</div>',
                            anchor=(1.0 if right else 0.0, 1.0 - 1.1 * near), fill=fill)
            t.setPos(float(xs[k]), float(v))
            t.setZValue(9)
            t.curves = g
            self.plot.addItem(t, ignoreBounds=True)
            self.peak_labels.append(t)

    def peak_label_texts(self) -> list[str]:
        return [t.textItem.document().toPlainText() for t in self.peak_labels]

    def _place_markers(self) -> None:
        rep = self.doc.timeline.replay(self.device)
        xs = self.xs()
        ooms = np.flatnonzero(rep.action == Action.OOM)
        snaps = np.flatnonzero(rep.action == Action.SNAPSHOT)
        lines = []
        if len(snaps):
            lines.append((xs[snaps], theme.muted(), "snapshot", Qt.PenStyle.DotLine))
        if len(ooms):
            lines.append((xs[ooms], QColor(theme.OOM_RED), "OOM", Qt.PenStyle.SolidLine))
        self.bands_item.set_lines(lines)
        self.bands_item.set_bands(self.annotation_bands())

    def annotation_bands(self) -> list[tuple[float, float, str, QColor]]:
        """record_function ranges of this device: START/END paired per name, in x units."""
        doc = self.doc
        ann = doc.snap.annotations
        if not len(ann.device) or not self.has_time:
            return []
        rep = doc.timeline.replay(self.device)
        t0 = int(rep.time_us[0])
        ranges = pair_ranges(ann, self.device)
        spans = list(zip(ranges.start_us.tolist(), ranges.end_us.tolist(), ranges.name.tolist()))
        names = sorted(set(ranges.name.tolist()))
        color_of = {}
        for i, n in enumerate(names):
            c = QColor(ANNOTATION_COLORS[i % len(ANNOTATION_COLORS)])
            c.setAlpha(38)
            color_of[n] = c
        if not spans:
            return []
        a, b = ranges.start_us, ranges.end_us
        if self.mode == X_TIME:
            x0s, x1s = (a - t0) / 1e6, (b - t0) / 1e6
        else:  # one search for all of them
            x0s = np.searchsorted(rep.time_us, a, side="left") - 0.5
            x1s = np.searchsorted(rep.time_us, b, side="right") - 0.5
        labels = {}
        for n in names:
            text = doc.snap.strings[n] if 0 <= n < len(doc.snap.strings) else "?"
            labels[n] = text.split("#")[0]
        return [(x0, x1, labels[n], color_of[n])
                for x0, x1, (_, _, n) in zip(x0s.tolist(), x1s.tolist(), spans)]

    # ------------------------------------------------------------------ cursor
    def set_cursor(self, k: int) -> None:
        """Move the cursor line to event ``k`` (no signal)."""
        if not self.n:
            return
        self.k = int(min(max(k, 0), self.n - 1))
        self.cursor.blockSignals(True)
        self.cursor.setValue(float(self.x_of(self.k)))
        self.cursor.blockSignals(False)
        self._update_position()
        self.ensure_visible(self.k)

    def ensure_visible(self, k: int) -> None:
        (xa, xb), _ = self.vb.viewRange()
        x = float(self.x_of(k))
        if not xa <= x <= xb:
            half = (xb - xa) / 2
            self.vb.setXRange(x - half, x + half, padding=0)

    def cursor_text(self) -> str:
        return self.position.text()

    def _update_position(self) -> None:
        if not self.n or self.k < 0:
            self.position.setText("")
            return
        rep = self.doc.timeline.replay(self.device)
        k = self.k
        act = int(rep.action[k])
        what = ACTION_TEXT.get(act, str(act))
        if act in (Action.ALLOC, Action.FREE_REQUESTED, Action.FREE_COMPLETED, Action.SEGMENT_ALLOC,
                   Action.SEGMENT_FREE, Action.SEGMENT_MAP, Action.SEGMENT_UNMAP, Action.OOM):
            what += f" {format_bytes(int(rep.size[k]))}"
        parts = [f"event {k:,} / {self.n - 1:,}"]
        if self.has_time:
            parts.append(f"+{format_seconds(self.seconds_at(k))}")
        parts.append(what)
        if self.stream is not None:
            parts.append(stream_label(self.stream))
        if k == self.n - 1:
            parts.append(self.latest_text)
        text = " · ".join(parts)
        self.position.setText(text)

    def _on_cursor_dragged(self, line) -> None:
        k = self.k_of(line.value())
        if k != self.k:
            self.k = k
            self._update_position()
            self.cursorRequested.emit(k)

    def _on_cursor_drag_finished(self, line) -> None:
        k = self.k_of(line.value())
        self.set_cursor(k)
        self.cursorRequested.emit(k)

    def step(self, delta: int) -> None:
        if self.n:
            self.request(self.k + delta)

    def request(self, k: int) -> None:
        if not self.n:
            return
        k = int(min(max(k, 0), self.n - 1))
        self.set_cursor(k)
        self.cursorRequested.emit(k)

    def eventFilter(self, obj, event) -> bool:
        if obj is self.plot and event.type() == QEvent.Type.KeyPress and self.n:
            key, mods = event.key(), event.modifiers()
            big = 100 if mods & Qt.KeyboardModifier.ShiftModifier else 1
            if key == Qt.Key.Key_Left:
                self.step(-big)
                return True
            if key == Qt.Key.Key_Right:
                self.step(big)
                return True
            if key == Qt.Key.Key_Home:
                self.request(0)
                return True
            if key == Qt.Key.Key_End:
                self.latestRequested.emit()
                return True
        return super().eventFilter(obj, event)

    # ------------------------------------------------------------------ stacked layout
    def _on_x_range(self, *_args) -> None:
        if not self.n:
            return
        (xa, xb), _ = self.vb.viewRange()
        ka, kb = self._visible_events(xa, xb)
        env = self._update_curves(ka, kb)
        ymax = max(float(env["reserved"].max()) if len(env["reserved"]) else 1.0,
                   float(env["active"].max()) if len(env["active"]) else 1.0, 1.0)
        self.vb.setYRange(0, ymax * 1.35, padding=0)
        # Peak labels (highest first) only where they fit whole and clear of each other.
        place_text_items(self.peak_labels, self.vb)
        self._timer.start()

    def _build_envelopes(self) -> None:
        """Per curve, the max of every block of ``L`` events at a few levels ``L``, so a
        view of millions of events draws its envelope from a few thousand values."""
        self._env = {}
        for name, y in self.curves.items():
            if hasattr(y, "index"):  # a CurveColumn: its index keeps the block maxima
                self._env[name] = y.index.levels(name)
                continue
            levels = []
            for level in ENVELOPE_LEVELS:
                m = (len(y) // level) * level
                if m < 2 * level:
                    break
                levels.append((level, y[:m].reshape(-1, level).max(axis=1)))
            self._env[name] = levels

    def _update_curves(self, k0: int, k1: int) -> dict[str, np.ndarray]:
        """The curves over events ``k0..k1``: every point when they fit in the plot's
        width, else the upper envelope (the max of each pixel's bucket: peaks survive,
        and the stacked allocations under it stay visible).  Returns the y values drawn."""
        cols = self.columns()
        n = k1 - k0 + 1
        step = n // cols if n > 2 * cols else 1
        xs_all = self.xs()
        drawn = {}
        for name, item in self.curve_items.items():
            y_all = self.curves[name]
            # The coarsest precomputed level with at least 2 blocks per bucket.
            level, maxima = 1, None
            for lv, mx in getattr(self, "_env", {}).get(name, []):
                if step >= 2 * lv:
                    level, maxima = lv, mx
            if step <= 1:
                x_out, y_out = xs_all[k0:k1 + 1], y_all[k0:k1 + 1].astype(np.float64)
            elif maxima is None:
                m = (n // step) * step
                y = y_all[k0:k1 + 1]
                x_out = np.concatenate([xs_all[k0:k0 + m:step], xs_all[k0 + m:k1 + 1]])
                y_out = np.concatenate([y[:m].reshape(-1, step).max(axis=1),
                                        y[m:]]).astype(np.float64)
            else:
                j0, j1 = k0 // level, min(k1 // level, len(maxima) - 1)
                per = max(1, step // level)
                blocks = maxima[j0:j1 + 1]
                m = (len(blocks) // per) * per
                parts = [blocks[:m].reshape(-1, per).max(axis=1)] if m else []
                if len(blocks) > m:
                    parts.append([blocks[m:].max()])
                tail = y_all[(j1 + 1) * level:k1 + 1]  # past the last whole block
                if len(tail):
                    parts.append([tail.max()])
                y_out = np.concatenate(parts).astype(np.float64)
                starts = (j0 + np.arange(len(y_out)) * per) * level
                x_out = xs_all[np.clip(np.maximum(starts, k0), 0, self.n - 1)]
            item.setData(x_out, y_out)
            drawn[name] = y_out
        return drawn

    def _visible_events(self, xa: float, xb: float) -> tuple[int, int]:
        if self.mode == X_TIME and self.has_time:
            ka = int(np.searchsorted(self.tx, xa, side="left"))
            kb = int(np.searchsorted(self.tx, xb, side="right")) - 1
        else:
            ka, kb = int(math.ceil(xa)), int(math.floor(xb))
        ka, kb = max(ka - 1, 0), min(kb + 1, self.n - 1)
        return ka, max(ka, kb)

    def columns(self) -> int:
        return max(2, int(self.vb.width()) if self.vb.width() > 0 else 800)

    def flush(self) -> None:
        """Refresh the stacked allocations now if a view change is waiting for the
        debounce: what the view shows a moment later (a grab of the window)."""
        if self._timer.isActive():
            self.refresh_stack()

    def refresh_stack(self) -> None:
        """Recompute the stacked layout for the visible range and rebuild its paths."""
        self._timer.stop()
        t_start = time.perf_counter()
        if not self.n or self.iv is None:
            return
        (xa, xb), _ = self.vb.viewRange()
        k0, k1 = self._visible_events(xa, xb)
        iv = self.iv
        if self.stream is not None or self.pool is not None:
            ids = self.iv_ids
            if self._sub_iv is None:  # once per filter: its level-of-detail index is kept
                self._sub_iv = iv.take(ids)
            sub = self._sub_iv
        else:
            ids, sub = None, iv
        # Stacked allocations at one column per STACK_PX pixels: the work grows with
        # columns x live allocations (~400k pairs per view at one column per pixel).
        lay = stacked_layout(sub, k0, k1, max(2, self.columns() // STACK_PX))
        self.layout = lay
        self.layout_ids = lay.band_interval if ids is None else ids[lay.band_interval]
        self.layout_range = (k0, k1)
        self._build_paths()
        self.last_refresh_s = time.perf_counter() - t_start

    def _build_paths(self) -> None:
        """Paint the layout into an image at the view's pixel size, and outline the
        selected / highlighted allocations (a few paths)."""
        lay = self.layout
        if lay is None:
            return
        xs_all = self.xs()
        cx = xs_all[lay.samples]
        self.xs_cols = cx
        xl, xr = column_edges(cx)
        ids = self.layout_ids
        color = self.band_color[ids] if len(ids) else np.zeros(0, np.int64)
        n_colors = len(BAND_COLORS)
        hit = None
        if self.stack_mask is not None and len(ids):
            st = self.iv.stack[ids]
            hit = np.zeros(len(ids), bool)
            ok = st >= 0
            hit[ok] = self.stack_mask[st[ok]]
            color = np.where(hit, n_colors + 1, n_colors)  # matches: the search colour
        dim = QColor(DIM_COLOR if not theme.is_dark() else "#424242")
        palette = np.array([QColor(c).rgba() for c in BAND_COLORS]
                           + [dim.rgba(), theme.search_color().rgba()], np.uint32)
        (_, _), (ya, yb) = self.vb.viewRange()
        h = max(1, min(int(self.vb.height()) or 1, 4096))
        x_lo, x_hi = float(xl[0]) if len(xl) else 0.0, float(xr[-1]) if len(xr) else 1.0
        w = max(1, min(int(self.vb.width()) or 1, 8192))
        px_x = x_lo + (np.arange(w) + 0.5) * (x_hi - x_lo) / w
        col_of_px = np.clip(np.searchsorted(xr, px_x), 0, max(len(xr) - 1, 0))
        pixels = stacked_raster(lay, palette[color] if len(color) else palette[:0],
                                QColor(SUMMARY_COLOR).rgba(), ya, yb, h, col_of_px) \
            if len(lay.samples) else None
        hl = sel = QPainterPath()
        if hit is not None or (self.selected_interval >= 0 and len(ids)):
            x0, x1, y0, y1, band = band_rects(lay, xl, xr)
            if hit is not None:
                m = hit[band] if len(band) else np.zeros(0, bool)
                hl = rects_path(x0[m], x1[m], y0[m], y1[m])
            b = np.flatnonzero(ids == self.selected_interval) if self.selected_interval >= 0 \
                else []
            if len(b):
                m = band == b[0]
                sel = rects_path(x0[m], x1[m], y0[m], y1[m]).simplified()
        top = float(max(lay.pair_top.max() if len(lay.pair_top) else 0,
                        lay.summary_height.max() if len(lay.summary_height) else 0, 1))
        bounds = QRectF(x_lo, 0.0, x_hi - x_lo if len(xl) else 1.0, top)
        self.stacked.set_image(pixels, QRectF(x_lo, ya, x_hi - x_lo, yb - ya), sel,
                               bounds.united(QRectF(x_lo, ya, x_hi - x_lo, yb - ya)), hl)

    def set_highlight(self, stack_mask: np.ndarray | None) -> None:
        """Allocations whose stack is in ``stack_mask`` drawn in colour, the others dimmed."""
        self.stack_mask = stack_mask
        self._update_legend()
        self._build_paths()

    def set_selected_interval(self, i: int) -> None:
        self.selected_interval = int(i)
        self._build_paths()

    def band_count(self) -> int:
        return len(self.layout.band_interval) if self.layout is not None else 0

    # ------------------------------------------------------------------ mouse
    def _column_at(self, x: float) -> int:
        cx = self.xs_cols
        if not len(cx):
            return -1
        i = int(np.searchsorted(cx, x))
        if i >= len(cx):
            return len(cx) - 1
        if i > 0 and x - cx[i - 1] <= cx[i] - x:
            i -= 1
        return i

    def interval_at(self, x: float, y: float) -> int:
        """Interval id of the band under view point (x, y), or -1."""
        lay = self.layout
        if lay is None:
            return -1
        col = self._column_at(x)
        if col < 0:
            return -1
        hit = lay.hit(col, y)
        if hit < 0:
            return -1
        # With a stream or a pool filter the layout's bands index the filtered
        # intervals: back to the document's interval ids (issue 13).
        filtered = self.stream is not None or self.pool is not None
        return int(self.iv_ids[hit]) if filtered else hit

    def interval_viewport_pos(self, i: int):
        """A viewport point on interval ``i``'s band (for tests and keyboard), or None."""
        lay = self.layout
        if lay is None:
            return None
        b = np.flatnonzero(self.layout_ids == i)
        if not len(b):
            return None
        pairs = np.flatnonzero(lay.pair_band == b[0])
        j = pairs[len(pairs) // 2]
        x = float(self.xs_cols[lay.pair_column[j]])
        y = (float(lay.pair_bottom[j]) + float(lay.pair_top[j])) / 2
        return self.plot.mapFromScene(self.vb.mapViewToScene(QPointF(x, y)))

    def _on_mouse_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton or not self.n:
            return
        if not self.vb.sceneBoundingRect().contains(ev.scenePos()):
            return
        self.plot.setFocus()
        p = self.vb.mapSceneToView(ev.scenePos())
        ev.accept()
        i = self.interval_at(p.x(), p.y())
        col = self._column_at(p.x())
        k = int(self.layout.samples[col]) if i >= 0 else self.k_of(p.x())
        self.request(k)
        if i >= 0:
            self.intervalClicked.emit(i)

    def _on_mouse_moved(self, scene_pos) -> None:
        if not self.n or not self.vb.sceneBoundingRect().contains(scene_pos):
            return
        p = self.vb.mapSceneToView(scene_pos)
        i = self.interval_at(p.x(), p.y())
        if i == self._hover:
            return
        self._hover = i
        if i < 0:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.interval_tooltip(i), self.plot)

    def interval_tooltip(self, i: int) -> str:
        iv, doc = self.iv, self.doc
        size, req = int(iv.size[i]), int(iv.requested[i])
        a, b = int(iv.start[i]), int(iv.end[i])
        start = "before recording" if a < 0 else f"event {a:,}"
        end = "still alive at the end" if b >= self.n else f"freed at event {b:,}"
        life = f"{start} → {end}"
        if a >= 0 and b < self.n:
            life += f" ({b - a:,} events"
            if self.has_time:
                life += f", {format_seconds(self.seconds_at(b) - self.seconds_at(a))}"
            life += ")"
        lines = [f"<b>{format_bytes(size)}</b> allocation",
                 f"requested {format_bytes(req)}" + (f", rounding waste {format_bytes(size - req)}"
                                                     if size > req else ""),
                 life]
        label = doc.stack_label(int(iv.stack[i]))
        lines.append(f"from <tt>{_html(label)}</tt>" if label else "no stack recorded")
        return "<br>".join(lines)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
