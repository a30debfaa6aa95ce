"""The summary header: memory figures of the selection and the OOM verdict.

Given the window's :class:`ViewState`, the header subscribes itself: a new document
sets its banner, integrity note and the capture's facts; each moment its figures,
what they count, whether they are exact there and the banner for the OOM at the cursor.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ...model.analysis.figures import MemoryStats, memory_stats
from ...model.analysis.oom import outside_oom
from ...model.core.units import format_bytes
from ...model.view.document import Document
from ...model.view.exactness import NOT_EXACT_SIGN, Mark, figures_mark, oom_mark
from ...model.view.figure_words import FIGURE_TITLES, figure_text, oom_where
from ...model.view.view_state import ViewState
from ..widgets import theme

# key -> (title, tooltip).  Each tooltip says which torch.cuda.memory_stats()
# counter the figure equals (".all.current" of the same instant).
FIGURES: dict[str, tuple[str, str]] = {
    "reserved_bytes": (
        FIGURE_TITLES["reserved_bytes"],
        "Memory the caching allocator holds in segments (cudaMalloc'd blocks of device memory)."
        "\nEquals torch.cuda.memory_stats()['reserved_bytes.all.current'] "
        "(torch.cuda.memory_reserved()).",
    ),
    "allocated_bytes": (
        FIGURE_TITLES["allocated_bytes"],
        "Bytes in blocks handed out to live tensors (block sizes, after rounding)."
        "\nEquals memory_stats()['allocated_bytes.all.current'] (torch.cuda.memory_allocated()).",
    ),
    "active_bytes": (
        FIGURE_TITLES["active_bytes"],
        "Allocated plus pending-free blocks: memory that cannot be reused right now."
        "\nEquals memory_stats()['active_bytes.all.current'].",
    ),
    "requested_bytes": (
        FIGURE_TITLES["requested_bytes"],
        "What the callers asked for, before the allocator rounded each request up."
        "\nEquals memory_stats()['requested_bytes.all.current'].",
    ),
    "free_bytes": (
        FIGURE_TITLES["free_bytes"],
        "Reserved but unallocated: free gaps inside segments. PyTorch keeps them cached; "
        "a request can only use ONE gap, so many small gaps do not add up."
        "\nThis is the 'reserved by PyTorch but unallocated' of the OOM message; for split "
        "non-expandable segments it equals memory_stats()['inactive_split_bytes.all.current'].",
    ),
    "largest_free_block_bytes": (
        FIGURE_TITLES["largest_free_block_bytes"],
        "The biggest single free gap. A request larger than this needs a new segment "
        "(cudaMalloc); if that fails, CUDA out of memory.\nNo memory_stats() counter: "
        "computed from the snapshot's blocks.",
    ),
    "fragmentation": (
        FIGURE_TITLES["fragmentation"],
        "1 - largest free block / free in segments: 0% when all free memory is one gap, "
        "near 100% when it is scattered in many small gaps.\nComputed from the snapshot.",
    ),
    "segment_count": (
        FIGURE_TITLES["segment_count"],
        "Number of segments (cudaMalloc calls the cache holds)."
        "\nEquals memory_stats()['segment.all.current'] (expandable segments are counted "
        "separately, as the allocator does).",
    ),
    "rounding_waste_bytes": (
        FIGURE_TITLES["rounding_waste_bytes"],
        "Active bytes minus requested bytes: the tails the allocator adds when it rounds "
        "requests up (512 B multiples, or whole blocks it chose not to split)."
        "\nEquals memory_stats()['active_bytes.all.current'] - ['requested_bytes.all.current'].",
    ),
    "pending_free_bytes": (
        FIGURE_TITLES["pending_free_bytes"],
        "Blocks freed by Python but still in use by another stream (record_stream): "
        "not reusable until those streams' events complete."
        "\nEquals memory_stats()['active_bytes.all.current'] - ['allocated_bytes.all.current'].",
    ),
}


class SummaryHeader(QWidget):
    """Figures in a grid; a red OOM banner above them when there is an OOM.

    ``view_state``: the window's :class:`ViewState`, whose ``document`` and ``moment``
    the header draws (None: the caller sets what it shows)."""

    def __init__(self, view_state: ViewState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.vs = view_state
        self.stats: MemoryStats | None = None
        self.banner = QLabel()
        self.banner.setObjectName("oomBanner")
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.setStyleSheet(
            f"QLabel#oomBanner {{ background: {theme.OOM_RED}; color: white; "
            "font-weight: bold; padding: 6px 10px; border-radius: 4px; }"
        )
        self.banner.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.banner.hide()
        # A recording that is itself incomplete (an overflowed trace ring): one line.
        self.integrity = QLabel()
        self.integrity.setObjectName("integrityNote")
        self.integrity.setWordWrap(True)
        self.integrity.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.integrity.setStyleSheet(
            f"QLabel#integrityNote {{ color: {theme.gap_outline().name()}; font-size: 8pt; }}"
        )
        self.integrity.hide()
        self.facts = QLabel()
        self.facts.setWordWrap(True)
        self.facts.setToolTip("From the capture's JSON sidecar next to the snapshot")
        self.facts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.values: dict[str, QLabel] = {}
        self.titles: dict[str, QLabel] = {}
        grid_frame = QFrame()
        grid_frame.setFrameShape(QFrame.Shape.StyledPanel)
        grid = QGridLayout(grid_frame)
        grid.setContentsMargins(8, 4, 8, 4)
        grid.setHorizontalSpacing(18)
        grid.setVerticalSpacing(0)
        for i, (key, (title, tip)) in enumerate(FIGURES.items()):
            t = QLabel(title)
            t.setObjectName("figureCaption")  # muted, readable: _apply_caption_colors
            v = QLabel("–")
            v.setStyleSheet("font-size: 12pt; font-weight: 600;")
            v.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            for w in (t, v):
                w.setToolTip(tip)
            grid.addWidget(t, 0, i)
            grid.addWidget(v, 1, i)
            self.values[key] = v
            self.titles[key] = t
        grid.setColumnStretch(len(FIGURES), 1)
        self.grid = grid
        self.per_row = len(FIGURES)  # figures per line: two lines when one does not fit
        # Which instant the figures are of, where that is not obvious (live attach):
        # a line of its own under the figures, which leave no room beside them.
        self.scope = QLabel()  # which device(s) and instant the figures are of
        self.scope.setObjectName("figuresScope")
        self.scope.setStyleSheet("font-size: 8pt;")
        self.scope.setToolTip(
            "What the figures above count: the selected device(s), pool, "
            "stream and segment kind, after the timeline cursor's event"
        )
        self.scope.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.scope.hide()
        # The figures at a moment inside a stretch of the trace that is not exact (the
        # replay could not follow the allocator there): a tag beside the scope line, each
        # value prefixed with ≈; the reason as tooltip.
        self.inexact: Mark | None = None
        self._banner_tip: list[str] = []  # the last OOM's tooltip (set_document)
        self.exactness = QLabel()
        self.exactness.setObjectName("figuresNotExact")
        self.exactness.setStyleSheet(
            "QLabel#figuresNotExact { font-size: 8pt; font-weight: bold; "
            f"color: {theme.gap_outline().name()}; }}"
        )
        self.exactness.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        self.exactness.hide()
        self.source = QLabel()
        self.source.hide()
        self._apply_caption_colors()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 0)
        lay.setSpacing(4)
        lay.addWidget(self.banner)
        lay.addWidget(self.integrity)
        lay.addWidget(grid_frame)
        line = QHBoxLayout()  # what the figures count, and the capture's facts: one line
        line.setContentsMargins(0, 0, 0, 0)
        line.setSpacing(16)
        line.addWidget(self.scope)
        line.addWidget(self.exactness)  # right after the scope it qualifies
        self.scope.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        line.addWidget(self.facts, 1)
        line.addStretch(0)  # (the facts hidden: the scope and its tag stay on the left)
        lay.addLayout(line)
        lay.addWidget(self.source)
        self.facts.hide()
        if view_state is not None:
            view_state.events.document.connect(self._on_document)
            view_state.events.moment.connect(self._on_moment)

    def captions(self) -> list[QLabel]:
        """The muted captions: the figures' titles and the source line."""
        return [*self.titles.values(), self.source]

    def _apply_caption_colors(self) -> None:
        # Not a disabled label's grey (1.6:1 on the light palette): a muted colour with a
        # contrast of at least 4.5:1 on the window's background, light or dark.
        style = theme.caption_style()
        for label in self.captions():
            label.setStyleSheet(style)

    def changeEvent(self, event) -> None:
        if event.type() in (
            QEvent.Type.PaletteChange,
            QEvent.Type.ApplicationPaletteChange,
        ) and hasattr(self, "source"):  # (built)
            self._apply_caption_colors()
        super().changeEvent(event)

    # ------------------------------------------------------------------ the view state
    def _on_document(self, doc: Document | None) -> None:
        vs = self.vs
        self.set_document(None if vs.host_shown else doc)
        self.set_exactness(figures_mark(vs))

    def _on_moment(self, _keep_view: bool) -> None:
        vs = self.vs
        doc = vs.view_doc
        if doc is None:
            self.set_stats(None)
        else:
            self.set_stats(memory_stats(doc.snap, vs.selection))
            self.set_scope(vs.scope_text())
            self._show_oom_at_cursor()
        # Not exact inside an untrusted stretch of the trace (figures_mark says why).
        self.set_exactness(figures_mark(vs))

    def _show_oom_at_cursor(self) -> None:
        """The OOM banner for the moment (kept as it is without an OOM)."""
        vs = self.vs
        doc = vs.doc
        if doc is None or doc.oom is None or vs.cursor_device is None:
            return
        m = vs.oom_marks()
        last = doc.oom
        self.set_moment(doc, m.here, m.number, m.count, vs.oom_event(last), vs.oom_hint(last))

    def add_beside_banner(self, widget: QWidget) -> None:
        """Put ``widget`` at the right of the OOM banner, shown exactly while the banner
        is (the Diagnosis panel's "What would fix it?")."""
        lay = self.layout()
        idx = lay.indexOf(self.banner)
        lay.removeWidget(self.banner)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.banner, 1)
        row.addWidget(widget, 0, Qt.AlignmentFlag.AlignTop)
        lay.insertLayout(idx, row)
        widget.setVisible(not self.banner.isHidden())
        _FollowVisibility(self.banner, widget)

    # ------------------------------------------------------------------ drawing
    def set_stats(self, stats: MemoryStats | None) -> None:
        self.stats = stats
        sign = f"{NOT_EXACT_SIGN} " if self.inexact is not None else ""
        for key, label in self.values.items():
            label.setText("–" if stats is None else sign + figure_text(stats, key))
        self._reflow()  # longer figures may no longer fit on one line
        if stats is not None:
            frag = self.values["fragmentation"]
            frag.setStyleSheet(
                "font-size: 12pt; font-weight: 600;"
                + (
                    f" color: {theme.gap_outline().name()};"
                    if stats.fragmentation >= 0.5 and stats.free_bytes
                    else ""
                )
            )
            self.values["free_bytes"].setToolTip(
                FIGURES["free_bytes"][1]
                + f"\ninactive_split_bytes here: {format_bytes(stats.inactive_split_bytes)}"
                + (
                    f"\nfree in expandable segments: {format_bytes(stats.expandable_free_bytes)}"
                    if stats.expandable_segment_count
                    else ""
                )
            )

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._reflow()

    def _reflow(self) -> None:
        """One line of figures where it fits, else two: a figure is never cut off
        (a narrow window, or a live window's dock beside it)."""
        grid = self.grid
        widths = [
            max(self.titles[k].sizeHint().width(), self.values[k].sizeHint().width())
            for k in FIGURES
        ]
        m = grid.contentsMargins()
        need = (
            sum(widths)
            + grid.horizontalSpacing() * (len(widths) - 1)
            + m.left()
            + m.right()
            + 2 * 6
            + 4
        )  # the header's margins, the frame
        n = len(FIGURES)
        per_row = n if self.width() >= need or not self.width() else (n + 1) // 2
        if per_row == self.per_row:
            return
        self.per_row = per_row
        for c in range(n + 1):
            grid.setColumnStretch(c, 0)
        for i, key in enumerate(FIGURES):
            r, c = divmod(i, per_row)
            grid.addWidget(self.titles[key], 2 * r, c)  # addWidget moves a managed widget
            grid.addWidget(self.values[key], 2 * r + 1, c)
        grid.setColumnStretch(per_row, 1)

    def set_exactness(self, mark: Mark | None) -> None:
        """Whether the figures shown are exact at their moment (None: exact), from
        :func:`~...model.view.exactness.figures_mark`."""
        if mark == self.inexact:
            return
        self.inexact = mark
        self.exactness.setText(mark.text if mark else "")
        self.exactness.setToolTip(mark.tip if mark else "")
        self.exactness.setVisible(mark is not None)
        for key, label in self.values.items():
            label.setToolTip(FIGURES[key][1] + (f"\n\n{NOT_EXACT_SIGN} {mark.tip}" if mark else ""))
        if self.stats is not None:
            self.set_stats(self.stats)

    def exactness_text(self) -> str:
        """The figures' not-exact tag, or "" when they are exact."""
        return "" if self.exactness.isHidden() else self.exactness.text()

    def _set_banner(self, text: str, oom, tip: list[str] | None = None) -> None:
        """The banner's text for ``oom``, with its not-exact mark when it has one."""
        mark = oom_mark(oom)
        self.banner.setText(text + (f" \u2014 {mark.text}" if mark else ""))
        tip = list(tip or [])
        if mark:
            tip.append(f"\n{mark.tip}")
        self.banner.setToolTip("\n".join(tip))

    def set_scope(self, text: str) -> None:
        """The line under the figures saying what they count ("" hides it)."""
        self.scope.setText(text)
        self.scope.setVisible(bool(text))

    def set_source(self, text: str, tip: str = "") -> None:
        """A small muted line beside the figures saying what instant they are of
        ("" hides it)."""
        self.source.setText(text)
        self.source.setToolTip(tip)
        self.source.setVisible(bool(text))

    def set_document(self, doc: Document | None) -> None:
        oom = doc.oom if doc is not None else None
        # An OOM outside the allocator (cuBLAS, NCCL, ...) has no trace event: the sidecar's.
        outside = outside_oom(doc.snap) if doc is not None and oom is None else None
        if outside is not None:
            tip = [
                "Why the program died: an allocation outside PyTorch's allocator failed "
                "(the capture's record of the error and of the whole GPU at that moment)."
            ]
            if outside.where:
                tip.append(f"\nRaised at {outside.where}")
            message = (doc.snap.sidecar or {}).get("oom_message")
            if message:
                tip.append(f"\nThe error:\n{message}")
            self._banner_tip = tip
            dev = f"device {outside.device}, " if outside.device is not None else ""
            self._set_banner(
                f"CUDA out of memory outside PyTorch's allocator ({dev}"
                f"{outside.library}): {outside.verdict}",
                None,
                tip,
            )
            self.banner.show()
        elif oom is None:
            self.banner.hide()
            self.banner.setText("")
            self.banner.setToolTip("")
        else:
            message = (doc.snap.sidecar or {}).get("oom_message")
            tip = [
                "Why the last OOM happened, from the snapshot's blocks and the allocator's "
                "OOM record."
            ]
            if message:
                tip.append(f"\nPyTorch said:\n{message}")
            self._banner_tip = tip
            self._set_banner(f"CUDA out of memory ({oom_where(oom)}): {oom.verdict}", oom, tip)
            self.banner.show()
        note = doc.snap.trace_integrity_note() if doc is not None else None
        self.integrity.setText(f"\u26a0 {note[0].upper()}{note[1:]}" if note else "")
        self.integrity.setToolTip(
            "The recording itself is incomplete: the allocator's trace ring "
            "(_record_memory_history(max_entries=...)) kept only its newest events. The "
            "timeline's left edge is marked; record with a larger max_entries to see the "
            "whole run."
            if note
            else ""
        )
        self.integrity.setVisible(bool(note))
        facts = []
        side = (doc.snap.sidecar or {}) if doc is not None else {}
        if side.get("torch"):
            facts.append(f"torch {side['torch']}")
        if side.get("gpu"):
            facts.append(str(side["gpu"]))
        if side.get("alloc_conf"):
            facts.append(f"PYTORCH_CUDA_ALLOC_CONF={side['alloc_conf']}")
        if side.get("reason"):
            facts.append(f"captured: {side['reason']}")
        self.facts.setText("  ·  ".join(str(f) for f in facts))
        self.facts.setVisible(bool(facts))
        if doc is None:
            self.set_stats(None)

    def set_moment(
        self,
        doc: Document | None,
        oom_here,
        number: int = 0,
        total: int = 0,
        last_event: int = -1,
        hint: str = "Ctrl+J jumps there",
    ) -> None:
        """The banner for one moment: the OOM at the cursor if there is one, else
        the file's last OOM, said to be elsewhere: at ``last_event`` of its device's
        trace, ``hint`` saying how to get there (another device's: select it)."""
        last = doc.oom if doc is not None else None
        if last is None:
            return
        many = f"OOM {number} of {total} · " if total > 1 and oom_here is not None else ""
        tip = self._banner_tip
        if oom_here is not None:
            self._set_banner(
                f"{many}CUDA out of memory ({oom_where(oom_here)}): {oom_here.verdict}",
                oom_here,
                tip,
            )
        else:
            at = f" at event {last_event:,}" if last_event >= 0 else ""
            self._set_banner(
                f"CUDA out of memory{at} ({oom_where(last)}; {hint}): {last.verdict}", last, tip
            )
        self.banner.show()

    def integrity_text(self) -> str:
        """The integrity warning's text, or "" when none is shown."""
        return "" if self.integrity.isHidden() else self.integrity.text()

    def oom_text(self) -> str:
        """The banner's text, or "" when no banner is shown."""
        return "" if self.banner.isHidden() else self.banner.text()


class _FollowVisibility(QObject):
    """Shows ``follower`` exactly while ``target`` is shown (a widget beside the banner)."""

    def __init__(self, target: QWidget, follower: QWidget) -> None:
        super().__init__(follower)
        self.follower = follower
        target.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:
        kind = event.type()
        if kind == QEvent.Type.ShowToParent:
            self.follower.setVisible(True)
        elif kind == QEvent.Type.HideToParent:
            self.follower.setVisible(False)
        return False
