"""One lazily filled tree for the call tree and the diff's stack tree.

A node's children become items only when it is first expanded, at most
:data:`MAX_CHILDREN` of them (largest first) plus one "… N more" row summing the rest:
a tree over tens of thousands of stacks opens at once and never builds what nobody looks
at.  What a row shows is the caller's: ``columns(node)`` gives its texts,
``more(nodes)`` the summary row's, ``decorate(item, node)`` anything else.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem

MAX_CHILDREN = 200  # children listed per node; the rest summed in one row
NODE_ROLE = Qt.ItemDataRole.UserRole + 1  # the node object of an item


class LazyTree:
    """Fills ``tree`` from nodes with ``children`` and ``sorted_children()``."""

    def __init__(
        self,
        tree: QTreeWidget,
        columns: Callable[[Any], Sequence[str]],
        more: Callable[[list], Sequence[str]],
        decorate: Callable[[QTreeWidgetItem, Any], None] | None = None,
    ) -> None:
        self.tree = tree
        self.columns, self.more, self.decorate = columns, more, decorate
        tree.itemExpanded.connect(self.fill_children)

    def item(self, node, parent: QTreeWidgetItem | None) -> QTreeWidgetItem:
        """An item for ``node`` under ``parent`` (None: not added anywhere yet)."""
        item = QTreeWidgetItem(list(self.columns(node)))
        item.setData(0, NODE_ROLE, node)
        item.setToolTip(0, str(node.label))
        for c in range(1, item.columnCount()):
            item.setTextAlignment(c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if self.decorate is not None:
            self.decorate(item, node)
        if node.children:
            item.setChildIndicatorPolicy(QTreeWidgetItem.ChildIndicatorPolicy.ShowIndicator)
        if parent is not None:
            parent.addChild(item)
        return item

    def fill_children(self, item: QTreeWidgetItem) -> None:
        """(on expansion) the node's children, once."""
        if item.childCount():
            return
        node = item.data(0, NODE_ROLE)
        if node is None:
            return
        kids = node.sorted_children()
        for child in kids[:MAX_CHILDREN]:
            self.item(child, item)
        if len(kids) > MAX_CHILDREN:
            more = QTreeWidgetItem(list(self.more(kids[MAX_CHILDREN:])))
            more.setFlags(Qt.ItemFlag.ItemIsEnabled)
            item.addChild(more)
