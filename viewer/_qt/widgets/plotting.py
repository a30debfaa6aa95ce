"""Drawing helpers shared by the plots (timeline, segment map, the panels' charts):
batched paths built from numpy, short byte labels, byte axes in one unit
(:func:`byte_unit`, :func:`set_byte_axis`), and where a ``pg.TextItem`` lands in pixels so labels
can be placed without overlap (:func:`vramscope.viewer.model.view.annotations.place_labels`)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from pyqtgraph import functions as pgfn
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainterPath

from ...model.view.annotations import place_labels


def rects_path(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> QPainterPath:
    """One QPainterPath holding many rectangles, built from numpy in one call."""
    n = len(x0)
    if n == 0:
        return QPainterPath()
    xs = np.stack([x0, x1, x1, x0, x0], axis=1).ravel()
    ys = np.stack([y0, y0, y1, y1, y0], axis=1).ravel()
    connect = np.ones(5 * n, dtype=np.int32)
    connect[4::5] = 0
    return pgfn.arrayToQPath(xs, ys, connect=connect, finiteCheck=False)


def segments_path(x: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> QPainterPath:
    """Vertical line segments (x, y0)-(x, y1) as one path."""
    if len(x) == 0:
        return QPainterPath()
    xs = np.repeat(x, 2)
    ys = np.stack([y0, y1], axis=1).ravel()
    return pgfn.arrayToQPath(xs, ys, connect="pairs", finiteCheck=False)


# The units a byte axis is labelled in, largest first (binary, as format_bytes writes them).
BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


def byte_unit(top: float) -> tuple[str, int]:
    """The unit values up to ``top`` bytes read best in (the largest that keeps ``top``
    at 1 or more: 300 MiB, not 0.29 GiB) and its size in bytes."""
    for unit, size in BYTE_UNITS:
        if abs(top) >= size:
            return unit, size
    return BYTE_UNITS[-1]


def set_byte_axis(plot, axis: str, label: str, top: float) -> int:
    """Label ``plot``'s ``axis`` (a PlotWidget or PlotItem; "left", "bottom"…) as
    ``label (unit)``, the unit chosen for values up to ``top`` bytes by :func:`byte_unit`;
    returns the unit's size, which the plotted bytes are divided by.

    pyqtgraph's automatic SI prefix is turned off: on a unit that is already a binary
    multiple it would scale the ticks again and read "mGiB" for values under 1 GiB."""
    unit, size = byte_unit(top)
    ax = plot.getAxis(axis)
    # No range qualifies for a prefix: enableAutoSIPrefix(False) alone still computes
    # one from the axis' current range (pyqtgraph 0.14), which then sticks.
    ax.setSIPrefixEnableRanges(())
    ax.enableAutoSIPrefix(False)
    plot.setLabel(axis, label, units=unit)
    return size


def short_bytes(v: float) -> str:
    v = float(v)
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    v = abs(v)
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= k:
            x = v / k
            text = f"{x:.2f}".rstrip("0").rstrip(".")
            return f"{sign}{text} {unit}"
    return f"{sign}{int(v)} B"


def text_scene_rect(t: pg.TextItem, vb: pg.ViewBox) -> QRectF:
    """Where text item ``t`` (placed at a view point, drawn unscaled) is, in scene pixels."""
    br = t.textItem.boundingRect()
    w, h = br.width(), br.height()
    at = vb.mapViewToScene(t.pos())
    ax, ay = t.anchor.x(), t.anchor.y()
    return QRectF(at.x() - ax * w, at.y() - ay * h, w, h)


def rects_array(rects: list[QRectF]) -> np.ndarray:
    return np.array(
        [(r.left(), r.top(), r.right(), r.bottom()) for r in rects], np.float64
    ).reshape(-1, 4)


def place_text_items(
    items: list[pg.TextItem], vb: pg.ViewBox, taken: list[QRectF] | None = None
) -> list[QRectF]:
    """Show the ``items`` (most important first) that fit wholly in the view and overlap
    neither each other nor the ``taken`` rects (scene pixels); hide the rest.  Returns
    the scene rects of the items shown."""
    taken = list(taken or [])
    rects = [text_scene_rect(t, vb) for t in items]
    view = vb.sceneBoundingRect()
    keep = place_labels(
        rects_array(taken + rects),
        (view.left(), view.top(), view.right(), view.bottom()),
        fixed=len(taken),
    )[len(taken) :]
    for t, k in zip(items, keep.tolist()):
        t.setVisible(bool(k))
    return [r for r, k in zip(rects, keep.tolist()) if k]
