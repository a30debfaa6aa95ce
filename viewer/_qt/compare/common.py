"""What the compare views share: the growth / shrink colours, a tree item that sorts
numbers as numbers, and two segment maps that move together."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTreeWidgetItem

GROWTH_RED = "#c62828"
SHRINK_GREEN = "#2e7d32"
SORT_ROLE = Qt.ItemDataRole.UserRole + 2


def delta_color(delta: float) -> QColor | None:
    """Red for growth (B above A), green for shrink, None for no change."""
    if delta > 0:
        return QColor(GROWTH_RED)
    if delta < 0:
        return QColor(SHRINK_GREEN)
    return None


class SortItem(QTreeWidgetItem):
    """Sorts by the SORT_ROLE data of the column when present (numbers sort as numbers)."""

    def __lt__(self, other: QTreeWidgetItem) -> bool:
        tree = self.treeWidget()
        col = tree.sortColumn() if tree is not None else 0
        a, b = self.data(col, SORT_ROLE), other.data(col, SORT_ROLE)
        if a is not None and b is not None:
            return a < b
        return self.text(col) < other.text(col)


class LinkedMaps:
    """Two segment maps on the same bytes across and the same rows: a pan or zoom of one
    moves the other.  ``quiet()`` holds the link while a window sets both itself."""

    def __init__(self, a, b) -> None:
        self.busy = False
        a.vb.sigRangeChanged.connect(lambda *_: self._follow(a, b))
        b.vb.sigRangeChanged.connect(lambda *_: self._follow(b, a))

    @contextmanager
    def quiet(self) -> Iterator[None]:
        self.busy = True
        try:
            yield
        finally:
            self.busy = False

    def _follow(self, src, dst) -> None:
        if self.busy:
            return
        with self.quiet():
            (xa, xb), (ya, yb) = src.vb.viewRange()
            dst.vb.setRange(xRange=(xa, xb), yRange=(ya, yb), padding=0)
