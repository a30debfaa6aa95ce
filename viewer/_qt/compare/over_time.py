"""The Diff window's Over-time view: two recordings of one program on one time axis.

It only draws :mod:`vramscope.viewer.model.reports.over_time`: the alignment (and the
category split of each side, its curves and its allocation sites) is computed there, in
a :class:`~..widgets.jobs.Job` with progress and Cancel; then the chart
(:mod:`.over_time_chart`) shows both runs' curves on the aligned axis, one cursor
time-travels A's and B's segment maps together, a table gives the categories at the
cursor on each side, and the sites table (live bytes at each side's peak by allocation
site) highlights a site's blocks on both maps.  Where the files show the change made
between them (``Alignment.detected_change``), a second job holds ``advise``'s
prediction on A against B's real peak.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidgetItem,
    QWidget,
)

from ...model.core.progress import Progress
from ...model.core.units import format_bytes, plural
from ...model.reports import aligned
from ...model.reports.diff import signed_bytes
from ...model.reports.over_time import OverTime, compute, prediction_text
from ...model.view.document import Document
from ..segment_map import SegmentMapView
from ..widgets import theme
from ..widgets.category_colors import color as category_color
from ..widgets.jobs import Job
from ..widgets.layouts import column
from ..widgets.tables import table_tree
from .common import SORT_ROLE, LinkedMaps, SortItem, delta_color
from .over_time_chart import A_COLOR, B_COLOR, AlignedChart

HIGHLIGHT_SITE = "selected site"  # the maps' legends: a site's blocks
SITE_COLUMNS = ("Site", "Status", "A", "B", "Change")
CATEGORY_COLUMNS = ("Category", "A", "B", "B − A")
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


def _swatch(c: QColor) -> QIcon:
    pm = QPixmap(10, 10)
    pm.fill(c)
    return QIcon(pm)


class OverTimePane(QWidget):
    """The Over-time view of two documents (:meth:`set_documents`, then :meth:`start`)."""

    finished = Signal(str)  # "done" | "failed" | "cancelled" (of the alignment)
    predicted = Signal()  # the prediction line is there (or says there is none)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc_a: Document | None = None
        self.doc_b: Document | None = None
        self.result: OverTime | None = None
        self.job: Job | None = None
        self.prediction_job: Job | None = None
        self.site_rows: list[aligned.SiteDelta] = []
        self._fitted = False
        self._events: tuple[int, int] = (-1, -1)
        self._tried = False  # an alignment was started for these documents

        status = self._build_status()
        top = self._build_chart()
        maps_box = self._build_maps()
        right = self._build_tables()
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(maps_box)
        bottom.addWidget(right)
        bottom.setStretchFactor(0, 3)
        bottom.setStretchFactor(1, 1)
        bottom.setSizes([860, 580])
        self.body = QSplitter(Qt.Orientation.Vertical)
        self.body.addWidget(top)
        self.body.addWidget(bottom)
        self.body.setSizes([300, 520])
        self.body.hide()
        column(self, status, (self.body, 1), spacing=2)

    def _build_status(self) -> QHBoxLayout:
        """What runs, its progress, Cancel (and Align again after one)."""
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setMaximumWidth(220)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop aligning the two recordings")
        self.cancel_button.clicked.connect(self.cancel)
        self.again_button = QPushButton("Align again")
        self.again_button.clicked.connect(self.start)
        status = QHBoxLayout()
        status.setContentsMargins(6, 2, 6, 0)
        status.addWidget(self.message, 1)
        status.addWidget(self.progress)
        status.addWidget(self.cancel_button)
        status.addWidget(self.again_button)
        self._set_running(False)
        self.again_button.hide()
        return status

    def _build_chart(self) -> QWidget:
        """The chart and its lines (the span at the cursor, advise's prediction)."""
        self.chart = AlignedChart()
        self.chart.cursorMoved.connect(self._on_cursor)
        self._cursor_timer = QTimer(self)  # a drag redraws the maps once per pause
        self._cursor_timer.setSingleShot(True)
        self._cursor_timer.setInterval(30)
        self._cursor_timer.timeout.connect(self.apply_cursor)
        self.peak_line = QLabel("")
        self.peak_line.setTextFormat(Qt.TextFormat.RichText)
        self.peak_line.setToolTip("The span at the cursor: the peaks inside it on each side")
        self.prediction = QLabel("")
        self.prediction.setWordWrap(True)
        self.prediction.setToolTip(
            "advise's prediction on A for the change the files show, "
            "held against B's real peak reserved"
        )
        self.prediction.hide()
        for label in (self.peak_line, self.prediction):
            label.setContentsMargins(6, 0, 6, 0)
        top = QWidget()
        column(top, (self.chart, 1), self.peak_line, self.prediction, spacing=1)
        return top

    def _build_maps(self) -> QWidget:
        """The two maps, kept on one scale, under one legend."""
        self.map_a, self.map_b = SegmentMapView(), SegmentMapView()
        self.caption_a, self.caption_b = QLabel("A"), QLabel("B")
        maps = QSplitter(Qt.Orientation.Horizontal)
        for caption, m, c in (
            (self.caption_a, self.map_a, A_COLOR),
            (self.caption_b, self.map_b, B_COLOR),
        ):
            caption.setContentsMargins(6, 2, 6, 0)
            caption.setStyleSheet(f"border-left: 4px solid {c}; padding-left: 4px")
            box = QWidget()
            column(box, caption, (m, 1))
            maps.addWidget(box)
            # Two maps side by side have no room for a legend each: one legend above both.
            m.legend.hide()
            m.caption.hide()  # (its segment and block counts: clipped here; the rows show them)
        self.map_legend = QLabel()
        self.map_legend.setTextFormat(Qt.TextFormat.RichText)
        self.map_legend.setWordWrap(True)
        self.map_legend.setContentsMargins(6, 0, 6, 0)
        self.map_legend.setToolTip(self.map_a.legend.toolTip())
        maps_box = QWidget()
        column(maps_box, self.map_legend, (maps, 1))
        self.linked = LinkedMaps(self.map_a, self.map_b)
        return maps_box

    def _build_tables(self) -> QWidget:
        """The tables: the sites, the categories at the cursor."""
        self.sites = table_tree(
            SITE_COLUMNS,
            "Live bytes at each side's peak by allocation site (your line that "
            "allocated), largest change first. Select a site: its blocks are highlighted on "
            "both maps.",
            {1: 80, 2: 80, 3: 80, 4: 88},
            stretch=0,
            roots=False,
        )
        self.sites.currentItemChanged.connect(self._on_site)
        self.categories = QTableWidget(0, len(CATEGORY_COLUMNS))
        self.categories.setHorizontalHeaderLabels(list(CATEGORY_COLUMNS))
        self.categories.verticalHeader().hide()
        self.categories.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.categories.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.categories.setToolTip(
            "Requested bytes live at the cursor by memory category, "
            "on each side at its mapped event: the categories that "
            "changed first; those empty on both sides are left out"
        )
        ch = self.categories.horizontalHeader()
        ch.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in (1, 2, 3):
            ch.resizeSection(c, 96)
        self.categories.verticalHeader().setDefaultSectionSize(20)
        self.category_title = QLabel("<b>Categories at the cursor</b>")
        self.sites_title = QLabel("<b>Allocation sites at each side's peak</b>")
        self.sites_title.setWordWrap(True)  # (with how many sites differ after it)
        right = QWidget()
        column(
            right,
            self.sites_title,
            (self.sites, 3),
            self.category_title,
            (self.categories, 2),
            margins=(4, 0, 0, 0),
            spacing=2,
        )
        return right

    # ------------------------------------------------------------------ jobs
    def set_documents(self, a: Document | None, b: Document | None) -> None:
        """Compare ``a`` with ``b`` (nothing computed until :meth:`start`)."""
        self.cancel(quiet=True)
        self.doc_a, self.doc_b = a, b
        self._tried = False
        self.result = None
        self.body.hide()
        self.again_button.hide()
        self.message.setText("")

    def needs_start(self) -> bool:
        """Documents set and never aligned (after a Cancel or a failure, only the user
        starts it again: switching tabs does not)."""
        return not self._tried and self.doc_a is not None and self.doc_b is not None

    def start(self) -> None:
        """Align the two documents in a job (progress and Cancel in the status row)."""
        if self.doc_a is None or self.doc_b is None:
            return
        self.cancel(quiet=True)
        self._tried = True
        self.result = None
        self.body.hide()
        self.again_button.hide()
        job = Job(
            lambda j, a=self.doc_a, b=self.doc_b: compute(a, b, j.report, j.cancel_event), self
        )
        job.progressed.connect(lambda stage, f, j=job: self._on_progress(j, stage, f))
        job.done.connect(lambda r, j=job: self._on_done(j, r))
        job.failed.connect(lambda msg, j=job: self._on_failed(j, msg))
        job.cancelled.connect(lambda j=job: self._on_cancelled(j))
        self.job = job
        self.message.setText("Aligning the two recordings…")
        self.progress.setValue(0)
        self._set_running(True)
        job.finished.connect(job.deleteLater)
        job.start()

    def is_running(self) -> bool:
        return self.job is not None or self.prediction_job is not None

    def cancel(self, quiet: bool = False) -> None:
        """Stop the running job (the alignment, or the prediction after it)."""
        was, predicting = self.job, self.prediction_job
        for j in (self.job, self.prediction_job):
            if j is not None:
                j.cancel()
        self.job = self.prediction_job = None
        if predicting is not None:
            self.prediction.setText("advise's prediction: cancelled")
        self._set_running(False)
        if was is not None and not quiet:
            self.message.setText("Alignment cancelled.")
            self.again_button.show()
            self.finished.emit("cancelled")

    def wait(self) -> None:
        """Cancel and wait for every job (the window closes)."""
        self.cancel(quiet=True)
        for j in self.findChildren(Job):  # (finished ones are deleted: not children)
            j.wait(30000)

    def _set_running(self, on: bool) -> None:
        self.progress.setVisible(on)
        self.cancel_button.setVisible(on)

    def _on_progress(self, job: Job, stage: str, f: float) -> None:
        if job is self.job or job is self.prediction_job:
            self.message.setText(stage[:1].upper() + stage[1:] + "…")
            self.progress.setValue(int(1000 * f))

    def _on_failed(self, job: Job, message: str) -> None:
        if job is not self.job:
            return
        self.job = None
        self._set_running(False)
        self.message.setText(message)
        self.finished.emit("failed")

    def _on_cancelled(self, job: Job) -> None:
        if job is self.job:  # (cancel() already said so)
            self.job = None
            self._set_running(False)

    def _on_done(self, job: Job, result: OverTime) -> None:
        if job is not self.job:  # cancelled meanwhile: its result is dropped
            return
        self.job = None
        self._set_running(False)
        self.show_result(result)
        self.finished.emit("done")
        change = result.alignment.detected_change
        if change:
            self._start_prediction(result, change)

    def _start_prediction(self, result: OverTime, change: str) -> None:
        al, snap = result.alignment, result.a.doc.snap

        def work(j: Job):
            p = Progress(lambda _s, f: j.report("advise predicts " + change, f), j.cancel_event)
            return aligned.prediction_error(
                snap, al.b_peak_reserved, change, device=al.devices[0], progress=p
            )

        job = Job(work, self)
        job.progressed.connect(lambda stage, f, j=job: self._on_progress(j, stage, f))
        job.done.connect(lambda p, j=job: self._on_predicted(j, p, change))
        job.failed.connect(lambda msg, j=job: self._on_predicted(j, None, change, msg))
        job.cancelled.connect(lambda j=job: self._on_predicted(j, None, change, "cancelled"))
        self.prediction_job = job
        self.prediction.setText(f"advise predicts {change} on A…")
        self.prediction.show()
        self._set_running(True)
        job.finished.connect(job.deleteLater)
        job.start()

    def _on_predicted(self, job: Job, p, change: str, error: str = "") -> None:
        if job is not self.prediction_job:
            return
        self.prediction_job = None
        self._set_running(False)
        self.message.setText(self.summary_text())
        if self.result is not None:
            self.result.alignment.prediction_error = p
        self.prediction.setText(
            f"advise's prediction for {change}: {error}" if error else prediction_text(p, change)
        )
        self.predicted.emit()

    # ------------------------------------------------------------------ result
    def summary_text(self) -> str:
        r = self.result
        if r is None:
            return ""
        al = r.alignment
        text = (
            f"Aligned by {al.by}: {len(al.spans)} spans (device {al.devices[0]} of A, "
            f"device {al.devices[1]} of B)"
        )
        big = al.largest_change()
        if big is not None and big.delta("peak_reserved"):
            text += (
                f" · largest change: {big.label}, peak reserved "
                f"{signed_bytes(big.delta('peak_reserved') or 0)}"
            )
        return text + "".join(f" · {n}" for n in al.notes)

    def show_result(self, r: OverTime) -> None:
        """Draw a finished alignment; the cursor on the span whose peak changed most."""
        self.result = r
        al = r.alignment
        self.message.setText(self.summary_text())
        tips = []
        for s in al.spans:
            lines = [f"<b>{s.label}</b>"]
            for side, f in (("A", s.a), ("B", s.b)):
                lines.append(
                    f"{side}: peak in {f.peak_phase or 'the span'}, reserved "
                    f"{format_bytes(f.peak_reserved)}, events {f.start:,}–{f.end:,}"
                    if f is not None
                    else f"{side}: no such span"
                )
            d = s.delta("peak_reserved")
            if d is not None:
                lines.append(f"peak reserved B − A: {signed_bytes(d)}")
            tips.append("<br>".join(lines))
        names = (r.a.doc.name, r.b.doc.name)
        self.chart.set_data(
            r.axis, al.by, names, {"a": (r.a.x, r.a.curves), "b": (r.b.x, r.b.curves)}, tips
        )
        self._fill_sites()
        self.prediction.setVisible(bool(al.detected_change))
        self.body.show()
        self._fitted = False
        big = al.largest_change()
        self.set_span(big.index if big is not None else 0)
        self.chart.plot.setFocus()

    def set_span(self, i: int) -> None:
        """The cursor on span ``i`` at A's peak in it (B's where A has none), now."""
        r = self.result
        if r is None or not r.alignment.spans:
            return
        s = r.alignment.spans[min(max(i, 0), len(r.alignment.spans) - 1)]
        if s.a is not None:
            x = float(r.axis.a.x_of(s.a.peak_event))
        elif s.b is not None:
            x = float(r.axis.b.x_of(s.b.peak_event))
        else:
            x = s.index + 0.5
        self.chart.set_cursor(x)
        self.apply_cursor()

    def _on_cursor(self, _x: float) -> None:
        self._cursor_timer.start()

    def mapped_events(self) -> tuple[int, int]:
        """The events of A and B the maps show (after the last cursor move)."""
        return self._events

    def apply_cursor(self) -> None:
        """Both maps, their captions, the category table and the peak line at the cursor."""
        self._cursor_timer.stop()
        r = self.result
        if r is None:
            return
        x = self.chart.cursor_x()
        where = r.axis.where(x)
        ka, kb = r.axis.a.event_at(x), r.axis.b.event_at(x)
        self._events = (ka, kb)
        view = self.map_a.vb.viewRange() if self._fitted else None
        for side, k, m, caption in (
            ("A", ka, self.map_a, self.caption_a),
            ("B", kb, self.map_b, self.caption_b),
        ):
            d = r.side(side.lower())
            m.set_document(d.doc.at(d.device, k), fit=not self._fitted)
            caption.setText(f"<b>{side}</b> after event {k:,} ({where})")
            caption.setToolTip(
                f"{d.doc.name}: the segment map after event {k:,} of device {d.device}'s trace"
            )
        self._update_legend()
        if view is None:
            self._fit_maps()
            self._fitted = True
        else:  # the same bytes and rows as before the move, on both maps
            self._common_limits()
            self._set_ranges(*view)
        self._fill_categories(r.a.breakdown.split_at(ka), r.b.breakdown.split_at(kb))
        self.peak_line.setText(self.span_text(r.axis.span_of(x)))

    def span_text(self, i: int) -> str:
        """The peak delta line of span ``i``."""
        r = self.result
        if r is None:
            return ""
        spans = r.alignment.spans
        if not 0 <= i < len(spans):
            return f"{r.axis.where(i + 0.5 if i >= 0 else -1e-9)}: outside the aligned spans"
        s = spans[i]
        if s.a is None or s.b is None:
            only, f = ("A", s.a) if s.a is not None else ("B", s.b)
            return (
                f"<b>{s.label}</b>: only {only} has it (peak reserved "
                f"{format_bytes(f.peak_reserved)})"
            )
        parts = []
        for what, word in (
            ("peak_reserved", "peak reserved"),
            ("peak_allocated", "peak allocated"),
        ):
            d = s.delta(what) or 0
            c = delta_color(d)
            style = f' style="color:{c.name()}"' if c is not None else ""
            parts.append(
                f"{word} <b{style}>{signed_bytes(d)}</b> "
                f"({format_bytes(getattr(s.a, what))} → "
                f"{format_bytes(getattr(s.b, what))})"
            )
        phases = "/".join(p or "-" for p in (s.a.peak_phase, s.b.peak_phase))
        return f"<b>{s.label}</b>: " + " · ".join(parts) + f" · at the peak: {phases}"

    def _fill_categories(self, a: dict[str, int], b: dict[str, int]) -> None:
        """The model's rows (:func:`...model.reports.aligned.category_rows`: the changed
        ones first, none empty on both sides), then the total."""
        t = self.categories
        rows = [
            (r.name, r.label, r.a, r.b, category_color(r.name)) for r in aligned.category_rows(a, b)
        ]
        rows.append(("", "total", sum(a.values()), sum(b.values()), None))
        t.clearContents()
        t.setRowCount(len(rows))
        bold = QFont(t.font())
        bold.setBold(True)
        for r, (name, label, va, vb, c) in enumerate(rows):
            cells = [
                QTableWidgetItem(label),
                QTableWidgetItem(format_bytes(va)),
                QTableWidgetItem(format_bytes(vb)),
                QTableWidgetItem(signed_bytes(vb - va)),
            ]
            cells[0].setData(Qt.ItemDataRole.UserRole, name)
            if c is not None:
                cells[0].setIcon(_swatch(c))
            for i, cell in enumerate(cells[1:], start=1):
                cell.setTextAlignment(RIGHT)
                cell.setData(Qt.ItemDataRole.UserRole, (va, vb, vb - va)[i - 1])
                cell.setToolTip(
                    f"{(va, vb, vb - va)[i - 1]:+,} bytes"
                    if i == 3
                    else f"{(va, vb)[i - 1]:,} bytes"
                )
            dc = delta_color(vb - va)
            if dc is not None:
                cells[3].setForeground(QBrush(dc))
            if c is None:
                for cell in cells:
                    cell.setFont(bold)
            for col, cell in enumerate(cells):
                t.setItem(r, col, cell)

    def category_values(self) -> dict[str, tuple[int, int]]:
        """The table's bytes: category name -> (A, B), the categories it lists (for
        tests; the total row is left out)."""
        out = {}
        t = self.categories
        for r in range(t.rowCount()):
            name = t.item(r, 0).data(Qt.ItemDataRole.UserRole)
            if name:
                out[name] = (
                    int(t.item(r, 1).data(Qt.ItemDataRole.UserRole)),
                    int(t.item(r, 2).data(Qt.ItemDataRole.UserRole)),
                )
        return out

    # ------------------------------------------------------------------ sites
    def _fill_sites(self) -> None:
        r = self.result
        self.sites.setSortingEnabled(False)
        self.sites.clear()
        self.site_rows = list(r.alignment.sites) if r is not None else []
        title = "<b>Allocation sites at each side's peak</b>"
        if r is not None:
            title += " · " + r.alignment.site_summary().replace("&", "&amp;")
        self.sites_title.setText(title)
        items = []
        n = len(self.site_rows)
        for i, s in enumerate(self.site_rows):
            item = SortItem(
                [
                    s.frame,
                    s.status,
                    format_bytes(s.a_bytes),
                    format_bytes(s.b_bytes),
                    signed_bytes(s.delta),
                ]
            )
            # "Change" sorts in the model's order: the size of the change, then the bytes
            # (equal changes, e.g. every unchanged site, keep a stable order).
            for c, v in ((0, s.frame), (1, s.status), (2, s.a_bytes), (3, s.b_bytes), (4, n - i)):
                item.setData(c, SORT_ROLE, v)
            item.setData(0, Qt.ItemDataRole.UserRole, i)
            for c in (2, 3, 4):
                item.setTextAlignment(c, RIGHT)
            color = delta_color(s.delta)
            if color is not None:
                item.setForeground(4, QBrush(color))
                item.setForeground(1, QBrush(color))
            ka, kb = r.site_keys(s)
            pa, pb = r.a.paths.get(ka), r.b.paths.get(kb)
            tip = [
                f"A: {pa}:{ka[1]} in {ka[2]}" if pa else "A: not at A's peak",
                f"B: {pb}:{kb[1]} in {kb[2]}" if pb else "B: not at B's peak",
            ]
            item.setToolTip(0, "\n".join(tip))
            item.setToolTip(
                2, f"{s.a_bytes:,} bytes in {plural(s.a_count, 'allocation')} at A's peak"
            )
            item.setToolTip(
                3, f"{s.b_bytes:,} bytes in {plural(s.b_count, 'allocation')} at B's peak"
            )
            item.setToolTip(
                4, f"{s.delta:+,} bytes (sorts by the size of the change, then by the bytes)"
            )
            items.append(item)
        self.sites.addTopLevelItems(items)
        self.sites.setSortingEnabled(True)
        self.sites.sortByColumn(4, Qt.SortOrder.DescendingOrder)

    def site_items(self) -> list[QTreeWidgetItem]:
        return [self.sites.topLevelItem(i) for i in range(self.sites.topLevelItemCount())]

    def site_of(self, item: QTreeWidgetItem) -> aligned.SiteDelta:
        return self.site_rows[int(item.data(0, Qt.ItemDataRole.UserRole))]

    def _on_site(self, current: QTreeWidgetItem | None, _prev) -> None:
        if current is None or self.result is None:
            return
        self.highlight_site(self.site_of(current))

    def highlight_site(self, site: aligned.SiteDelta) -> None:
        """Outline the blocks ``site`` allocated on both maps (at the cursor)."""
        label = f"{HIGHLIGHT_SITE}: {site.frame}"
        for mask, m in zip(self.result.site_stack_masks(site), (self.map_a, self.map_b)):
            m.set_highlight(mask, label)
        self._update_legend()

    def _update_legend(self) -> None:
        """Both maps' legend (they draw alike), the highlight named in full (a map's own
        legend cuts long names)."""
        text = self.map_a.legend.text()
        label = getattr(self.map_a, "highlight_label", "")
        if self.map_a.item.highlight is not None and label:
            full = (
                f'<span style="white-space:nowrap"><span style="color:'
                f'{theme.search_color().name()}">&#9632;</span>&nbsp;<b>'
                + label.replace("&", "&amp;").replace("<", "&lt;")
                + "</b></span>"
            )
            text = text.replace(theme.search_swatch_html(label), full)
        self.map_legend.setText(text)

    # ------------------------------------------------------------------ maps
    def _common_limits(self) -> tuple[float, int]:
        """One scale for both maps: the wider segment and the more rows of the two (each
        map alone limits the view to its own, and would clamp the other's)."""
        maps = (self.map_a, self.map_b)
        xmax = max(max(m.layout_data.max_size, 1.0) for m in maps)
        rows = max(max(m.layout_data.n_rows for m in maps), 1)
        for m in maps:
            m.vb.setLimits(xMin=-0.05 * xmax, xMax=xmax * 1.05, yMin=-1.3, yMax=rows + 1)
        return xmax, rows

    def _set_ranges(self, xr, yr) -> None:
        with self.linked.quiet():
            for m in (self.map_a, self.map_b):
                m.vb.setRange(xRange=tuple(xr), yRange=tuple(yr), padding=0)

    def _fit_maps(self) -> None:
        """Both maps on one scale (bytes across, rows down), from the top."""
        maps = (self.map_a, self.map_b)
        if any(m.layout_data is None for m in maps):
            return
        spans = []
        with self.linked.quiet():
            for m in maps:
                m.home()
                (_, _), (ya, yb) = m.vb.viewRange()
                spans.append(yb - ya)
        xmax, _rows = self._common_limits()
        self._set_ranges((0, xmax), (-0.3, -0.3 + max(spans)))


__all__ = ["HIGHLIGHT_SITE", "OverTimePane"]
