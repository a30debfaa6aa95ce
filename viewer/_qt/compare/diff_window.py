"""The Diff window: two snapshots side by side, what grew between them.

Two tabs.  "End states", an adapter over :mod:`vramscope.viewer.model.reports.diff`:
a header of figure deltas (B - A), the two segment maps with synchronised byte
zoom/pan and row scroll, and the live bytes by allocation stack as a sortable table
and a call tree (added / removed / changed, growth in red, shrink in green).
Selecting a row highlights its blocks in both maps and shows its stack.  "Over time"
(:mod:`.over_time`): both recordings on one aligned time axis, aligned when the tab is
first shown.

It holds one window: two maps kept in step, the stack table, the lazy tree and the
loads of A and B; its model is ``model/reports/diff.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QTreeWidgetItem,
    QWidget,
)

from ...model.core.units import format_bytes, plural
from ...model.reports.diff import (
    STATUS_ADDED,
    STATUS_CHANGED,
    STATUS_REMOVED,
    DiffNode,
    SnapshotDiff,
    StackDiff,
    diff_snapshots,
    signed_bytes,
)
from ...model.view.document import Document
from ...model.view.view_state import HIGHLIGHT_DIFF_NODE, HIGHLIGHT_DIFF_ROW
from ..segment_map import SegmentMapView
from ..widgets.layouts import column
from ..widgets.lazy_tree import NODE_ROLE, LazyTree
from ..widgets.loader import LoadThread
from ..widgets.stack_panel import StackPanel
from ..widgets.tables import table_tree
from .common import GROWTH_RED, SHRINK_GREEN, SORT_ROLE, LinkedMaps, SortItem, delta_color
from .over_time import OverTimePane
from .two_sizes import TwoSizesPane

ROW_ROLE = NODE_ROLE  # (one role: the lazy tree's node, also on the stack rows)

# (key, title, kind): kind "bytes", "count" or "fraction".
HEADER_FIGURES = (
    ("reserved_bytes", "Reserved", "bytes"),
    ("allocated_bytes", "Allocated", "bytes"),
    ("active_bytes", "Active", "bytes"),
    ("requested_bytes", "Requested", "bytes"),
    ("free_bytes", "Free in segments", "bytes"),
    ("largest_free_block_bytes", "Largest free block", "bytes"),
    ("fragmentation", "Fragmentation", "fraction"),
    ("segment_count", "Segments", "count"),
    ("allocation_count", "Allocations", "count"),
)
MATCH_MODES = (
    (
        "stack",
        "whole stack",
        "Allocations match when their whole stack (your frames) is the "
        "same: best for two moments of one run",
    ),
    (
        "line",
        "allocating line",
        "Allocations match by the line that allocated them, whoever "
        "called it: for different entry points or callers",
    ),
    (
        "function",
        "allocating function",
        "Allocations match by the function that allocated "
        "them, line numbers ignored: for before / after a code edit",
    ),
)
STACK_COLUMNS = ("Growth", "Status", "A", "B", "Blocks", "Allocated at", "Called from")


def _segments(stats) -> str:
    text = f"{stats.segment_count:,}"
    if stats.expandable_segment_count:
        text += f" + {stats.expandable_segment_count:,} exp."
    return text


def _fmt(kind: str, v) -> str:
    if kind == "bytes":
        return format_bytes(v)
    if kind == "fraction":
        return f"{v:.1%}"
    return f"{v:,}"


def _fmt_delta(kind: str, d) -> str:
    if kind == "bytes":
        return signed_bytes(d)
    if kind == "fraction":
        return f"{d * 100:+.1f} pt"
    return f"{d:+,}"


_Item = SortItem


class DiffHeader(QWidget):
    """Figures of A and B and their difference, growth red, shrink green."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(1)
        self.names = [QLabel("A"), QLabel("B"), QLabel("B − A")]
        bold = QFont(self.font())
        bold.setBold(True)
        for i, label in enumerate(self.names):
            label.setFont(bold)
            grid.addWidget(label, 1 + i, 0)
        self.cells: dict[str, tuple[QLabel, QLabel, QLabel]] = {}
        for c, (key, title, _kind) in enumerate(HEADER_FIGURES, start=1):
            t = QLabel(title)
            t.setEnabled(False)
            grid.addWidget(t, 0, c, Qt.AlignmentFlag.AlignRight)
            cells = (QLabel(), QLabel(), QLabel())
            for r, cell in enumerate(cells, start=1):
                cell.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                cell.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                grid.addWidget(cell, r, c)
            cells[2].setFont(bold)
            self.cells[key] = cells
        self.peaks = QLabel()
        self.peaks.setToolTip(
            "Peaks over each recorded window (replayed trace): equal to the "
            "allocator's *.all.peak counters"
        )
        grid.addWidget(self.peaks, 4, 0, 1, len(HEADER_FIGURES) + 1)
        grid.setColumnStretch(len(HEADER_FIGURES) + 1, 1)

    def set_diff(self, diff: SnapshotDiff | None, name_a: str = "A", name_b: str = "B") -> None:
        self.names[0].setText(f"A  {name_a}")
        self.names[1].setText(f"B  {name_b}")
        for key, _title, kind in HEADER_FIGURES:
            ca, cb, cd = self.cells[key]
            if diff is None:
                for c in (ca, cb, cd):
                    c.setText("")
                continue
            va, vb = getattr(diff.total.a, key), getattr(diff.total.b, key)
            d = vb - va
            if key == "segment_count":
                ca.setText(_segments(diff.total.a))
                cb.setText(_segments(diff.total.b))
                if diff.total.a.expandable_segment_count or diff.total.b.expandable_segment_count:
                    cd.setToolTip(
                        "The allocator does not count expandable segments in "
                        "segment.all.current; vramscope neither (exp.: its own count)"
                    )
            else:
                ca.setText(_fmt(kind, va))
                cb.setText(_fmt(kind, vb))
            cd.setText(_fmt_delta(kind, d))
            color = delta_color(d) if key != "largest_free_block_bytes" else None
            cd.setStyleSheet(f"color: {color.name()}" if color is not None else "")
            if diff.counters and key in _COUNTER_OF:
                c = diff.counters.get(_COUNTER_OF[key])
                if c is not None:
                    cd.setToolTip(
                        f"memory_stats()['{_COUNTER_OF[key]}']: {c['a']:,} → {c['b']:,} "
                        f"(B − A = {c['delta']:+,})"
                    )
        parts = []
        if diff is not None and diff.peaks:
            for curve in ("reserved", "allocated"):
                p = diff.peaks[f"peak_{curve}_bytes"]
                if p["delta"] is not None:
                    color = delta_color(p["delta"])
                    style = f' style="color:{color.name()}"' if color is not None else ""
                    parts.append(
                        f"peak {curve}: {format_bytes(p['a'])} → {format_bytes(p['b'])} "
                        f"<b{style}>{signed_bytes(p['delta'])}</b>"
                    )
        self.peaks.setText("&nbsp;&nbsp;·&nbsp;&nbsp;".join(parts))
        self.peaks.setVisible(bool(parts))

    def delta_text(self, key: str) -> str:
        return self.cells[key][2].text()


