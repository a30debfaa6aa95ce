"""Pure placement of things drawn over the plots: ``record_function`` ranges paired from
their START/END annotations, and labels that never overlap.

No Qt here: rectangles are numpy columns ``(x0, y0, x1, y1)`` in any one pixel space, so
the views (timeline, segment map) only measure their texts and draw what is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Ranges:
    """``record_function`` ranges of one device: ``[start_us, end_us]`` and the name's
    string id, in the order they close."""

    start_us: np.ndarray  # int64
    end_us: np.ndarray  # int64
    name: np.ndarray  # int64: string id

    def __len__(self) -> int:
        return len(self.start_us)


def pair_ranges(ann, device: int) -> Ranges:
    """START/END annotations of ``device`` paired per name (nested ranges of one name
    pair innermost first; an END without a START is dropped, a START left open too)."""
    sel = np.flatnonzero(np.asarray(ann.device) == device)
    sel = sel[np.argsort(np.asarray(ann.time_us)[sel], kind="stable")]
    open_: dict[int, list[int]] = {}
    a, b, n = [], [], []
    for i in sel.tolist():
        name = int(ann.name[i])
        if ann.is_start[i]:
            open_.setdefault(name, []).append(int(ann.time_us[i]))
        elif open_.get(name):
            a.append(open_[name].pop())
            b.append(int(ann.time_us[i]))
            n.append(name)
    return Ranges(np.asarray(a, np.int64), np.asarray(b, np.int64), np.asarray(n, np.int64))


def place_labels(
    rects: np.ndarray,
    bounds: tuple[float, float, float, float] | None = None,
    pad: float = 2.0,
    fixed: int = 0,
) -> np.ndarray:
    """Which labels to show: ``rects`` is (n, 4) ``x0, y0, x1, y1`` in pixels, most
    important first.  A label is kept when it lies wholly inside ``bounds`` (a label cut
    at the plot's edge is dropped, not clipped) and does not come within ``pad`` pixels
    of a label kept before it.  The first ``fixed`` rects are placed already (kept
    whatever the bounds: others only avoid them).  Returns a bool mask."""
    r = np.asarray(rects, np.float64).reshape(-1, 4)
    keep = np.zeros(len(r), bool)
    if bounds is not None:
        bx0, by0, bx1, by1 = bounds
        inside = (
            (r[:, 0] >= bx0 - 0.5)
            & (r[:, 1] >= by0 - 0.5)
            & (r[:, 2] <= bx1 + 0.5)
            & (r[:, 3] <= by1 + 0.5)
        )
    else:
        inside = np.ones(len(r), bool)
    inside[:fixed] = True
    kept: list[int] = []
    for i in range(len(r)):
        if i < fixed:
            keep[i] = True
            kept.append(i)
            continue
        if not inside[i]:
            continue
        if kept:
            k = r[kept]
            clash = (
                (k[:, 0] < r[i, 2] + pad)
                & (r[i, 0] < k[:, 2] + pad)
                & (k[:, 1] < r[i, 3] + pad)
                & (r[i, 1] < k[:, 3] + pad)
            )
            if clash.any():
                continue
        keep[i] = True
        kept.append(i)
    return keep
