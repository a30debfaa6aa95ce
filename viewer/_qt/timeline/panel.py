"""The timeline: memory over time, the stacked allocations, and the time-travel cursor.

One plot, x = events (or time), y = bytes:

* every allocation stacked bottom-up in the order it was made, like
  memory_viz's Active Memory Timeline, from :func:`stacked_layout` recomputed
  (debounced) on every view change with one column per pixel; drawn as one
  QPainterPath of step polygons per colour (colour by code site), the
  allocations too small to draw individually one grey band at the bottom;
* the requested / allocated / active / reserved curves, their peaks marked;
* OOM (red) and ``snapshot`` markers, ``record_function`` ranges as labelled
  translucent bands;
* the cursor: a vertical line; click, drag, arrow keys move it, and the whole
  window shows the block layout after that event.

Given the window's :class:`ViewState`, the panel subscribes itself: the cursor's trace
(``trace``), the cursor (``cursor``), the stream / pool filter (``selection``) and the
highlighted stacks (``highlight``).  Its OOM buttons are the window's to set
(:meth:`TimelinePanel.show_oom_marks`), with the window's OOM actions.

It holds the widget, its header controls, the cursor (keys, drag, x modes) and its
view-state subscription; the stacked allocations, the marks, the overlays and the
drawing are in their own modules beside it.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...model.analysis.figures import Selection
from ...model.core.snapshot import Action
from ...model.core.units import device_name, event_of, format_bytes
from ...model.view.curve_lod import decimate, envelope_levels
from ...model.view.document import Document, stream_label
from ...model.view.stacking import StackedLayout
from ...model.view.view_state import OomMarks, ViewState
from ..widgets import theme
from ..widgets.plotting import place_text_items, text_scene_rect
from .axes import BytesYAxis, TimelineViewBox, XAxis
from .constants import (
    ACTION_TEXT,
    CURVES,
    DEBOUNCE_MS,
    HIGHLIGHT_PEN,
    X_EVENTS,
    X_TIME,
    curve_colors,
    format_seconds,
)
from .items import StackedItem, VerticalBandsItem
from .marks import MarksMixin
from .notes import ANNOTATION_COLOR, NotesItem
from .overlay import OverlayMixin
from .raster import EventXs, band_color_index
from .stacked import StackedMixin


class TimelinePanel(OverlayMixin, MarksMixin, StackedMixin, QWidget):
    """Header (cursor position, navigation) over the plot.

    ``view_state``: the window's :class:`ViewState`, whose trace, cursor, filter and
    highlight the panel draws (None: the caller sets what it shows)."""

    cursorRequested = Signal(int)  # the user moved the cursor to event k
    intervalClicked = Signal(int)  # an allocation band was clicked (interval id)
    latestRequested = Signal()

    def __init__(self, view_state: ViewState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.vs = view_state
        self._drawn_filter: tuple[int | None, int | None] | None = None  # (stream, pool)
        self.doc: Document | None = None
        self.device: int | None = None
        self.stream: int | None = None
        self.pool: int | None = None
        self.n = 0
        self.k = -1
        self.mode = X_EVENTS
        self.has_time = False
        self._time = np.zeros(0, np.int64)  # time_us per event
        self._tx: np.ndarray | None = None  # seconds since the first event (built on use)
        self.iv = None
        self.iv_ids = np.zeros(0, np.int64)  # interval ids drawn (stream filter)
        self._sub_iv = None  # the intervals of iv_ids (filtered views)
        self.band_color = np.zeros(0, np.int64)  # per interval
        self.stack_mask: np.ndarray | None = None  # per stack: highlighted
        self.selected_interval = -1
        self.layout: StackedLayout | None = None
        self.layout_ids = np.zeros(0, np.int64)  # interval id per band of self.layout
        self.layout_range = (0, 0)
        self.last_refresh_s = 0.0
        self.xs_cols = np.zeros(0)
        self.curves: dict[str, np.ndarray] = {}
        self.peaks: dict[str, tuple[int, int]] = {}
        self._hover = -1
        self._init_overlays()  # predicted curves of other panels (overlay.py)
        self.source_text = ""  # what instant the trace reaches (live attach)
        self.latest_text = "latest (as recorded)"  # the last event, in the position line

        # -- header
        self.title = QLabel("<b>Timeline</b>")
        self.position = QLabel()
        self.position.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.position.setToolTip("The cursor: the window shows the block layout after this event")
        self.time_button = QToolButton(text="Time", checkable=True)
        self.time_button.setToolTip("x axis: time since the first event (Ctrl+T toggles)")
        self.events_button = QToolButton(text="Events", checkable=True, checked=True)
        self.events_button.setToolTip("x axis: event index in the device's trace (Ctrl+T toggles)")
        group = QButtonGroup(self)
        group.setExclusive(True)
        group.addButton(self.time_button)
        group.addButton(self.events_button)
        self.time_button.toggled.connect(self._on_mode_button)
        self.peak_button = QToolButton(text="Peak")
        self.peak_button.setToolTip(
            "Jump to the peak of allocated memory (Ctrl+Shift+P; of reserved memory: Ctrl+Shift+R)"
        )
        self.prev_oom_button = QToolButton(text="◀")
        self.prev_oom_button.setToolTip("Previous OOM (Ctrl+[)")
        self.oom_button = QToolButton(text="OOM")
        self.oom_button.setToolTip("Jump to the last out-of-memory event (Ctrl+J)")
        self.next_oom_button = QToolButton(text="▶")
        self.next_oom_button.setToolTip("Next OOM (Ctrl+])")
        self.latest_button = QToolButton(text="Latest (as recorded)")
        self.latest_button.setToolTip(
            "Back to the snapshot as it was recorded: the end of the trace (End)"
        )
        self.fit_button = QToolButton(text="Fit")
        self.fit_button.setToolTip("Show the whole trace")
        self.fit_button.clicked.connect(self.fit)
        self.latest_button.clicked.connect(self.latestRequested)
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setToolTip(
            "Curves: bytes after each event.\nBands: every allocation stacked bottom-up in "
            "the order it was made (memory_viz's active memory timeline), one colour per code "
            "site; grey at the bottom: allocations too small to draw one by one at this zoom.\n"
            "Red lines: out-of-memory events. Shaded ranges: record_function annotations.\n\n"
            "Click: move the cursor there (and select the allocation) · drag the cursor line · "
            "←/→ one event (Shift: 100) · Home/End · wheel: zoom · drag: pan"
        )
        top = QHBoxLayout()
        top.setContentsMargins(4, 2, 4, 0)
        top.setSpacing(4)
        top.addWidget(self.title)
        top.addWidget(self.time_button)
        top.addWidget(self.events_button)
        top.addSpacing(8)
        for b in (
            self.peak_button,
            self.prev_oom_button,
            self.oom_button,
            self.next_oom_button,
            self.latest_button,
            self.fit_button,
        ):
            top.addWidget(b)
        top.addSpacing(8)
        top.addWidget(self.position, 1)
        top.addWidget(self.legend)

        # -- plot
        self.x_axis = XAxis("bottom")
        self.x_axis.enableAutoSIPrefix(False)
        self.y_axis = BytesYAxis("left")
        self.y_axis.setWidth(64)
        self.vb = TimelineViewBox(enableMenu=False)  # no context menu: none built
        self.vb.setMouseEnabled(x=True, y=False)
        self.plot = pg.PlotWidget(
            viewBox=self.vb, axisItems={"bottom": self.x_axis, "left": self.y_axis}
        )
        self.plot.setMinimumSize(QSize(200, 90))
        self.plot.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.plot.installEventFilter(self)
        pi = self.plot.getPlotItem()
        pi.hideButtons()
        pi.setMenuEnabled(False)
        pi.showGrid(x=False, y=True, alpha=0.12)
        self.vb.disableAutoRange()
        self.bands_item = VerticalBandsItem()
        self.bands_item.avoid = lambda: [
            text_scene_rect(t, self.vb) for t in self.peak_labels if t.isVisible()
        ]
        self.plot.addItem(self.bands_item, ignoreBounds=True)
        self.stacked = StackedItem()
        self.plot.addItem(self.stacked, ignoreBounds=True)
        self.notes_item = NotesItem()  # annotations, untrusted stretches, overwritten edge
        self.plot.addItem(self.notes_item, ignoreBounds=True)
        self.curve_items: dict[str, pg.PlotCurveItem] = {}
        for z, name in enumerate(CURVES):
            item = pg.PlotCurveItem()  # data decimated here, per view (see _update_curves)
            item.setZValue(7 - z)  # reserved on top, requested at the bottom
            self.plot.addItem(item)
            self.curve_items[name] = item
        self.peak_scatter = pg.ScatterPlotItem(size=9, symbol="o")
        self.peak_scatter.setZValue(8)
        self.plot.addItem(self.peak_scatter, ignoreBounds=True)
        self.peak_labels: list[pg.TextItem] = []
        self.cursor = pg.InfiniteLine(
            pos=0,
            angle=90,
            movable=True,
            pen=pg.mkPen(theme.foreground(), width=2),
            hoverPen=pg.mkPen(HIGHLIGHT_PEN, width=4),
        )
        self.cursor.setZValue(20)
        self.cursor.setToolTip("The time-travel cursor: drag it")
        self.plot.addItem(self.cursor, ignoreBounds=True)
        self.cursor.sigDragged.connect(self._on_cursor_dragged)
        self.cursor.sigPositionChangeFinished.connect(self._on_cursor_drag_finished)
        self.vb.sigXRangeChanged.connect(self._on_x_range)
        self.vb.sigResized.connect(self._on_x_range)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self._timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._timer.timeout.connect(self.refresh_stack)
        self.update_legend()

        # A trace that starts mid-run (a late start, a wrapped ring): what it cannot show.
        self.window_note = QLabel()
        self.window_note.setObjectName("traceWindowNote")
        self.window_note.setWordWrap(True)
        self.window_note.setStyleSheet("font-size: 8pt;")
        self.window_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.window_note.hide()
        self.starts_mid_run = False
        self.empty = QLabel(
            "No allocator trace in this snapshot: record with "
            "torch.cuda.memory._record_memory_history() to see memory over time."
        )
        self.empty.setEnabled(False)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(1)
        lay.addLayout(top)
        lay.addWidget(self.window_note)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.empty, 1)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.apply_palette()
        if view_state is not None:
            ev = view_state.events
            ev.trace.connect(self._on_trace)
            ev.cursor.connect(self._on_cursor)
            ev.selection.connect(self._on_selection)
            ev.highlight.connect(self._on_highlight)

    # ------------------------------------------------------------------ the view state
    def _on_trace(self, device: int | None) -> None:
        sel = self.vs.selection
        self.set_document(self.vs.doc, device, sel.stream, sel.pool)
        self._drawn_filter = (sel.stream, sel.pool)

    def _on_cursor(self, device: int | None, k: int) -> None:
        if device is not None:  # the timeline keeps its old cursor otherwise
            self.set_cursor(k)

    def _on_selection(self, sel: Selection) -> None:
        if self._drawn_filter != (sel.stream, sel.pool):
            self.set_filter(sel.stream, sel.pool)
            self._drawn_filter = (sel.stream, sel.pool)

    def _on_highlight(self, mask: np.ndarray | None) -> None:
        self.set_highlight(mask, self.vs.highlight_label())  # (its legend names it)

    def show_oom_marks(self, marks: OomMarks) -> None:
        """The OOM buttons (one, or previous / next among several) and Latest for the
        cursor among the trace's OOMs (the window's, which also enables its OOM actions
        by them)."""
        self.oom_button.setEnabled(marks.count > 0)
        self.oom_button.setText(f"OOM ({marks.count})" if marks.count > 1 else "OOM")
        self.prev_oom_button.setVisible(marks.count > 1)
        self.next_oom_button.setVisible(marks.count > 1)
        self.prev_oom_button.setEnabled(marks.before)
        self.next_oom_button.setEnabled(marks.after)
        self.latest_button.setEnabled(marks.not_latest)

    # ------------------------------------------------------------------ appearance
    def apply_palette(self) -> None:
        self.plot.setBackground(theme.background())
        fg = theme.foreground()
        for name in ("bottom", "left"):
            ax = self.plot.getPlotItem().getAxis(name)
            ax.setPen(pg.mkPen(fg))
            ax.setTextPen(pg.mkPen(fg))
        self.cursor.setPen(pg.mkPen(fg, width=2))
        colors = curve_colors()
        for name, item in self.curve_items.items():
            item.setPen(pg.mkPen(colors[name], width=1.5 if name == "reserved" else 1))
        self._recolor_overlays()
        self.update_legend()

    def update_legend(self) -> None:
        colors = curve_colors()
        parts = [f'<span style="color:{colors[c]}">&#9473;</span>&nbsp;{c}' for c in CURVES]
        parts.append(f'<span style="color:{theme.OOM_RED}">&#9475;</span>&nbsp;OOM')
        if self.marker_count():
            parts.append(f'<span style="color:{ANNOTATION_COLOR}">&#9660;</span>&nbsp;annotation')
        if any(st.kind == "inconsistent" for st in getattr(self, "stretches", [])):
            parts.append(f'<span style="color:{theme.OOM_RED}">&#9636;</span>&nbsp;not exact')
        if self.stack_mask is not None:
            parts.append(theme.search_swatch_html(getattr(self, "highlight_label", "")))
        parts += self._overlay_legend()
        if getattr(self, "legend_provider", None) is not None:  # colour by category, phases
            parts = self.legend_provider(parts)
        self.legend.setText("&nbsp; ".join(parts))

    # ------------------------------------------------------------------ data
    def set_document(
        self,
        doc: Document | None,
        device: int | None,
        stream: int | None = None,
        pool: int | None = None,
    ) -> None:
        """Show ``device``'s trace of ``doc`` (``stream``/``pool``: only that stream's or
        pool's curves and allocations)."""
        if doc is not self.doc or device != self.device:
            self.clear_overlay()  # a prediction of another recording (or device)
        self.doc = doc
        self.device = device
        self.stream = stream
        self.pool = pool
        self.selected_interval = -1
        rep = (
            doc.timeline.replay(device)
            if doc is not None and doc.timeline is not None and device is not None
            else None
        )
        has = rep is not None and len(rep) > 0
        self.plot.setVisible(has)
        self.empty.setVisible(not has)
        for w in (
            self.time_button,
            self.events_button,
            self.peak_button,
            self.oom_button,
            self.latest_button,
            self.fit_button,
            self.prev_oom_button,
            self.next_oom_button,
        ):
            w.setEnabled(has)
        if not has:
            self.window_note.hide()
            self.starts_mid_run = False
            self.n = 0
            self.k = -1
            self.iv = None
            self.layout = None
            self.curves = {}
            self.stacked.clear()
            self.notes_item.clear()
            for item in self.curve_items.values():
                item.setData([], [])
            self.position.setText("")
            return
        self.n = len(rep)
        t = rep.time_us
        self._time, self._tx = t, None
        # Timestamps that never go back (a bool per event, not a diff of int64s).
        self.has_time = bool(t[0] >= 0 and t[-1] > t[0] and (t[1:] >= t[:-1]).all())
        if not self.has_time and self.mode == X_TIME:
            self.mode = X_EVENTS
        self.time_button.setEnabled(self.has_time)
        self.time_button.setToolTip(
            "x axis: time since the first event (Ctrl+T toggles)"
            if self.has_time
            else "This trace has no timestamps"
        )
        self.iv = doc.intervals(device)
        if stream is None and pool is None:
            self.iv_ids = np.arange(len(self.iv))
        else:
            keep = np.ones(len(self.iv), bool)
            if stream is not None:
                keep &= self.iv.stream == stream
            if pool is not None:
                keep &= self.iv.pool == pool
            self.iv_ids = np.flatnonzero(keep)
        self._sub_iv = None
        # Colour by the allocation's top frame: one colour per stack, gathered per
        # interval (stack -1, none, picks the last entry: the colour of no frame).
        per_stack = band_color_index(np.append(doc.top_frame, -1))
        self.band_color = per_stack[np.maximum(self.iv.stack, -1)]
        self.curves = doc.curves(device, stream, pool)
        self._build_envelopes()
        self.peaks = {
            c: self.curves[c].peak()
            if hasattr(self.curves[c], "peak")
            else (int(self.curves[c].max()), int(np.argmax(self.curves[c])))
            for c in CURVES
        }
        self._set_mode_buttons()
        self.starts_mid_run = len(getattr(getattr(rep, "initial", None), "seg_addr", ())) > 0
        self._place_all(fit=True)
        self._set_window_note(rep)  # (last: showing it resizes the plot, which redraws)

    def set_source(self, text: str, tip: str = "") -> None:
        """A note in the x axis's title saying what instant the trace reaches (live
        attach; "" for none).  The axis title has room; the header row has not."""
        if text != self.source_text:
            self.source_text = text
            self._set_mode_buttons()
        self.plot.getPlotItem().getAxis("bottom").setToolTip(tip)

    def set_filter(self, stream: int | None, pool: int | None) -> None:
        """Restrict curves and allocations to one stream and/or pool."""
        if self.doc is not None and (stream, pool) != (self.stream, self.pool):
            k = self.k
            (xa, xb), _ = self.vb.viewRange()
            ka, kb = self.k_of(xa), self.k_of(xb)
            self.set_document(self.doc, self.device, stream, pool)
            self.set_cursor(k)
            self.vb.setXRange(self.x_of(ka), self.x_of(kb), padding=0)

    def view_state(self) -> dict | None:
        """The x range as the user left it, for :meth:`restore_view_state` over a newer
        document of the same trace (live attach).  ``following``: the latest event is
        at the right edge; ``whole``: the whole trace is in view."""
        if not self.n:
            return None
        (xa, xb), _ = self.vb.viewRange()
        first, last = float(self.x_of(0)), float(self.x_of(self.n - 1))
        return {
            "xa": xa,
            "xb": xb,
            "last": last,
            "time": self._time,
            "has_time": self.has_time,
            "following": xb >= last,
            "whole": xa <= first and xb >= last,
        }

    def restore_view_state(self, state: dict | None) -> None:
        """Show the range of ``state`` (taken by :meth:`view_state` before this document
        replaced an older one of the same trace): the same events stay in view; a view
        that followed the latest event follows the new latest, at the same zoom."""
        if state is None or not self.n:
            return
        if state["whole"]:
            self.fit()
            return
        old_t, new_t = state["time"], self._time
        # The live window is bounded: the oldest events may have been dropped since, so
        # x (event index, or seconds since the first event) moves by what was dropped.
        shift = 0.0
        if state["has_time"] and self.has_time and len(old_t) and int(new_t[0]) != int(old_t[0]):
            if self.mode == X_TIME:
                shift = (int(new_t[0]) - int(old_t[0])) / 1e6
            else:
                shift = float(np.searchsorted(old_t, new_t[0], side="left"))
        xa, xb = state["xa"] - shift, state["xb"] - shift
        if state["following"]:
            margin = xb - (state["last"] - shift)
            xb = float(self.x_of(self.n - 1)) + margin
            xa = xb - (state["xb"] - state["xa"])
        self.vb.setXRange(xa, xb, padding=0)
        self._on_x_range()

    def x_of(self, k) -> float | np.ndarray:
        if self.mode == X_TIME and self.has_time:
            return self.tx[np.clip(k, 0, self.n - 1)]
        return np.asarray(k, dtype=np.float64) if not np.isscalar(k) else float(k)

    @property
    def tx(self) -> np.ndarray:
        """Seconds since the first event, per event (only built when time is shown)."""
        if self._tx is None or len(self._tx) != self.n:
            t = self._time
            self._tx = (t - t[0]) / 1e6 if self.has_time and len(t) else np.zeros(self.n)
        return self._tx

    def seconds_at(self, k: int) -> float:
        return float(self._time[k] - self._time[0]) / 1e6

    def xs(self):
        """x of every event: seconds, or the event index (no array of n floats)."""
        if self.mode == X_TIME and self.has_time:
            return self.tx
        return EventXs(self.n)

    def k_of(self, x: float) -> int:
        """The event nearest to view x."""
        if not self.n:
            return -1
        if self.mode == X_TIME and self.has_time:
            i = int(np.searchsorted(self.tx, x))
            if i >= self.n:
                return self.n - 1
            if i > 0 and x - self.tx[i - 1] <= self.tx[i] - x:
                i -= 1
            # Several events can share one timestamp: the last of them.
            return int(np.searchsorted(self.tx, self.tx[i], side="right") - 1)
        return int(min(max(round(x), 0), self.n - 1))

    def set_mode(self, mode: str) -> None:
        if mode == X_TIME and not self.has_time:
            mode = X_EVENTS
        if mode == self.mode:
            self._set_mode_buttons()
            return
        ka = kb = None
        if self.n:
            (xa, xb), _ = self.vb.viewRange()
            ka, kb = self.k_of(xa), self.k_of(xb)
        self.mode = mode
        self._set_mode_buttons()
        if self.n:
            self._place_all(fit=False)
            self.vb.setXRange(float(self.x_of(ka)), float(self.x_of(kb)), padding=0)

    def toggle_mode(self) -> None:
        self.set_mode(X_EVENTS if self.mode == X_TIME else X_TIME)

    def _set_mode_buttons(self) -> None:
        self.x_axis.mode = self.mode
        for b in (self.time_button, self.events_button):
            b.blockSignals(True)
        self.time_button.setChecked(self.mode == X_TIME)
        self.events_button.setChecked(self.mode != X_TIME)
        for b in (self.time_button, self.events_button):
            b.blockSignals(False)
        label = (
            "time since the first event"
            if self.mode == X_TIME
            else f"event ({self.n:,} on {device_name(self.device)})"
            if self.n
            else "event"
        )
        if self.source_text:
            label += f"  ·  {self.source_text}"
        if getattr(self, "overlays", None):
            label += f"  ·  {self.overlay_title()}"
        self.plot.getPlotItem().setLabel("bottom", label)
        self.x_axis.picture = None
        self.x_axis.update()

    def _on_mode_button(self, on: bool) -> None:
        self.set_mode(X_TIME if on else X_EVENTS)

    def _place_all(self, fit: bool) -> None:
        """Curves, markers, bands and peaks for the current x mode."""
        xs = self.xs()
        self._update_curves(0, self.n - 1)
        self._place_peaks()
        self._place_overlays()
        self._place_markers()
        x_lo, x_hi = float(xs[0]), float(xs[-1])
        if self.n == 1:  # the one column's edges
            x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
        span = max(x_hi - x_lo, 1e-9)
        self.vb.setLimits(
            xMin=x_lo - span * 0.02,
            xMax=x_hi + span * 0.02,
            yMin=-1,
            minXRange=min(span, 4.0 if self.mode == X_EVENTS else 1e-6),
        )
        if fit:
            self.fit()
        self.set_cursor(self.k if 0 <= self.k < self.n else self.n - 1)

    def fit(self) -> None:
        if not self.n:
            return
        xs = self.xs()
        if self.n == 1:  # one state: its column (centred on the event) fills the plot
            self.vb.setXRange(float(xs[0]) - 0.5, float(xs[0]) + 0.5, padding=0)
            self._on_x_range()
            return
        span = max(float(xs[-1] - xs[0]), 1e-9)
        self.vb.setXRange(float(xs[0]) - span * 0.005, float(xs[-1]) + span * 0.01, padding=0)
        self._on_x_range()

    def set_cursor(self, k: int) -> None:
        """Move the cursor line to event ``k`` (no signal)."""
        if not self.n:
            return
        self.k = int(min(max(k, 0), self.n - 1))
        self.cursor.blockSignals(True)
        self.cursor.setValue(float(self.x_of(self.k)))
        self.cursor.blockSignals(False)
        self._update_position()
        self.ensure_visible(self.k)

    def ensure_visible(self, k: int) -> None:
        (xa, xb), _ = self.vb.viewRange()
        x = float(self.x_of(k))
        if not xa <= x <= xb:
            half = (xb - xa) / 2
            self.vb.setXRange(x - half, x + half, padding=0)

    def cursor_text(self) -> str:
        return self.position.text()

    def _update_position(self) -> None:
        if not self.n or self.k < 0:
            self.position.setText("")
            return
        rep = self.doc.timeline.replay(self.device)
        k = self.k
        act = int(rep.action[k])
        what = ACTION_TEXT.get(act, str(act))
        if act in (
            Action.ALLOC,
            Action.FREE_REQUESTED,
            Action.FREE_COMPLETED,
            Action.SEGMENT_ALLOC,
            Action.SEGMENT_FREE,
            Action.SEGMENT_MAP,
            Action.SEGMENT_UNMAP,
            Action.OOM,
        ):
            what += f" {format_bytes(int(rep.size[k]))}"
        parts = [event_of(k, self.n)]
        if self.has_time:
            parts.append(f"+{format_seconds(self.seconds_at(k))}")
        parts.append(what)
        if self.stream is not None:
            parts.append(stream_label(self.stream))
        if k == self.n - 1:
            parts.append(self.latest_text)
        text = " · ".join(parts)
        self.position.setText(text)

    def _on_cursor_dragged(self, line) -> None:
        k = self.k_of(line.value())
        if k != self.k:
            self.k = k
            self._update_position()
            self.cursorRequested.emit(k)

    def _on_cursor_drag_finished(self, line) -> None:
        k = self.k_of(line.value())
        self.set_cursor(k)
        self.cursorRequested.emit(k)

    def step(self, delta: int) -> None:
        if self.n:
            self.request(self.k + delta)

    def request(self, k: int) -> None:
        if not self.n:
            return
        k = int(min(max(k, 0), self.n - 1))
        self.set_cursor(k)
        self.cursorRequested.emit(k)

    def eventFilter(self, obj, event) -> bool:
        if obj is self.plot and event.type() == QEvent.Type.KeyPress and self.n:
            key, mods = event.key(), event.modifiers()
            big = 100 if mods & Qt.KeyboardModifier.ShiftModifier else 1
            if key == Qt.Key.Key_Left:
                self.step(-big)
                return True
            if key == Qt.Key.Key_Right:
                self.step(big)
                return True
            if key == Qt.Key.Key_Home:
                self.request(0)
                return True
            if key == Qt.Key.Key_End:
                self.latestRequested.emit()
                return True
        return super().eventFilter(obj, event)

    # ------------------------------------------------------------------ stacked layout
    def _on_x_range(self, *_args) -> None:
        if not self.n:
            return
        (xa, xb), _ = self.vb.viewRange()
        ka, kb = self._visible_events(xa, xb)
        env = self._update_curves(ka, kb)
        ymax = max(
            float(env["reserved"].max()) if len(env["reserved"]) else 1.0,
            float(env["active"].max()) if len(env["active"]) else 1.0,
            1.0,
            self._overlay_top,
        )
        self.vb.setYRange(0, ymax * 1.35, padding=0)
        # Peak labels (highest first), then the overlays' names, only where they fit
        # whole and clear of each other.
        place_text_items(self.peak_labels + self._overlay_texts(), self.vb)
        self._timer.start()

    def _build_envelopes(self) -> None:
        """Per curve, the max of every block of ``L`` events at a few levels ``L``, so a
        view of millions of events draws its envelope from a few thousand values."""
        self._env = {name: envelope_levels(y, name) for name, y in self.curves.items()}

    def _update_curves(self, k0: int, k1: int) -> dict[str, np.ndarray]:
        """The curves over events ``k0..k1`` at the plot's resolution (see
        :func:`~vramscope.viewer.model.view.curve_lod.decimate`).  Returns the y values drawn."""
        cols = self.columns()
        xs_all = self.xs()
        drawn = {}
        env = getattr(self, "_env", {})
        for name, item in self.curve_items.items():
            x_out, y_out = decimate(xs_all, self.curves[name], k0, k1, cols, levels=env.get(name))
            item.setData(x_out, y_out)
            drawn[name] = y_out
        self._overlay_top = self._update_overlays(xs_all, k0, k1, cols)
        return drawn

    def _visible_events(self, xa: float, xb: float) -> tuple[int, int]:
        if self.mode == X_TIME and self.has_time:
            ka = int(np.searchsorted(self.tx, xa, side="left"))
            kb = int(np.searchsorted(self.tx, xb, side="right")) - 1
        else:
            ka, kb = int(math.ceil(xa)), int(math.floor(xb))
        ka, kb = max(ka - 1, 0), min(kb + 1, self.n - 1)
        return ka, max(ka, kb)

    def columns(self) -> int:
        return max(2, int(self.vb.width()) if self.vb.width() > 0 else 800)

    def flush(self) -> None:
        """Refresh the stacked allocations now if a view change is waiting for the
        debounce: what the view shows a moment later (a grab of the window)."""
        if self._timer.isActive():
            self.refresh_stack()
