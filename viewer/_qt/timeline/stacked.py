"""The stacked allocations of :class:`TimelinePanel`: the layout recomputed per view,
drawn as an image, and the hit-test, hover and click on its bands."""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QCursor, QPainterPath
from PySide6.QtWidgets import QToolTip

from ...model.analysis.alloc_details import allocation_details, tooltip_lines
from ...model.core.units import format_bytes, plural
from ...model.view.stacking import stacked_layout
from ..widgets import theme
from ..widgets.plotting import rects_path
from .constants import BAND_COLORS, DIM_COLOR, STACK_PX, SUMMARY_COLOR, format_seconds
from .raster import band_rects, column_edges, stacked_raster


class StackedMixin:
    """The stacked allocations of :class:`TimelinePanel` (its attributes)."""

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
        # Colour by: the code site (band_color, BAND_COLORS) unless a provider (colour by
        # category) gives a colour index per interval and its palette (uint32 ARGB).
        provided = self.color_provider() if getattr(self, "color_provider", None) else None
        per_iv, base = (
            provided
            if provided is not None
            else (self.band_color, [QColor(c).rgba() for c in BAND_COLORS])
        )
        color = per_iv[ids].astype(np.int64) if len(ids) else np.zeros(0, np.int64)
        n_colors = len(base)
        hit = None
        if self.stack_mask is not None and len(ids):
            st = self.iv.stack[ids]
            hit = np.zeros(len(ids), bool)
            ok = st >= 0
            hit[ok] = self.stack_mask[st[ok]]
            color = np.where(hit, n_colors + 1, n_colors)  # matches: the search colour
        dim = QColor(DIM_COLOR if not theme.is_dark() else "#424242")
        palette = np.array(list(base) + [dim.rgba(), theme.search_color().rgba()], np.uint32)
        self.band_rgba = palette[color] if len(color) else palette[:0]  # per band, as drawn
        (_, _), (ya, yb) = self.vb.viewRange()
        h = max(1, min(int(self.vb.height()) or 1, 4096))
        x_lo, x_hi = float(xl[0]) if len(xl) else 0.0, float(xr[-1]) if len(xr) else 1.0
        w = max(1, min(int(self.vb.width()) or 1, 8192))
        px_x = x_lo + (np.arange(w) + 0.5) * (x_hi - x_lo) / w
        col_of_px = np.clip(np.searchsorted(xr, px_x), 0, max(len(xr) - 1, 0))
        pixels = (
            stacked_raster(
                lay,
                palette[color] if len(color) else palette[:0],
                QColor(SUMMARY_COLOR).rgba(),
                ya,
                yb,
                h,
                col_of_px,
            )
            if len(lay.samples)
            else None
        )
        hl = sel = QPainterPath()
        if hit is not None or (self.selected_interval >= 0 and len(ids)):
            x0, x1, y0, y1, band = band_rects(lay, xl, xr)
            if hit is not None:
                m = hit[band] if len(band) else np.zeros(0, bool)
                hl = rects_path(x0[m], x1[m], y0[m], y1[m])
            b = np.flatnonzero(ids == self.selected_interval) if self.selected_interval >= 0 else []
            if len(b):
                m = band == b[0]
                sel = rects_path(x0[m], x1[m], y0[m], y1[m]).simplified()
        top = float(
            max(
                lay.pair_top.max() if len(lay.pair_top) else 0,
                lay.summary_height.max() if len(lay.summary_height) else 0,
                1,
            )
        )
        bounds = QRectF(x_lo, 0.0, x_hi - x_lo if len(xl) else 1.0, top)
        self.stacked.set_image(
            pixels,
            QRectF(x_lo, ya, x_hi - x_lo, yb - ya),
            sel,
            bounds.united(QRectF(x_lo, ya, x_hi - x_lo, yb - ya)),
            hl,
        )

    def set_highlight(self, stack_mask: np.ndarray | None, label: str = "") -> None:
        """Allocations whose stack is in ``stack_mask`` drawn in colour, the others dimmed;
        ``label``: the legend's name of them (empty: a search's)."""
        self.stack_mask = stack_mask
        self.highlight_label = label
        self.update_legend()
        self._build_paths()

    def set_selected_interval(self, i: int) -> None:
        self.selected_interval = int(i)
        self._build_paths()

    def band_count(self) -> int:
        return len(self.layout.band_interval) if self.layout is not None else 0

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
        # intervals: back to the document's interval ids (those the view state selects).
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
        top_px = scene_pos.y() - self.vb.sceneBoundingRect().top()
        note = self.note_tooltip(p.x(), top_px)
        i = self.interval_at(p.x(), p.y()) if not note or top_px > 12 else -1
        if i < 0 and note:  # a marker, a stretch that is not exact, the overwritten edge
            self._hover = -2
            QToolTip.showText(QCursor.pos(), note, self.plot)
            return
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
            life += f" ({plural(b - a, 'event')}"
            if self.has_time:
                life += f", {format_seconds(self.seconds_at(b) - self.seconds_at(a))}"
            life += ")"
        lines = [
            f"<b>{format_bytes(size)}</b> allocation",
            f"requested {format_bytes(req)}"
            + (f", rounding waste {format_bytes(size - req)}" if size > req else ""),
            life,
        ]
        label = doc.stack_label(int(iv.stack[i]))
        lines.append(f"from <tt>{_html(label)}</tt>" if label else "no stack recorded")
        # What newer torch recorded about it (user metadata, compile context, ...).
        if doc.timeline is not None and self.device is not None:
            rep = doc.timeline.replay(self.device)
            details = (
                allocation_details(doc.snap, rep.rows, int(iv.event[i]), int(iv.end[i]))
                if rep is not None
                else None
            )
            lines += [_html(t) for t in tooltip_lines(doc.snap, details)]
        return "<br>".join(lines)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
