"""The tree widget the windows' tables are made of: a header of named columns, one row
selected at a time, alternating rows of one height, the column widths given and one
column that takes the rest of the width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTreeWidget


def table_tree(
    columns: Sequence[str],
    tooltip: str,
    widths: Mapping[int, int],
    stretch: int | None = None,
    *,
    roots: bool = True,
    sorting: bool = False,
) -> QTreeWidget:
    """A :class:`QTreeWidget` with ``columns``, ``tooltip`` and the ``widths`` (column ->
    pixels); ``stretch``: the column that takes what is left (None: the last one, as
    the header stretches it); ``roots``: expandable top-level rows; ``sorting``: a click
    on a column sorts by it."""
    tree = QTreeWidget()
    tree.setRootIsDecorated(roots)
    tree.setColumnCount(len(columns))
    tree.setHeaderLabels(list(columns))
    tree.setUniformRowHeights(True)
    tree.setAlternatingRowColors(True)
    tree.setSortingEnabled(sorting)
    tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    tree.setToolTip(tooltip)
    header = tree.header()
    header.setStretchLastSection(stretch is None)
    if stretch is not None:
        header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    for column, width in widths.items():
        header.resizeSection(column, width)
    return tree