_COUNTER_OF = {
    "reserved_bytes": "reserved_bytes.all.current",
    "allocated_bytes": "allocated_bytes.all.current",
    "active_bytes": "active_bytes.all.current",
    "requested_bytes": "requested_bytes.all.current",
    "segment_count": "segment.all.current",
}


class DiffWindow(QMainWindow):
    """Compare snapshot A (before) with B (after)."""

    loadFinished = Signal(str)  # "loaded" | "failed" | "cancelled"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("compare — vramscope")
        self.doc_a: Document | None = None
        self.doc_b: Document | None = None
        self.diff: SnapshotDiff | None = None
        self.last_error: str | None = None
        self._threads: dict[str, LoadThread] = {}

        self.header = DiffHeader()
        self.match = QComboBox()
        for key, text, tip in MATCH_MODES:
            self.match.addItem(text, key)
            self.match.setItemData(self.match.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.match.setToolTip("How allocations of A and B are matched")
        self.fold = QCheckBox("fold internals")
        self.fold.setChecked(True)
        self.fold.setToolTip(
            "Key stacks by your own frames only (torch internals, C++ and "
            "interpreter frames folded away)"
        )
        self.match.currentIndexChanged.connect(lambda _i: self.recompute())
        self.fold.toggled.connect(lambda _on: self.recompute())
        self.counts = QLabel()
        maps = self._build_maps()
        bottom = self._build_tables()
        main = QSplitter(Qt.Orientation.Vertical)
        main.addWidget(maps)
        main.addWidget(bottom)
        main.setSizes([420, 320])

        options = QHBoxLayout()
        options.setContentsMargins(6, 0, 6, 0)
        options.addWidget(QLabel("Match allocations by:"))
        options.addWidget(self.match)
        options.addWidget(self.fold)
        options.addSpacing(16)
        options.addWidget(self.counts, 1)
        ends = QWidget()
        column(ends, self.header, options, (main, 1), spacing=2)
        # Two views of the pair: the end states (above), and both runs on one time axis
        # (aligned when first shown: its job is not paid for by who never looks).
        self.over_time = OverTimePane()
        self.views = QTabWidget()
        self.views.setDocumentMode(True)
        self.views.addTab(ends, "End states")
        self.views.addTab(self.over_time, "Over time")
        self.views.setTabToolTip(0, "What each snapshot holds at its end, and what grew")
        self.views.setTabToolTip(
            1,
            "Both recordings on one aligned time axis (iteration by "
            "iteration): curves, both maps at one cursor, categories, "
            "allocation sites",
        )
        # The pair as two sizes of one knob: the run at any other size.
        self.two_sizes = TwoSizesPane()
        self.views.addTab(self.two_sizes, "Other sizes")
        self.views.setTabToolTip(
            2,
            "A and B as one program at two batch sizes (or sequence lengths): "
            "the run at another size (vramscope whatif A --with B)",
        )
        self.views.currentChanged.connect(self._on_view)
        self.setCentralWidget(self.views)
        self.resize(1440, 900)
        app = QApplication.instance()
        if app is not None:  # never leave a loader running past the event loop
            app.aboutToQuit.connect(self.cancel)

    def _build_maps(self) -> QSplitter:
        """A's and B's segment maps side by side, their views linked."""
        self.map_a = SegmentMapView()
        self.map_b = SegmentMapView()
        self.title_a = QLabel("A")
        self.title_b = QLabel("B")
        maps = QSplitter(Qt.Orientation.Horizontal)
        for title, m in ((self.title_a, self.map_a), (self.title_b, self.map_b)):
            title.setContentsMargins(6, 2, 6, 0)
            box = QWidget()
            column(box, title, (m, 1))
            maps.addWidget(box)
        self.maps = maps
        for m in (self.map_a, self.map_b):
            # Two maps side by side: their legends and captions may be clipped
            # (tooltips keep them) rather than widen the window.
            for label in (m.legend, m.caption):
                label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
                label.setToolTip(label.toolTip() or label.text())
        self.linked = LinkedMaps(self.map_a, self.map_b)
        self.map_a.blockClicked.connect(lambda b: self._block_clicked("a", b))
        self.map_b.blockClicked.connect(lambda b: self._block_clicked("b", b))
        return maps

    def _build_tables(self) -> QSplitter:
        """The stacks by growth and the call tree (tabs), the stack panel beside them."""
        self.stacks = table_tree(
            STACK_COLUMNS,
            "Live bytes (allocated or pending free) by allocation stack in A "
            "and B, largest growth first. Click a row: its blocks are highlighted in both "
            "maps.",
            dict(enumerate((96, 74, 90, 90, 80, 260))),
            roots=False,
            sorting=True,
        )
        self.stacks.currentItemChanged.connect(self._on_row)

        self.tree = table_tree(
            ("Call path", "Growth", "A", "B"),
            "The same live bytes as a call tree, outermost frame first",
            {1: 90, 2: 90, 3: 90},
            stretch=0,
        )
        self.lazy = LazyTree(self.tree, self._node_columns, self._more, self._decorate)
        self.tree.currentItemChanged.connect(self._on_node)

        self.stack_panel = StackPanel()
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.stacks, "Stacks by growth")
        self.tabs.addTab(self.tree, "Call tree")
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.tabs)
        bottom.addWidget(self.stack_panel)
        bottom.setStretchFactor(0, 3)
        bottom.setStretchFactor(1, 1)
        bottom.setSizes([1000, 400])
        return bottom

    # ------------------------------------------------------------------ loading
    def open(self, a: Document | str, b: Document | str) -> None:
        """Compare ``a`` with ``b``: documents, or paths loaded off the GUI thread."""
        self.cancel()
        self.last_error = None
        self.doc_a = a if isinstance(a, Document) else None
        self.doc_b = b if isinstance(b, Document) else None
        for side, src in (("a", a), ("b", b)):
            if not isinstance(src, Document):
                t = LoadThread(os.fspath(src), self)
                t.done.connect(lambda doc, s=side: self._on_loaded(s, doc))
                t.failed.connect(lambda msg, s=side: self._on_failed(s, msg))
                t.cancelled.connect(lambda s=side: self._on_cancelled(s))
                self._threads[side] = t
        if not self._threads:
            self.set_documents(self.doc_a, self.doc_b)
            return
        self.statusBar().showMessage(
            "Loading " + ", ".join(Path(t.path).name for t in self._threads.values()) + "…"
        )
        for t in self._threads.values():
            t.start()

    def is_loading(self) -> bool:
        return bool(self._threads)

    def cancel(self) -> None:
        for t in self._threads.values():
            t.cancel()
            t.wait(30000)
        self._threads.clear()
        self.over_time.wait()
        self.two_sizes.wait()

    def show_over_time(self) -> None:
        """The Over-time view (aligning the pair if not done yet)."""
        self.views.setCurrentWidget(self.over_time)
        self._on_view(self.views.currentIndex())

    def _on_view(self, _index: int) -> None:
        if self.views.currentWidget() is self.over_time and self.over_time.needs_start():
            self.over_time.start()

    def _on_loaded(self, side: str, doc: Document) -> None:
        t = self._threads.pop(side, None)
        if t is None:
            return
        t.result = None
        if side == "a":
            self.doc_a = doc
        else:
            self.doc_b = doc
        if not self._threads and self.doc_a is not None and self.doc_b is not None:
            self.set_documents(self.doc_a, self.doc_b)
            self.statusBar().showMessage("Loaded", 4000)
            self.loadFinished.emit("loaded")

    def _on_failed(self, side: str, message: str) -> None:
        t = self._threads.pop(side, None)
        if t is None:
            return
        self.cancel()
        self.last_error = f"{t.path}: {message}"
        self.statusBar().showMessage(f"Could not open {Path(t.path).name}: {message}")
        self.loadFinished.emit("failed")

    def _on_cancelled(self, side: str) -> None:
        if self._threads.pop(side, None) is not None:
            self.cancel()
            self.loadFinished.emit("cancelled")

    def closeEvent(self, event) -> None:
        self.cancel()
        super().closeEvent(event)

    # ------------------------------------------------------------------ content
    def set_documents(self, a: Document, b: Document) -> None:
        self.doc_a, self.doc_b = a, b
        self.setWindowTitle(f"{a.name} → {b.name}: compare — vramscope")
        self.title_a.setText(f"<b>A</b> {a.name}")
        self.title_b.setText(f"<b>B</b> {b.name}")
        self.title_a.setToolTip(a.snap.path or "")
        self.title_b.setToolTip(b.snap.path or "")
        self.map_a.set_document(a)
        self.map_b.set_document(b)
        self._fit_maps()
        self.recompute()
        self.over_time.set_documents(a, b)
        self.two_sizes.set_documents(a, b)
        self._on_view(self.views.currentIndex())

    def match_mode(self) -> str:
        return self.match.currentData() or "stack"

    def set_match_mode(self, mode: str) -> None:
        i = self.match.findData(mode)
        if i >= 0:
            self.match.setCurrentIndex(i)

    def recompute(self) -> None:
        a, b = self.doc_a, self.doc_b
        if a is None or b is None:
            return
        mode = self.match_mode()
        self.diff = diff_snapshots(
            a.snap,
            b.snap,
            fold=self.fold.isChecked(),
            lines=mode != "function",
            depth=None if mode == "stack" else 1,
            categories_a=a.categories,
            categories_b=b.categories,
            timelines=(a.timeline, b.timeline)
            if a.timeline is not None and b.timeline is not None
            else None,
        )
        d = self.diff
        self.header.set_diff(d, a.name, b.name)
        n = {s: len(d.by_status(s)) for s in (STATUS_ADDED, STATUS_REMOVED, STATUS_CHANGED)}
        self.counts.setText(
            f"{plural(len(d.stacks), 'stack')}: "
            f"<span style='color:{GROWTH_RED}'>{n[STATUS_ADDED]} added"
            f"</span>, <span style='color:{SHRINK_GREEN}'>{n[STATUS_REMOVED]} removed</span>, "
            f"{n[STATUS_CHANGED]} changed · live bytes {signed_bytes(d.delta('active_bytes'))}"
        )
        self._fill_stacks()
        self._fill_tree()
        self.map_a.set_highlight(None)
        self.map_b.set_highlight(None)
        self.stack_panel.set_document(None)

    def _fill_stacks(self) -> None:
        d = self.diff
        self.stacks.setSortingEnabled(False)
        self.stacks.clear()
        items = []
        for i, s in enumerate(d.stacks):
            called = " ← ".join(s.frame_labels()[1:4])
            item = _Item(
                [
                    signed_bytes(s.delta),
                    s.status,
                    format_bytes(s.bytes_a),
                    format_bytes(s.bytes_b),
                    f"{s.count_a} → {s.count_b}",
                    s.label,
                    called,
                ]
            )
            for c, v in (
                (0, s.delta),
                (1, s.status),
                (2, s.bytes_a),
                (3, s.bytes_b),
                (4, s.delta_count),
                (5, s.label),
                (6, called),
            ):
                item.setData(c, SORT_ROLE, v)
            item.setData(0, ROW_ROLE, i)
            for c in (0, 2, 3, 4):
                item.setTextAlignment(
                    c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                )
            color = delta_color(s.delta)
            if color is not None:
                item.setForeground(0, QBrush(color))
                item.setForeground(1, QBrush(color))
            item.setToolTip(5, "\n".join(s.frame_labels()))
            item.setToolTip(0, f"{s.delta:+,} bytes")
            items.append(item)
        self.stacks.addTopLevelItems(items)
        self.stacks.setSortingEnabled(True)
        self.stacks.sortByColumn(0, Qt.SortOrder.DescendingOrder)

    def _fill_tree(self) -> None:
        self.tree.clear()
        root = self._node_item(self.diff.tree, None)
        self.tree.addTopLevelItem(root)
        item = root
        for _ in range(32):  # expand down the path of the largest growth
            item.setExpanded(True)
            self._fill_children(item)
            if not item.childCount():
                break
            nxt = item.child(0)
            node = nxt.data(0, ROW_ROLE)
            if node is None or node.delta <= 0 or (item.childCount() > 1 and item is not root):
                break
            item = nxt

    @staticmethod
    def _node_columns(node: DiffNode) -> list[str]:
        return [
            node.label,
            signed_bytes(node.delta),
            format_bytes(node.bytes_a),
            format_bytes(node.bytes_b),
        ]

    @staticmethod
    def _more(rest: list) -> list[str]:
        return [f"… {len(rest):,} more", signed_bytes(sum(n.delta for n in rest)), "", ""]

    @staticmethod
    def _decorate(item: QTreeWidgetItem, node: DiffNode) -> None:
        color = delta_color(node.delta)
        if color is not None:
            item.setForeground(1, QBrush(color))

    def _node_item(self, node: DiffNode, parent: QTreeWidgetItem | None) -> QTreeWidgetItem:
        return self.lazy.item(node, parent)

    def _fill_children(self, item: QTreeWidgetItem) -> None:
        self.lazy.fill_children(item)

    # ------------------------------------------------------------------ selection
    def row_items(self) -> list[QTreeWidgetItem]:
        return [self.stacks.topLevelItem(i) for i in range(self.stacks.topLevelItemCount())]

    def _on_row(self, current: QTreeWidgetItem | None, _prev) -> None:
        if current is None or self.diff is None:
            return
        row = int(current.data(0, ROW_ROLE))
        self.highlight_rows([row], f"{HIGHLIGHT_DIFF_ROW}: {self.diff.stacks[row].label}")

    def _on_node(self, current: QTreeWidgetItem | None, _prev) -> None:
        if current is None or self.diff is None:
            return
        node = current.data(0, ROW_ROLE)
        if isinstance(node, DiffNode):
            self.highlight_rows(list(node.rows), f"{HIGHLIGHT_DIFF_NODE}: {node.label}")

    def highlight_rows(self, rows: list[int], label: str = "") -> None:
        """Highlight the blocks of ``rows`` (of ``diff.stacks``) in both maps, named
        ``label`` in their legends (empty: "selected diff row" and the row's line); show
        the stack of the row that grew most."""
        d = self.diff
        if not rows:
            return
        if not label:
            label = HIGHLIGHT_DIFF_ROW + (
                f": {d.stacks[rows[0]].label}" if len(rows) == 1 else f"s ({len(rows)})"
            )
        self.map_a.set_highlight(d.stack_mask("a", rows), label)
        self.map_b.set_highlight(d.stack_mask("b", rows), label)
        best: StackDiff = max((d.stacks[i] for i in rows), key=lambda s: (s.delta, s.bytes_b))
        self._show_stack(best)

    def _show_stack(self, s: StackDiff) -> None:
        side_b = bool(s.stacks_b)
        doc = self.doc_b if side_b else self.doc_a
        stacks = s.stacks_b if side_b else s.stacks_a
        stack = max(stacks) if stacks else -1
        facts = (
            f"<b>{s.status}</b> · {format_bytes(s.bytes_a)} in {plural(s.count_a, 'block')} → "
            f"{format_bytes(s.bytes_b)} in {plural(s.count_b, 'block')} · "
            f"<b style='color:{(delta_color(s.delta) or QColor('black')).name()}'>"
            f"{signed_bytes(s.delta)}</b><br>stack as recorded in {'B' if side_b else 'A'}"
        )
        self.stack_panel.set_document(doc)
        self.stack_panel.show_stack(stack, facts)

    def _block_clicked(self, side: str, block: int) -> None:
        doc = self.doc_a if side == "a" else self.doc_b
        self.stack_panel.set_document(doc)
        self.stack_panel.show_block(block)

    # ------------------------------------------------------------------ maps
    def _fit_maps(self) -> None:
        """Both maps on one scale (bytes across, rows down), from the top."""
        la, lb = self.map_a.layout_data, self.map_b.layout_data
        if la is None or lb is None:
            return
        maps = (self.map_a, self.map_b)
        xmax = max(max(m.layout_data.max_size, float(m.item.request_bytes), 1.0) for m in maps)
        tops, spans = [], []
        with self.linked.quiet():
            for m in maps:
                m.home()
                (_, _), (ya, yb) = m.vb.viewRange()
                tops.append(ya)
                spans.append(yb - ya)
            top = min(tops)
            rows = max(la.n_rows, lb.n_rows, 1)
            for m in maps:
                m.vb.setLimits(xMin=-0.05 * xmax, xMax=xmax * 1.05, yMin=top - 1, yMax=rows + 1)
                m.vb.setRange(xRange=(0, xmax), yRange=(top, top + max(spans)), padding=0)

    def view_ranges(self) -> tuple[list, list]:
        return self.map_a.vb.viewRange(), self.map_b.vb.viewRange()


def highlight_count(view: SegmentMapView) -> int:
    """Blocks highlighted in a map (for tests)."""
    return int(len(view.item.highlighted_blocks()))


__all__ = ["DiffHeader", "DiffWindow", "highlight_count"]
