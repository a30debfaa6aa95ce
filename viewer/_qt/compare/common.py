"""What the compare views share: the growth / shrink colours and a tree item that
sorts numbers as numbers."""

from __future__ import annotations

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
