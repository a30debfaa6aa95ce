"""The allocations table (the Blocks tab): a model over numpy columns, formatted on
demand.  Given the window's :class:`ViewState`, the table subscribes itself: its rows
are the blocks of the selection at each ``moment``."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ...model.core.frames import stacks_matching
from ...model.core.snapshot import BlockState
from ...model.core.units import format_address, format_bytes, plural
from ...model.view.document import Document, stream_label
from ...model.view.view_state import ViewState
from ..widgets import theme

COLUMNS = ("Address", "Size", "Requested", "Waste", "State", "Segment", "Stream", "Top frame")
COL_ADDRESS, COL_SIZE, COL_REQUESTED, COL_WASTE, COL_STATE, COL_SEGMENT, COL_STREAM, COL_FRAME = (
    range(len(COLUMNS))
)
TIPS = (
    "Device address of the block",
    "Block size (rounded by the allocator)",
    "Bytes the caller asked for (active blocks)",
    "Size - requested: rounding waste of active blocks",
    "allocated, pending free (waiting on other streams), free gap, unknown",
    "Address of the segment holding the block",
    "CUDA stream of the segment",
    "The innermost frame of your code that allocated the block",
)


class BlocksModel(QAbstractTableModel):
    """Rows are block indices (``self.rows``); every cell is computed in data()."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.doc: Document | None = None
        self.rows = np.zeros(0, dtype=np.int64)
        self.sort_column = -1
        self.sort_order = Qt.SortOrder.AscendingOrder
        self._waste = np.zeros(0, dtype=np.int64)
        # Colour by category: block -> QColor or None (the state's colour), or None.
        self.block_colors = None

    # -- content
    def set_rows(self, doc: Document | None, rows: np.ndarray) -> None:
        self.beginResetModel()
        self.doc = doc
        self.rows = np.asarray(rows, dtype=np.int64)
        if doc is not None and len(doc.snap.blocks):
            b = doc.snap.blocks
            active = (b.state == BlockState.ALLOCATED) | (b.state == BlockState.PENDING_FREE)
            self._waste = np.where(active, b.size - b.requested_size, 0)
        else:
            self._waste = np.zeros(0, dtype=np.int64)
        if self.sort_column >= 0:
            self.rows = self.rows[self._order(self.sort_column, self.sort_order)]
        self.endResetModel()

    def block_at(self, row: int) -> int:
        return int(self.rows[row]) if 0 <= row < len(self.rows) else -1

    def row_of(self, block: int) -> int:
        hit = np.flatnonzero(self.rows == block)
        return int(hit[0]) if len(hit) else -1

    # -- Qt API
    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return TIPS[section] + " (click to sort)"
        elif role == Qt.ItemDataRole.DisplayRole:
            return str(section + 1)
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or self.doc is None:
            return None
        b = int(self.rows[index.row()])
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(b, col)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if col in (COL_SIZE, COL_REQUESTED, COL_WASTE):
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            return None
        if role == Qt.ItemDataRole.DecorationRole and col == COL_STATE:
            c = self.block_colors(b) if self.block_colors is not None else None
            if c is not None:
                return c
            return QColor(theme.STATE_COLORS[int(self.doc.snap.blocks.state[b])])
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == COL_FRAME:
                return self.doc.block_top_label(b) or "no stack recorded"
            if col in (COL_SIZE, COL_REQUESTED, COL_WASTE):
                return f"{self._raw(b, col):,} bytes"
        if role == Qt.ItemDataRole.UserRole:
            return b
        return None

    def _raw(self, b: int, col: int) -> int:
        blocks = self.doc.snap.blocks
        if col == COL_SIZE:
            return int(blocks.size[b])
        if col == COL_REQUESTED:
            return int(blocks.requested_size[b])
        return int(self._waste[b])

    def _text(self, b: int, col: int) -> str:
        snap = self.doc.snap
        blocks, segs = snap.blocks, snap.segments
        if col == COL_ADDRESS:
            return format_address(blocks.address[b])
        if col == COL_SIZE:
            return format_bytes(int(blocks.size[b]))
        state = int(blocks.state[b])
        active = state in (BlockState.ALLOCATED, BlockState.PENDING_FREE)
        if col == COL_REQUESTED:
            return format_bytes(int(blocks.requested_size[b])) if active else ""
        if col == COL_WASTE:
            return format_bytes(int(self._waste[b])) if active else ""
        if col == COL_STATE:
            return BlockState(state).label
        s = int(blocks.segment[b])
        if col == COL_SEGMENT:
            return format_address(segs.address[s])
        if col == COL_STREAM:
            return stream_label(int(segs.stream[s]))
        if col == COL_FRAME:
            return self.doc.block_top_label(b)
        return ""

    def _key(self, col: int) -> np.ndarray:
        snap = self.doc.snap
        blocks, segs = snap.blocks, snap.segments
        r = self.rows
        if col == COL_ADDRESS:
            return blocks.address[r]
        if col == COL_SIZE:
            return blocks.size[r]
        if col == COL_REQUESTED:
            return blocks.requested_size[r]
        if col == COL_WASTE:
            return self._waste[r]
        if col == COL_STATE:
            return blocks.state[r]
        if col == COL_SEGMENT:
            return segs.address[blocks.segment[r]]
        if col == COL_STREAM:
            return segs.stream[blocks.segment[r]]
        stacks = blocks.stack[r]
        rank = np.full(len(r), -1, dtype=np.int64)
        has = stacks >= 0
        rank[has] = self.doc.top_rank[stacks[has]]
        return rank

    def _order(self, col: int, order: Qt.SortOrder) -> np.ndarray:
        key = self._key(col)
        # Ties broken by address so the order is stable and meaningful.
        addr = self.doc.snap.blocks.address[self.rows]
        if order == Qt.SortOrder.DescendingOrder:
            return np.lexsort((addr, -key.astype(np.int64)))
        return np.lexsort((addr, key))

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self.sort_column, self.sort_order = column, order
        if self.doc is None or not len(self.rows):
            return
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        old_blocks = [self.block_at(i.row()) for i in old]
        self.rows = self.rows[self._order(column, order)]
        if old:
            pos = {int(b): i for i, b in enumerate(self.rows.tolist())}
            new = [
                self.index(pos.get(b, 0), i.column()) if b >= 0 else QModelIndex()
                for b, i in zip(old_blocks, old)
            ]
            self.changePersistentIndexList(old, new)
        self.layoutChanged.emit()


