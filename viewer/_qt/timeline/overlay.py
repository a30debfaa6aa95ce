"""Predicted curves over the timeline: the recorded run replayed under a change.

A panel that predicts reserved memory under a change (a remedy of the Diagnosis
panel; any other replay of the request stream) shows its curve over the recorded
ones with :meth:`OverlayMixin.set_overlay`: the curve is given per request (x =
trace events of the timeline's device, as :meth:`~...model.whatif.Case.curve_x`),
made a step curve per event and drawn at the plot's resolution like the recorded
curves (:mod:`...model.view.curve_lod`), so it follows zoom and the x mode.  It is
named in the x axis's title (the header's legend has a short entry; the
header row has no room for a remedy's name) and beside its peak where a label
fits; an estimated figure without a curve is a dashed level, and a range (an
estimate) a shaded band.  Overlays are
keyed by who set them, and go when the document or the device changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from ...model.core.units import format_bytes
from ...model.view.curve_lod import decimate, envelope_levels
from ..widgets import theme

OVERLAY_COLOR = "#00897b"  # teal: none of the recorded curves' colours, nor OOM red
OVERLAY_COLOR_DARK = "#4db6ac"
AXIS_CHARS = 72  # longer names are cut in the axis title (the plot's label has them whole)


def overlay_color() -> str:
    return OVERLAY_COLOR_DARK if theme.is_dark() else OVERLAY_COLOR


def per_event(curve_x: np.ndarray, y: np.ndarray, n: int, before) -> np.ndarray:
    """``y`` (one value after each request at trace event ``curve_x``, ascending) as one
    value per event of an ``n``-event trace: the value after the last request at or
    before it.  The events before the first request take ``before[k]`` (the recorded
    curve: nothing was changed yet)."""
    cx = np.asarray(curve_x, np.int64)
    y = np.asarray(y, np.int64)
    if len(cx) > 1 and (cx[1:] < cx[:-1]).any():  # (streams are in event order; be sure)
        order = np.argsort(cx, kind="stable")
        cx, y = cx[order], y[order]
    idx = np.searchsorted(cx, np.arange(n), side="right") - 1
    out = y[np.maximum(idx, 0)]
    first = min(max(int(cx[0]), 0), n)
    if first:
        out[:first] = np.asarray(before[:first], np.int64)
    return out


@dataclass
class Overlay:
    """One predicted curve (or level) on the timeline."""

    label: str
    y: np.ndarray | None  # bytes per event; None: only a level
    level: int | None  # a predicted peak without a curve (an estimate)
    value_range: tuple[int, int] | None  # (low, high) of an estimated peak
    color: str
    env: list = field(default_factory=list)
    items: list = field(default_factory=list)  # the graphics items drawing it
    curve: pg.PlotCurveItem | None = None
    text: pg.TextItem | None = None
    args: tuple = ()  # what set_overlay was given (drawn again in another palette)

    @property
    def peak(self) -> int:
        if self.y is not None and len(self.y):
            return int(self.y.max())
        return int(self.level or 0)


class OverlayMixin:
    """:class:`~.panel.TimelinePanel`'s predicted curves (see the module docstring)."""

    overlays: dict[str, Overlay]

    def _init_overlays(self) -> None:
        self.overlays = {}
        self._overlay_top = 0.0  # the highest overlay value drawn (the y range takes it in)

    def set_overlay(
        self,
        key: str,
        label: str,
        curve_x: np.ndarray | None = None,
        y: np.ndarray | None = None,
        level: int | None = None,
        value_range: tuple[int, int] | None = None,
        ends: bool = False,
    ) -> bool:
        """Show a predicted reserved curve named ``label`` (replacing ``key``'s): ``y``
        bytes after each request at trace event ``curve_x``; or, without a curve, a
        predicted ``level``; ``value_range``: the (low, high) of an estimate; ``ends``:
        the program stops at the curve's last request (a predicted OOM), so nothing is
        drawn after it.  False (nothing shown) when the timeline has no trace."""
        self.clear_overlay(key)
        if not self.n or self.doc is None:
            return False
        per = None
        if y is not None and curve_x is not None and len(y):
            per = per_event(curve_x, y, self.n, self.doc.curves(self.device)["reserved"])
            if ends:  # no value after the OOM: the program would have stopped there
                per = per[: min(self.n, max(int(np.max(curve_x)), 0) + 1)]
        elif level is None:
            return False
        ov = Overlay(
            label,
            per,
            level,
            value_range,
            overlay_color(),
            args=(label, curve_x, y, level, value_range, ends),
        )
        pen = pg.mkPen(ov.color, width=2, style=Qt.PenStyle.DashLine)
        if value_range is not None:
            lo, hi = value_range
            shade = pg.mkColor(ov.color)
            shade.setAlpha(45)
            band = pg.LinearRegionItem(
                (lo, hi),
                orientation="horizontal",
                movable=False,
                brush=pg.mkBrush(shade),
                pen=pg.mkPen(None),
            )
            band.setZValue(3)
            band.setToolTip(f"{label}: estimated peak {format_bytes(lo)} - {format_bytes(hi)}")
            ov.items.append(band)
        if per is not None:
            ov.env = envelope_levels(per)
            ov.curve = pg.PlotCurveItem(pen=pen)
            ov.curve.setZValue(7.5)  # over the recorded curves, under the cursor
            ov.items.append(ov.curve)
        else:
            line = pg.InfiniteLine(float(level), angle=0, pen=pen)
            line.setZValue(7.5)
            ov.items.append(line)
        fill = theme.background()
        fill.setAlpha(235)
        ov.text = pg.TextItem(
            html=f'<div style="font-size:8pt; color:{ov.color}">predicted: '
            f"{_html(label)} · peak {format_bytes(ov.peak)}</div>",
            anchor=(1.0, 1.0),
            fill=fill,
        )
        ov.text.setZValue(9)
        ov.items.append(ov.text)
        for item in ov.items:
            self.plot.addItem(item, ignoreBounds=True)
        self.overlays[key] = ov
        self._place_overlays()
        self.update_legend()
        self._set_mode_buttons()  # (the x axis's title names it)
        self._on_x_range()
        return True

    def _recolor_overlays(self) -> None:
        """Draw the overlays again in the palette's colours (light / dark switched)."""
        for key, ov in list(getattr(self, "overlays", {}).items()):
            if ov.color != overlay_color():
                self.set_overlay(key, *ov.args)

    def clear_overlay(self, key: str | None = None) -> None:
        """Remove ``key``'s overlay (None: all of them)."""
        keys = list(self.overlays) if key is None else [key] if key in self.overlays else []
        for k in keys:
            for item in self.overlays.pop(k).items:
                self.plot.removeItem(item)
        if keys:
            self.update_legend()
            self._set_mode_buttons()

    def overlay_labels(self) -> list[str]:
        """The labels drawn beside the overlays (plain text; tests, accessibility)."""
        return [
            ov.text.textItem.document().toPlainText()
            for ov in self.overlays.values()
            if ov.text is not None
        ]

    def _overlay_legend(self) -> list[str]:
        """The header legend's entry: one short swatch (the names are in the axis title)."""
        if not self.overlays:
            return []
        color = next(iter(self.overlays.values())).color
        return [f'<span style="color:{color}">&#9476;</span>&nbsp;predicted']

    def overlay_title(self) -> str:
        """What the x axis's title says of the overlays: ``predicted: NAME, peak SIZE``."""
        parts = []
        for ov in self.overlays.values():
            name = ov.label if len(ov.label) <= AXIS_CHARS else ov.label[: AXIS_CHARS - 1] + "…"
            what = "estimated peak" if ov.y is None else "peak"
            rng = (
                f" ({format_bytes(ov.value_range[0])} - {format_bytes(ov.value_range[1])})"
                if ov.value_range
                else ""
            )
            parts.append(f"predicted: {name}, {what} {format_bytes(ov.peak)}{rng}")
        return "  ·  ".join(parts)

    def _update_overlays(self, xs_all, k0: int, k1: int, cols: int) -> float:
        """Redraw the overlay curves over events ``k0..k1``; the highest value drawn."""
        top = 0.0
        for ov in self.overlays.values():
            if ov.curve is not None and ov.y is not None:
                last = min(k1, len(ov.y) - 1)  # a curve that ends (at an OOM) stops there
                if last < k0:
                    ov.curve.setData([], [])
                else:
                    x_out, y_out = decimate(xs_all, ov.y, k0, last, cols, levels=ov.env)
                    ov.curve.setData(x_out, y_out)
                    if len(y_out):
                        top = max(top, float(np.max(y_out)))
            top = max(
                top, float(ov.level or 0), float(ov.value_range[1]) if ov.value_range else 0.0
            )
        return top

    def _place_overlays(self) -> None:
        """Each overlay's label at its peak (at the right end for a level), in x mode."""
        if not self.n:
            return
        xs = self.xs()
        for ov in self.overlays.values():
            if ov.text is None:
                continue
            k = int(np.argmax(ov.y)) if ov.y is not None and len(ov.y) else self.n - 1
            right = k > self.n * 0.5
            ov.text.setAnchor((1.0 if right else 0.0, 1.0))
            ov.text.setPos(float(xs[k]), float(ov.peak))

    def _overlay_texts(self) -> list:
        return [ov.text for ov in self.overlays.values() if ov.text is not None]


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
