"""The stack panel: facts and call stack of the selected block.

Under the allocation stack, what newer torch recorded about the allocation
(:mod:`...model.analysis.alloc_details`): the forward-pass stack of an allocation made in
backward, FX nodes and the model code they came from, annotations, user
metadata and compile context.  The panel only draws those lines.
"""

from __future__ import annotations

import linecache
import os

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QFont, QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ...model.analysis.alloc_details import (
    AllocationDetails,
    DetailLine,
    detail_lines,
    fx_lines,
    hidden_fx_lines,
)
from ...model.core import frames as fr
from ...model.core.snapshot import BlockState
from ...model.core.units import format_address, format_bytes
from ...model.view.document import Document, pool_label, stream_label
from ...model.view.view_state import ViewState

CONTEXT_LINES = 4


class StackPanel(QWidget):
    """Block facts, then its frames: your code first; torch/C++ on request.

    ``view_state``: the main window's :class:`ViewState`, whose documents and moments
    the panel follows (a shown stack stays at another moment of the same file); None:
    the caller sets the document (the Diff window)."""

    fileOpened = Signal(str, int)

    # Tests turn this off so that double-clicks never launch an editor.
    open_externally = True

    def __init__(self, view_state: ViewState | None = None, parent=None) -> None:
        super().__init__(parent)
        self.vs = view_state
        self.doc: Document | None = None
        self.block = -1
        self.custom: tuple[str, int] | None = None
        self.views: list[fr.FrameView] = []
        self.details: AllocationDetails | None = None  # of the allocation shown
        self.detail_lines: list[DetailLine] = []  # the sections drawn under the stack
        self.row_frames: list[fr.FrameView | None] = []  # per list row: its frame, if any
        self.facts = QLabel("Click a block in the map or a row in the table.")
        self.facts.setWordWrap(True)
        self.facts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.facts.setToolTip("The selected block")
        self.show_torch = QCheckBox("torch internals")
        self.show_torch.setToolTip("Also show torch's own Python frames")
        self.show_cpp = QCheckBox("C++ frames")
        self.show_cpp.setToolTip("Also show native (C++) frames")
        self.show_all = QCheckBox("all frames")
        self.show_all.setToolTip("Show every frame, interpreter internals included")
        for box in (self.show_torch, self.show_cpp, self.show_all):
            box.toggled.connect(self.refresh)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the shown frames as text (Ctrl+C in the main window)")
        self.copy_button.clicked.connect(self.copy)
        self.frames = QListWidget()
        self.frames.setToolTip(
            "Innermost frame first. Double-click a frame whose file exists "
            "here to preview and open it."
        )
        self.frames.setUniformItemSizes(True)
        self.frames.itemDoubleClicked.connect(self._on_double_click)
        self.frames.currentRowChanged.connect(self._preview_row)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.preview.setFont(mono)
        self.preview.setPlaceholderText("Source preview (files present on this machine)")
        self.preview.setToolTip("Source lines around the selected frame, when the file exists here")
        self.preview.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)

        opts = QHBoxLayout()
        opts.setContentsMargins(0, 0, 0, 0)
        opts.addWidget(QLabel("Stack"))
        opts.addWidget(self.show_torch)
        opts.addWidget(self.show_cpp)
        opts.addWidget(self.show_all)
        opts.addStretch(1)
        opts.addWidget(self.copy_button)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.frames)
        split.addWidget(self.preview)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(True)
        self.splitter = split
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 4)
        lay.setSpacing(2)
        lay.addWidget(self.facts)
        lay.addLayout(opts)
        lay.addWidget(split, 1)
        self.copy_button.setEnabled(False)
        if view_state is not None:
            view_state.events.document.connect(self._on_document)
            view_state.events.moment.connect(self._on_moment)

    def _on_document(self, doc: Document | None) -> None:
        # (a newer picture of the same process keeps the stack shown)
        self.set_document(doc, keep=self.vs.origin == "replace")

    def _on_moment(self, keep_view: bool) -> None:
        if self.vs.view_doc is not None:
            self.set_document(self.vs.view_doc, keep=keep_view)

    def set_document(self, doc: Document | None, keep: bool = False) -> None:
        """``keep``: the same file at another moment; a shown stack stays."""
        self.doc = doc
        if keep and self.custom is not None:
            self.refresh()
            return
        self.show_block(-1)

    def show_block(self, block: int, details: AllocationDetails | None = None) -> None:
        """``details``: what newer torch recorded about the block's allocation."""
        self.block = int(block)
        self.custom = None
        self.details = details
        self.refresh()

    def show_stack(self, stack: int, facts: str, details: AllocationDetails | None = None) -> None:
        """Show any stack (an allocation of the timeline, a call-tree node) with ``facts``
        (``details``: of the allocation, drawn under its stack)."""
        self.block = -1
        self.custom = (facts, int(stack))
        self.details = details
        self.refresh()

    def refresh(self) -> None:
        self.frames.clear()
        self.preview.clear()
        self.views = []
        self.detail_lines = []
        self.row_frames = []
        subject = self._subject()
        if subject is None:
            self.facts.setText("Click a block in the map or a row in the table.")
            self.copy_button.setEnabled(False)
            return
        facts, stack = subject
        self.facts.setText(facts)
        doc, snap = self.doc, self.doc.snap
        all_frames = self.show_all.isChecked()
        self.views = fr.stack_views(
            snap,
            stack,
            doc.categories,
            show_torch=self.show_torch.isChecked() or all_frames,
            show_cpp=self.show_cpp.isChecked() or all_frames,
            show_noise=all_frames,
        )
        self.detail_lines = detail_lines(snap, self.details) if self.details is not None else []
        bold = QFont(self.frames.font())
        bold.setBold(True)
        if stack < 0 or not self.views:
            item = QListWidgetItem("(no stack recorded)" if stack < 0 else "(no frames)")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self._add(item, None)
        for v in self.views:
            item = QListWidgetItem(v.short)
            item.setToolTip(v.full)
            if v.category == fr.CAT_USER:
                item.setFont(bold)
            else:
                item.setForeground(self.palette().placeholderText())
            self._add(item, v)
            for line in fx_lines(snap, v.frame_id):  # a frame of FX-generated code
                self._add_detail(line, bold)
        hidden = (
            hidden_fx_lines(snap, stack, {v.frame_id for v in self.views}) if stack >= 0 else []
        )
        self.detail_lines = self.detail_lines + hidden
        for line in self.detail_lines:
            self._add_detail(line, bold)
        self.copy_button.setEnabled(bool(self.views or self.detail_lines))

    def _add(self, item: QListWidgetItem, view: fr.FrameView | None) -> None:
        self.frames.addItem(item)
        self.row_frames.append(view)

    def _add_detail(self, line: DetailLine, bold: QFont) -> None:
        """One line of :func:`detail_lines` / :func:`fx_lines`: headings bold, FX and
        model code indented, forward frames like frames (previewable)."""
        view = None
        indent = {"heading": "", "frame": "  ", "fx": "      ", "source": "        "}.get(
            line.kind, "  "
        )
        item = QListWidgetItem(indent + line.text)
        item.setToolTip(line.tip or line.text)
        if line.kind == "heading":
            item.setFont(bold)
            if self.frames.count():
                spacer = QListWidgetItem("")
                spacer.setFlags(Qt.ItemFlag.NoItemFlags)
                self._add(spacer, None)
        elif line.kind == "frame" and line.frame_id >= 0:
            snap = self.doc.snap
            view = fr.frame_view(
                snap.frames, line.frame_id, int(self.doc.categories[line.frame_id])
            )
        elif line.kind in ("fx", "source"):
            item.setForeground(self.palette().placeholderText())
        self._add(item, view)

    def detail_texts(self) -> list[str]:
        """The lines drawn under the stack (headings, forward frames, FX, annotations…)."""
        return [line.text for line in self.detail_lines]

    def _subject(self) -> tuple[str, int] | None:
        """(facts as rich text, stack id) of what the panel shows.

        The selected block; with nothing selected in a snapshot that ran out of
        memory, the request that failed, so its line of code is visible at once.
        """
        doc, b = self.doc, self.block
        if doc is None:
            return None
        if self.custom is not None:
            return self.custom
        if b >= 0:
            return self._block_facts(b), int(doc.snap.blocks.stack[b])
        vs = self.vs
        # With a view state, the OOM of a device it shows (another device's is not this
        # view's), named by its device and event; without one (the Diff window's), the
        # document's.
        oom = vs.oom_in_view() if vs is not None else doc.oom
        if oom is None:
            return None
        where = f" ({_html(vs.oom_place(oom))})" if vs is not None else f" (device {oom.device})"
        facts = (
            f"<b>the request that ran out of memory</b>{where}: "
            f"{format_bytes(oom.requested_bytes)} "
            f"({oom.pool_kind} pool, {stream_label(oom.stream)})<br>"
            "Click a block in the map or a row in the table to see its stack."
        )
        return facts, int(doc.snap.trace.stack[oom.event_index])

    def _block_facts(self, b: int) -> str:
        snap = self.doc.snap
        blocks, segs = snap.blocks, snap.segments
        s = int(blocks.segment[b])
        state = BlockState(int(blocks.state[b]))
        size, req = int(blocks.size[b]), int(blocks.requested_size[b])
        active = state in (BlockState.ALLOCATED, BlockState.PENDING_FREE)
        head = (
            f"<b>{state.label}</b> <tt>{format_address(blocks.address[b])}</tt> · "
            f"{format_bytes(size)}"
        )
        if active:
            head += f" · requested {format_bytes(req)} · waste {format_bytes(size - req)}"
        seg = (
            f"segment <tt>{format_address(segs.address[s])}</tt> "
            f"{format_bytes(int(segs.total_size[s]))} "
            f"({'small' if segs.is_small[s] else 'large'}"
            f"{', expandable' if segs.is_expandable[s] else ''}), "
            f"{stream_label(int(segs.stream[s]))}, {pool_label(snap.pools[int(segs.pool[s])])}"
        )
        # Which device and instant the block is of: the map may sum devices, the cursor
        # moves through one device's trace.
        when = f" · {self.vs.instant_text()}" if self.vs is not None else ""
        return f"{head}<br>{seg}<br>device {int(segs.device[s])}{when}"

    def frame_texts(self) -> list[str]:
        return [v.short for v in self.views]

    def text(self) -> str:
        text = fr.format_stack(self.views)
        if self.detail_lines:
            text += "\n\n" + "\n".join(
                ("" if ln.kind == "heading" else "  ") + (ln.tip if ln.kind == "frame" else ln.text)
                for ln in self.detail_lines
            )
        return text

    def copy(self) -> None:
        if self.views or self.detail_lines:
            QGuiApplication.clipboard().setText(self.text())

    def _preview_row(self, row: int) -> None:
        if 0 <= row < len(self.row_frames) and self.row_frames[row] is not None:
            self.show_source(self.row_frames[row])

    def show_source(self, view: fr.FrameView) -> bool:
        """Show lines around ``view.line`` if its file exists here."""
        path = view.filename
        if not path or not os.path.isfile(path) or view.line <= 0:
            self.preview.setPlainText("" if not path else f"{path}: not found on this machine")
            return False
        lo = max(1, view.line - CONTEXT_LINES)
        out = []
        for n in range(lo, view.line + CONTEXT_LINES + 1):
            line = linecache.getline(path, n)
            if not line and n > view.line:
                break
            mark = "➤" if n == view.line else " "
            out.append(f"{mark}{n:5d}  {line.rstrip()}")
        self.preview.setPlainText("\n".join(out))
        return True

    def _on_double_click(self, item: QListWidgetItem) -> None:
        row = self.frames.row(item)
        if not 0 <= row < len(self.row_frames) or self.row_frames[row] is None:
            return
        view = self.row_frames[row]
        if self.show_source(view):
            self.fileOpened.emit(view.filename, view.line)
            if self.open_externally:
                QDesktopServices.openUrl(QUrl.fromLocalFile(view.filename))


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