def count_text(doc: Document | None, rows: np.ndarray, total: int) -> str:
    """ "12 / 895 blocks · 447 allocated · 448 free": the rows are blocks, not only
    allocations (an "Allocations 895/895" would count the free gaps as allocations)."""
    text = f"{len(rows):,} / {plural(total, 'block')}"
    if doc is None or not len(rows):
        return text
    states = np.bincount(doc.snap.blocks.state[rows].astype(np.int64), minlength=4)
    parts = [
        f"{int(states[s]):,} {label}"
        for s, label in (
            (BlockState.ALLOCATED, "allocated"),
            (BlockState.PENDING_FREE, "pending free"),
            (BlockState.FREE, "free"),
            (BlockState.UNKNOWN, "unknown"),
        )
        if states[s]
    ]
    return " · ".join([text, *parts])


class AllocationsTable(QWidget):
    """Filter box + table; emits :attr:`blockSelected` for the current row.

    ``view_state``: the window's :class:`ViewState`, whose moments the table shows
    (None: the caller sets the rows)."""

    blockSelected = Signal(int)
    filterApplied = Signal(str)  # the stack text now filtering (after a change)

    def __init__(self, view_state: ViewState | None = None, parent=None) -> None:
        super().__init__(parent)
        self.vs = view_state
        self.doc: Document | None = None
        self.all_rows = np.zeros(0, dtype=np.int64)
        self._syncing = False
        self.stack_mask: np.ndarray | None = None  # per stack: matches the filter text
        self._mask_key = None
        self._applied_text = ""
        # Rows kept besides the search (the category filter): (doc, rows) -> bool per
        # row, or None for all.
        self.row_filter = None
        self.model = BlocksModel(self)
        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSortingEnabled(True)
        self.view.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setAlternatingRowColors(True)
        self.view.setWordWrap(False)
        self.view.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.view.verticalHeader().hide()
        hh = self.view.horizontalHeader()
        hh.setStretchLastSection(True)
        hh.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        widths = (120, 80, 80, 70, 110, 120, 130)
        for i, w in enumerate(widths):
            hh.resizeSection(i, w)
        self.view.setToolTip(
            "Blocks of the selected segments. Click a header to sort; "
            "select a row to show it in the map and its stack."
        )
        self.view.selectionModel().currentRowChanged.connect(self._on_current_changed)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("filter by stack text (file or function)…")
        self.filter.setClearButtonEnabled(True)
        self.filter.setToolTip(
            "Keep blocks whose call stack has a frame whose file or function "
            "contains this text (Ctrl+F)"
        )
        self._filter_timer = QTimer(self, singleShot=True, interval=200)
        self._filter_timer.timeout.connect(self.apply_filter)
        self.filter.textChanged.connect(lambda _t: self._filter_timer.start())
        self.filter.returnPressed.connect(self.apply_filter)
        self.count = QLabel()
        self.count.setToolTip(
            "Blocks shown / blocks in the selection, and what the shown "
            "ones are: allocated (live tensors), free gaps, pending free"
        )
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(QLabel("Blocks"))
        top.addWidget(self.filter, 1)
        top.addWidget(self.count)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 4)
        lay.setSpacing(2)
        lay.addLayout(top)
        lay.addWidget(self.view, 1)
        if view_state is not None:
            view_state.events.moment.connect(self._on_moment)

    def _on_moment(self, _keep_view: bool) -> None:
        doc = self.vs.view_doc
        if doc is None:
            self.set_rows(None, [])
        else:
            self.set_rows(doc, doc.blocks_in(self.vs.selection))

    def set_rows(self, doc: Document | None, rows: np.ndarray) -> None:
        self.doc = doc
        self.all_rows = np.asarray(rows, dtype=np.int64)
        self.apply_filter()

    def apply_filter(self) -> None:
        self._filter_timer.stop()
        doc = self.doc
        rows = self.all_rows
        text = self.filter.text().strip()
        self.stack_mask = self.mask_for(text)
        if doc is not None and text and len(rows):
            match = self.stack_mask
            stacks = doc.snap.blocks.stack[rows]
            ok = np.zeros(len(rows), dtype=bool)
            has = stacks >= 0
            ok[has] = match[stacks[has]]
            rows = rows[ok]
        keep = self.row_filter(doc, rows) if self.row_filter and doc is not None else None
        if keep is not None:
            rows = rows[keep]
        # A block index means something in its own document only: another document
        # (another moment, a live update) re-selects by address, in the main window.
        current = self.current_block() if doc is self.model.doc else -1
        self.model.set_rows(doc, rows)
        self.count.setText(count_text(doc, rows, len(self.all_rows)))
        if current >= 0:
            self.select_block(current)
        if text != self._applied_text:
            self._applied_text = text
            self.filterApplied.emit(text)

    def mask_for(self, text: str) -> np.ndarray | None:
        """Per stack: does it match ``text``? (cached; the stacks are shared by every moment)"""
        doc = self.doc
        if doc is None or not text:
            return None
        key = self._mask_key
        if key is None or key[0] is not doc.snap.stacks or key[1] != text:
            self._mask_key = (doc.snap.stacks, text)
            self._mask = stacks_matching(doc.snap, text)
        return self._mask

    def view_state(self) -> dict | None:
        """Scroll position, anchored on the address of the block in the top row, for
        :meth:`restore_view_state` over a newer document (live attach).  The sort
        column and order live in the model and survive new rows by themselves."""
        doc = self.model.doc
        if doc is None:
            return None
        top = self.view.rowAt(0)
        b = self.model.block_at(top)
        return {
            "anchor": int(doc.snap.blocks.address[b]) if b >= 0 else -1,
            "v": self.view.verticalScrollBar().value(),
            "h": self.view.horizontalScrollBar().value(),
        }

    def restore_view_state(self, state: dict | None) -> None:
        doc = self.model.doc
        if state is None or doc is None:
            return
        row = -1
        if state["anchor"] >= 0 and len(self.model.rows):
            hit = np.flatnonzero(doc.snap.blocks.address[self.model.rows] == state["anchor"])
            row = int(hit[0]) if len(hit) else -1
        if row >= 0:
            self.view.scrollTo(self.model.index(row, 0), QAbstractItemView.ScrollHint.PositionAtTop)
        else:
            self.view.verticalScrollBar().setValue(state["v"])
        self.view.horizontalScrollBar().setValue(state["h"])

    def top_block_address(self) -> int:
        """Address of the block in the table's top visible row, or -1 (tests)."""
        b = self.model.block_at(self.view.rowAt(0))
        return int(self.model.doc.snap.blocks.address[b]) if b >= 0 else -1

    def current_block(self) -> int:
        idx = self.view.selectionModel().currentIndex()
        return self.model.block_at(idx.row()) if idx.isValid() else -1

    def select_block(self, block: int) -> bool:
        """Select and scroll to ``block``'s row without re-emitting the signal."""
        row = self.model.row_of(block)
        self._syncing = True
        try:
            sm = self.view.selectionModel()
            if row < 0:
                sm.clearSelection()
                return False
            idx = self.model.index(row, 0)
            sm.setCurrentIndex(idx, sm.SelectionFlag.ClearAndSelect | sm.SelectionFlag.Rows)
            self.view.scrollTo(idx, QAbstractItemView.ScrollHint.EnsureVisible)
            return True
        finally:
            self._syncing = False

    def _on_current_changed(self, current, _previous) -> None:
        if self._syncing or not current.isValid():
            return
        b = self.model.block_at(current.row())
        if b >= 0:
            self.blockSelected.emit(b)
