"""Who holds memory: live bytes grouped by allocation stack, as a collapsible tree.

Given the window's :class:`ViewState`, the panel picks its moment for each opened file
itself (at the OOM when there is one, else at the peak); what it shows is the window's
to set (:meth:`CallTreePanel.set_blocks`): it is built only while its tab is shown.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...model.analysis.calltree import CallNode, call_tree
from ...model.core.snapshot import BlockState
from ...model.core.units import format_bytes, plural
from ...model.view.document import Document
from ...model.view.view_state import ViewState
from ..widgets.lazy_tree import NODE_ROLE, LazyTree
from ..widgets.tables import table_tree

AT_CURSOR = "cursor"
AT_PEAK = "peak"


class CallTreePanel(QWidget):
    """Bytes / count / share per call path of the live blocks at one moment.

    ``nodeSelected(stacks, best_stack)``: the stacks under the clicked node and
    the one holding most of its bytes.
    """

    nodeSelected = Signal(object, int)
    momentChanged = Signal(str)

    def __init__(self, view_state: ViewState | None = None, parent=None) -> None:
        super().__init__(parent)
        self.vs = view_state
        self.doc: Document | None = None
        self.root: CallNode | None = None
        self.stack_bytes: dict[int, int] = {}
        self.moment_text = ""
        self.fold = QCheckBox("fold internals")
        self.fold.setChecked(True)
        self.fold.setToolTip(
            "Keep only your own frames (torch internals, C++ and interpreter "
            "frames folded away); off: every frame but interpreter noise"
        )
        self.at = QComboBox()
        self.at.addItem("at the cursor", AT_CURSOR)
        self.at.addItem("at the peak of allocated", AT_PEAK)
        self.at.setToolTip(
            "Which moment the tree shows: the time-travel cursor, or the peak of "
            "allocated memory in the trace"
        )
        self.caption = QLabel()
        self.caption.setToolTip("The moment shown and the live bytes then")
        self.tree = table_tree(
            ("Call path", "Bytes", "Count", "Share"),
            "Live blocks grouped by the stack that "
            "allocated them, outermost frame first. Click a node: its blocks are highlighted "
            "in the map and the timeline, and its biggest stack shown.",
            {1: 90, 2: 60, 3: 60},
            stretch=0,
        )
        self.lazy = LazyTree(self.tree, self._columns, self._more, self._decorate)
        self.tree.currentItemChanged.connect(self._on_current)
        self.fold.toggled.connect(lambda _on: self.rebuild())
        self.at.currentIndexChanged.connect(self._on_at_changed)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.at)
        top.addWidget(self.fold)
        top.addWidget(self.caption, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 4)
        lay.setSpacing(2)
        lay.addLayout(top)
        lay.addWidget(self.tree, 1)
        self._mask = None
        self._syncing = False
        self._held: dict | None = None  # expansion to re-apply at the next rebuild
        if view_state is not None:
            view_state.events.document.connect(self._on_document)

    def _on_document(self, doc: Document | None) -> None:
        if self.vs.origin != "open":
            return  # (a newer picture keeps the moment the user chose)
        # Who holds memory: at the OOM (the cursor starts there) when there is one,
        # otherwise at the peak of allocated memory.
        self.set_moment(
            AT_CURSOR if doc is None or doc.oom is not None or doc.timeline is None else AT_PEAK
        )

    # -- data
    def moment(self) -> str:
        return self.at.currentData() or AT_CURSOR

    def set_moment(self, moment: str) -> None:
        i = self.at.findData(moment)
        if i >= 0 and i != self.at.currentIndex():
            self._syncing = True
            self.at.setCurrentIndex(i)
            self._syncing = False

    def _on_at_changed(self, _i: int) -> None:
        if not self._syncing:
            self.momentChanged.emit(self.moment())

    def set_blocks(self, doc: Document | None, mask: np.ndarray | None, caption: str = "") -> None:
        """Live blocks of ``doc.snap`` where ``mask`` (per block) holds."""
        self.doc = doc
        self._mask = mask
        self.moment_text = caption
        self.rebuild()

    def rebuild(self) -> None:
        self.tree.clear()
        doc = self.doc
        if doc is None:
            self.root = None
            self.caption.setText("")
            return
        b = doc.snap.blocks
        live = (b.state == BlockState.ALLOCATED) | (b.state == BlockState.PENDING_FREE)
        if self._mask is not None:
            live &= self._mask
        idx = np.flatnonzero(live)
        stacks, sizes = b.stack[idx].astype(np.int64), b.size[idx].astype(np.int64)
        self.stack_bytes = {}
        if len(idx):
            ids, inv = np.unique(stacks, return_inverse=True)
            per = np.bincount(inv, weights=sizes.astype(np.float64))
            self.stack_bytes = dict(zip(ids.tolist(), per.astype(np.int64).tolist()))
        self.root = call_tree(doc.snap, stacks, sizes, doc.categories, fold=self.fold.isChecked())
        total = max(self.root.bytes, 1)
        self._total = total
        self.caption.setText(
            f"{self.moment_text}: {format_bytes(self.root.bytes)} live in "
            f"{plural(self.root.count, 'block')}"
            if self.moment_text
            else ""
        )
        item = self._item(self.root, None)
        self.tree.addTopLevelItem(item)
        held, self._held = self._held, None
        if held is None or not self._apply_state(held):
            self._expand_default(item)

    # -- keeping the user's tree across a newer document (live attach)
    def hold_state(self) -> None:
        """Remember the expanded nodes and the current one (by their call paths) and
        re-apply them at the next rebuild, whenever that is (the tree is only built
        while shown).  Cheap: only expanded items are visited."""
        if self._held is not None or not self.tree.topLevelItemCount():
            return
        expanded: list[tuple[str, ...]] = []
        current = self.tree.currentItem()
        cur_path: tuple[str, ...] | None = None

        def rec(item, path):
            nonlocal cur_path
            path = (*path, item.text(0))
            if item is current:
                cur_path = path
            if item.isExpanded():
                expanded.append(path)
                for i in range(item.childCount()):
                    rec(item.child(i), path)

        for i in range(self.tree.topLevelItemCount()):
            rec(self.tree.topLevelItem(i), ())
        self._held = {
            "expanded": expanded,
            "current": cur_path,
            "scroll": self.tree.verticalScrollBar().value(),
        }

    def _apply_state(self, held: dict) -> bool:
        """Expand the held paths that still exist; False if none does."""
        by_path: dict[tuple[str, ...], QTreeWidgetItem] = {}
        top = self.tree.topLevelItem(0)
        if top is None:
            return False
        by_path[(top.text(0),)] = top
        done = 0
        for path in sorted(held["expanded"], key=len):  # parents first
            item = by_path.get(path)
            if item is None:
                continue
            item.setExpanded(True)
            self._fill_children(item)
            done += 1
            for i in range(item.childCount()):
                child = item.child(i)
                by_path[(*path, child.text(0))] = child
        cur = by_path.get(held["current"]) if held["current"] else None
        if cur is not None:
            self._syncing = True  # no nodeSelected: the window restores its highlight
            self.tree.blockSignals(True)
            self.tree.setCurrentItem(cur)
            self.tree.blockSignals(False)
            self._syncing = False
        self.tree.verticalScrollBar().setValue(held["scroll"])
        return done > 0 or not held["expanded"]  # all collapsed is a state too

    def current_stacks(self) -> list[int] | None:
        """The stacks under the current node (None: no node, or the root)."""
        item = self.tree.currentItem()
        node = item.data(0, NODE_ROLE) if item is not None else None
        if node is None or node is self.root:
            return None
        return list(node.stacks)

    def _columns(self, node: CallNode) -> list[str]:
        return [
            node.label,
            format_bytes(node.bytes),
            f"{node.count:,}",
            f"{100.0 * node.bytes / self._total:.1f}%",
        ]

    @staticmethod
    def _more(rest: list) -> list[str]:
        return [
            f"… {len(rest):,} more",
            format_bytes(sum(n.bytes for n in rest)),
            f"{sum(n.count for n in rest):,}",
            "",
        ]

    @staticmethod
    def _decorate(item: QTreeWidgetItem, node: CallNode) -> None:
        item.setToolTip(1, f"{node.bytes:,} bytes")

    def _item(self, node: CallNode, parent: QTreeWidgetItem | None) -> QTreeWidgetItem:
        return self.lazy.item(node, parent)

    def _fill_children(self, item: QTreeWidgetItem) -> None:
        self.lazy.fill_children(item)

    def _expand_default(self, item: QTreeWidgetItem) -> None:
        """Expand down the heavy path to the first node that branches into big shares."""
        total = self._total
        for _ in range(64):
            item.setExpanded(True)
            self._fill_children(item)
            node: CallNode = item.data(0, NODE_ROLE)
            kids = node.sorted_children() if node is not None else []
            if not kids or not item.childCount():
                break
            big = [k for k in kids if k.bytes >= 0.1 * total]
            if len(kids) > 1 and len(big) != 1:
                break  # a branching node: its children are the answer
            nxt = item.child(0)
            if nxt.data(0, NODE_ROLE) is None or kids[0].bytes < 0.3 * total:
                break
            item = nxt

    # -- queries
    def labels(self) -> list[str]:
        """Labels of every node built so far (expanded or not), depth first."""
        return [n.label for n in self.root.walk()] if self.root is not None else []

    def visible_labels(self) -> list[str]:
        out = []

        def rec(item):
            out.append(item.text(0))
            if item.isExpanded():
                for i in range(item.childCount()):
                    rec(item.child(i))

        for i in range(self.tree.topLevelItemCount()):
            rec(self.tree.topLevelItem(i))
        return out

    def find_item(self, text: str) -> QTreeWidgetItem | None:
        """The first built item whose label contains ``text`` (breadth first)."""
        queue = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        while queue:
            item = queue.pop(0)
            if text in item.text(0):
                return item
            queue.extend(item.child(i) for i in range(item.childCount()))
        return None

    def _on_current(self, current: QTreeWidgetItem | None, _prev) -> None:
        if current is None:
            return
        node: CallNode = current.data(0, NODE_ROLE)
        if node is None:
            return
        stacks = list(node.stacks)
        best = max(stacks, key=lambda s: self.stack_bytes.get(s, 0)) if stacks else -1
        self.nodeSelected.emit(stacks, int(best))


def node_facts(node: CallNode) -> str:
    """The stack panel's heading for a call tree node: its frame, bytes, blocks, stacks."""
    label = node.label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        f"<b>call tree</b>: <tt>{label}</tt> · {format_bytes(node.bytes)} "
        f"in {plural(node.count, 'block')} · {plural(len(node.stacks), 'stack')}<br>"
        "The stack holding most of these bytes; its blocks are highlighted."
    )
