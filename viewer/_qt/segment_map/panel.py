"""The segment map widget: the plot with its item, axes and labels, the sort and fit
controls and the legend; hover tooltips, clicks, export.

Given the window's :class:`ViewState`, the widget subscribes itself: it draws the
document at the cursor for each ``moment`` (sorted by free gap after an OOM, the OOM's
request only at the OOM's moment) and the highlighted stacks (``highlight``).

It holds the widget with its controls, label placement, view fitting, hover, clicks,
export and its view-state subscription; the layout is the model's
(:mod:`vramscope.viewer.model.view`), the item and the axes are in the modules beside it.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QCursor, QFontMetrics, QGuiApplication, QImage, QPainter
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

from ...model.analysis.alloc_details import tooltip_lines
from ...model.analysis.figures import Selection, largest_gaps
from ...model.core.snapshot import BlockState
from ...model.core.units import format_address, format_bytes, plural
from ...model.view.document import Document, pool_label, stream_label
from ...model.view.map_layout import SORT_ADDRESS, SORT_FREE, SORT_SIZE, MapLayout
from ...model.view.view_state import ViewState
from ..widgets import theme
from ..widgets.plotting import place_text_items, short_bytes
from ..widgets.png import save_png
from .axes import BytesAxis, MapViewBox, SegmentAxis
from .item import REQUEST_Y, SegmentMapItem, block_rect

N_GAPS = 8
DOC_OOM = object()  # set_document's default: the document's own OOM


class SegmentMapView(QWidget):
    """The map plus its legend and controls.

    ``view_state``: the window's :class:`ViewState`, whose moments and highlight the
    map draws (None: the caller sets what it shows, as the Diff window does)."""

    blockClicked = Signal(int)
    sortChanged = Signal(str)

    def __init__(self, view_state: ViewState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.vs = view_state
        self._pending_sort: str | None = None  # the next moment's sort (a new document's)
        # block -> AllocationDetails of its allocation, or None (the view state knows the
        # timeline's cursor; see ViewState.interval_details)
        self.block_details = lambda _b: None
        if view_state is not None:
            self.block_details = lambda b: view_state.interval_details(
                view_state.interval_of_block(b)
            )
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
        self.plot = pg.PlotWidget(
            viewBox=self.vb, axisItems={"bottom": self.x_axis, "left": self.y_axis}
        )
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
        self.by_free.setToolTip(
            "Segments holding the largest free gaps first (the default "
            "after an OOM: the top rows show the best the cache had)"
        )
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
            "Ctrl+wheel: zoom bytes · Shift+wheel: zoom rows · drag: pan · click: select"
        )
        self.update_legend()
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
        if view_state is not None:
            view_state.events.document.connect(self._on_document)
            view_state.events.moment.connect(self._on_moment)
            view_state.events.highlight.connect(self._on_highlight)

    # -- the view state
    def _on_document(self, doc: Document | None) -> None:
        origin = self.vs.origin
        # After an OOM, the segments with the largest free gaps come first; a newer picture
        # of the same process (live) keeps the user's sort.
        self._pending_sort = (
            None
            if doc is None or origin == "replace"
            else SORT_ADDRESS
            if origin == "host"
            else SORT_FREE
            if doc.oom
            else SORT_ADDRESS
        )

    def _on_moment(self, keep_view: bool) -> None:
        vs = self.vs
        sort, self._pending_sort = self._pending_sort, None
        doc = vs.view_doc
        if doc is None:
            self.set_document(None)
            return
        # The OOM ruler belongs to the OOM's moment: drawn only while the map shows it.
        self.set_document(doc, vs.selection, sort=sort, fit=not keep_view, oom=vs.oom_shown())

    def _on_highlight(self, mask: np.ndarray | None) -> None:
        self.set_highlight(mask, self.vs.highlight_label())  # (its legend names it)

    # -- appearance
    def apply_palette(self) -> None:
        self.plot.setBackground(theme.background())
        fg = theme.foreground()
        for name in ("bottom", "left"):
            ax = self.plot.getPlotItem().getAxis(name)
            ax.setPen(pg.mkPen(fg))
            ax.setTextPen(pg.mkPen(fg))
        self._largest_label.setColor(theme.gap_outline())
        self.update_legend()
        self.item.invalidate()

    def update_legend(self) -> None:
        parts = [
            theme.swatch_html(c)
            for c in (
                theme.CAT_ALLOCATED,
                theme.CAT_WASTE,
                theme.CAT_PENDING,
                theme.CAT_FREE,
                theme.CAT_UNKNOWN,
            )
        ]
        parts.append(
            f'<span style="color:{theme.gap_outline().name()}">&#9633;</span>'
            "&nbsp;largest free gaps"
        )
        if self.item.request_bytes:
            parts.append(
                f'<span style="color:{theme.OOM_RED}">&#9482;&#9472;&#9482;</span>&nbsp;OOM request'
            )
        if self.item.highlight is not None:
            parts.append(theme.search_swatch_html(getattr(self, "highlight_label", "")))
        if self.has_private_rows:
            parts.append("<b>P</b>&nbsp;private pool")
        if getattr(self, "legend_provider", None) is not None:  # colour by category
            parts = self.legend_provider(parts)
        # Items break between each other, never inside one ("largest free / gaps").
        self.legend.setText(
            "&nbsp;&nbsp; ".join(f'<span style="white-space:nowrap">{p}</span>' for p in parts)
        )

    # -- data
    def set_document(
        self,
        doc: Document | None,
        selection: Selection | None = None,
        sort: str | None = None,
        fit: bool = True,
        oom=DOC_OOM,
    ) -> None:
        """Show ``doc``; ``fit=False`` keeps the view (time travel: same file, another moment).
        ``oom``: the OOM whose request the map draws (None: none; default: ``doc.oom``)."""
        self.doc = doc
        self.oom = (
            doc.oom if oom is DOC_OOM and doc is not None else (None if oom is DOC_OOM else oom)
        )
        self.selection = selection or Selection()
        if sort is not None and sort != self.sort:
            self.sort = sort
            self._check_sort_button()
            self.sortChanged.emit(sort)
        self.rebuild(fit=fit)

    def _on_sort_button(self, on: bool) -> None:
        if on:
            button = self.sender()
            self.set_sort(
                SORT_SIZE
                if button is self.by_size
                else SORT_FREE
                if button is self.by_free
                else SORT_ADDRESS
            )

    def _check_sort_button(self) -> None:
        button = {SORT_SIZE: self.by_size, SORT_FREE: self.by_free}.get(self.sort, self.by_address)
        button.setChecked(True)

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
            self.update_legend()
            return
        snap = doc.snap
        layout = MapLayout.build(doc, self.selection, self.sort)
        self.layout_data = layout
        gaps = largest_gaps(snap, N_GAPS, self.selection)
        gaps = gaps[layout.pos_of_block[gaps] >= 0] if len(gaps) else gaps
        oom = self.oom
        oom = (
            oom
            if oom is not None and oom.concerns(self.selection) and oom.kind != "changed"
            else None
        )
        req = oom.requested_bytes if oom else 0
        largest = int(snap.blocks.size[gaps[0]]) if len(gaps) else 0
        self.item.doc_blocks_stack = snap.blocks.stack
        self.item.set_layout(layout, gaps, req, largest)
        segs = snap.segments
        private = [tuple(p) != (0, 0) for p in snap.pools]
        self.has_private_rows = any(private[int(p)] for p in segs.pool[layout.seg_rows].tolist())
        self.y_axis.set_labels(
            [
                f"{format_address(segs.address[s])}  {short_bytes(segs.total_size[s])}"
                + ("  P" if private[int(segs.pool[s])] else "")
                for s in layout.seg_rows.tolist()
            ]
        )
        self._fit_axis_width()
        fill = theme.background()
        fill.setAlpha(210)
        for b in gaps.tolist():
            t = pg.TextItem(
                format_bytes(int(snap.blocks.size[b])),
                color=theme.gap_outline(),
                anchor=(0, 0.5),
                fill=fill,
            )
            t.gap_block = b
            t.setZValue(5)
            self.plot.addItem(t, ignoreBounds=True)
            self._labels.append(t)
        if req:
            self._request_label.setText(
                f"{format_bytes(req)} requested ({oom.pool_kind} pool): no free gap is this wide"
            )
            self._request_label.setPos(req, self.item.request_y)
            self._largest_label.setText(f"largest free block: {format_bytes(largest)}")
            self._largest_label.setPos(largest, self.item.largest_y)
        else:
            self._request_label.hide()
            self._largest_label.hide()
        n_small = int(segs.is_small[layout.seg_rows].sum()) if layout.n_rows else 0
        self.caption.setText(
            f"{plural(layout.n_rows, 'segment')} ({n_small} small), {plural(len(layout), 'block')}"
        )
        self.update_legend()
        self._hover = -1
        maxs = self._span()
        top = -2.3 if req else -0.5
        self.vb.setLimits(
            xMin=-0.05 * maxs,
            xMax=maxs * 1.05,
            yMin=top - 1,
            yMax=max(layout.n_rows, 1) + 1,
            minXRange=64,
            minYRange=1,
        )
        ruler_changed = bool(req) != self._had_ruler
        self._had_ruler = bool(req)
        if fit or (ruler_changed and self.view_auto):
            self.home()  # (an automatic view makes room for the OOM ruler, or gives it back)
        else:
            (_, _), (ya, _yb) = self.vb.viewRange()
            if ya > layout.n_rows:  # fewer rows now than the view's top
                self.home()
        self._place_gap_labels()  # (also on every range change)

    def set_highlight(self, stack_mask: np.ndarray | None, label: str = "") -> None:
        """Blocks whose stack is in ``stack_mask`` outlined; ``label``: the legend's name
        of them (empty: a search's)."""
        self.highlight_label = label
        self.item.set_highlight(stack_mask)
        self.update_legend()

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
        return {"auto": self.view_auto, "x": (xa, xb), "y": (ya, yb), "row": row, "anchor": anchor}

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
        free block's, then the gaps largest first (never a pile of unreadable labels)."""
        layout = self.layout_data
        if layout is None:
            return
        px = self.item.bytes_per_px()
        gaps = []
        for t in self._labels:
            r = block_rect(layout, t.gap_block)
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
            self._end_label(self._request_label, self.item.request_bytes, req_y, px)
            self._end_label(self._largest_label, self.item.largest_free, big_y, px)
            rulers.append(self._request_label)
            if self.item.largest_free:
                rulers.append(self._largest_label)
        self.shown_labels = place_text_items(rulers + gaps, self.vb)

    def _end_label(self, label: pg.TextItem, end: float, y: float, px: float) -> None:
        """A bracket's caption: after its end where that is in the view; else (the
        bracket runs past the view's right edge) over the bracket's visible part,
        centred and kept wholly in the view, on the background so the line gives way."""
        (xa, xb), _ = self.vb.viewRange()
        text_w = (label.textItem.boundingRect().width() + 6) * px
        if end + text_w <= xb:
            label.setAnchor((0, 0.5))
            label.fill = pg.mkBrush(None)
            label.setPos(end, y)
            label.update()
            return
        lo, hi = max(0.0, xa), min(float(end), self.item.view_right())
        x = min(max((lo + hi) / 2, xa + text_w / 2), xb - text_w / 2)
        label.setAnchor((0.5, 0.5))
        fill = theme.background()
        fill.setAlpha(230)
        label.fill = pg.mkBrush(fill)
        label.setPos(x, y)
        label.update()

    def label_items(self) -> list[pg.TextItem]:
        """Every text the map may draw over the rows (tests: none overlap)."""
        return [self._request_label, self._largest_label, *self._labels]

    def _span(self) -> float:
        """Bytes across the automatic views: the widest segment, and the OOM request
        with its ghost over the largest gap (which starts inside that gap's row) whole."""
        layout = self.layout_data
        widest = float(layout.max_size) if layout is not None else 0.0
        req = float(self.item.request_bytes)
        if req and len(self.item.gap_blocks):
            r = block_rect(layout, int(self.item.gap_blocks[0]))
            if r is not None:
                req += r.left()
        return max(widest, req, 1.0)

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
        # Every row tall enough for its label (the axis labels every n-th row of shorter
        # ones), however low the map: fewer rows rather than half of them unnamed.
        rows = max(1.0, h / self.ROW_PX)
        top = self._ruler_top(h / rows) if self.item.request_bytes else -0.3
        if layout.n_rows + 0.3 - top <= rows:  # all of them (and the OOM ruler) fit so
            self.fit()
            return
        maxs = self._span()
        self.vb.setRange(xRange=(0, maxs), yRange=(top, top + rows), padding=0.01)
        self.view_auto = True

    def fit(self) -> None:
        layout = self.layout_data
        if layout is None:
            return
        maxs = self._span()
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
        r = block_rect(self.layout_data, block)
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
        r = block_rect(self.layout_data, block)
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
            lines.append(
                f"requested {format_bytes(req)}, rounding waste {format_bytes(size - req)}"
            )
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
        if active:  # what newer torch recorded about its allocation (user metadata, ...)
            lines += [_html(t) for t in tooltip_lines(snap, self.block_details(b))]
            more = getattr(self, "tooltip_provider", None)  # what the memory is (categories)
            if more is not None:
                lines += [_html(t) for t in more(b)]
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
        return save_png(self.render_image(), path)  # (the one PNG writer, see png.py)

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
