"""What the memory is, wired into the main window: the split at the cursor in
the header, the stacked timeline coloured by category (a toggle with the code-site
colouring), iteration and phase bands on the timeline, the segment map and the Blocks
table coloured / filtered by category, and the "What it is" tab (split,
category timeline, Leaks view).  A pick in any of them highlights the blocks through
the window's :class:`ViewState`.

State lives in the Qt-free :class:`CategoryView` (``window.categories``); this module
only connects it to the widgets, which draw, through their public members and hooks
(the timeline's and the map's legend, colour and tooltip providers, the table's row
filter).  The main window builds the wiring and hands itself over.  The breakdown is
built off the GUI thread by :class:`CategoriesPanel` (progress and Cancel).
Remembered between runs (settings): the colour mode and whether the phase bands show.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QAction, QActionGroup, QColor, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QSplitter, QWidget

from ...model.categories.leaks import leak_interval_mask, leaked_blocks
from ...model.categories.reasons import CATEGORY_LABELS, CATEGORY_NAMES
from ...model.categories.wording import HELD_WHY, format_split, held_words, split_total
from ...model.core.units import format_bytes
from ...model.view.category_view import COLOR_CATEGORY, COLOR_SITE, CategoryView
from ..segment_map.category_overlay import CategoryOverlay
from ..timeline.constants import CURVES
from ..timeline.phase_bands import PhaseBands
from ..widgets import settings as st
from ..widgets import theme
from ..widgets.category_colors import LEAK, color, rgba_table, swatch_html
from .panel import CategoriesPanel
from .split_bar import CategorySplitBar

KEY_COLOR = "view/colorBy"
KEY_PHASES = "view/phaseBands"
TAB_TITLE = "What it is"
# A build waiting for the window's paint starts after this long anyway (a window shown
# but never painted: minimized, or covered on a platform that skips hidden windows).
DEFER_LIMIT_MS = 250
TAB_SHORTCUT = "Ctrl+Shift+M"  # View > What the memory is
# Ctrl+Shift+digit: only that category.  The first seven and unknown keep the digits
# they had before sharded training added two categories; communication buffers (the
# rarest to filter for) have none: there are nine digits.
FILTER_KEYS = {
    "parameter": 1,
    "gradient": 2,
    "optimizer_state": 3,
    "activation": 4,
    "temporary": 5,
    "input": 6,
    "kv_cache": 7,
    "unknown": 8,
    "parameter_gathered": 9,
}


class HeaderSplit(QWidget):
    """One line under the header's figures: the split at the cursor, bytes and %."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.split: dict[str, int] = {}
        self.bar = CategorySplitBar()
        self.bar.setFixedWidth(220)
        self.text = QLabel()
        self.text.setStyleSheet("font-size: 8pt;")
        # (a long split must not widen the window: it is cut, the tooltip has it all)
        self.text.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(8)
        self.title = title = QLabel("What it is:")
        title.setStyleSheet(theme.caption_style())  # (muted but readable: 4.5:1)
        title.setToolTip(
            "Requested bytes live after the cursor's event, by category: "
            + ", ".join(CATEGORY_LABELS)
            + " (View > What the memory is)"
        )
        lay.addWidget(title)
        lay.addWidget(self.bar)
        lay.addWidget(self.text, 1)
        # Always laid out (empty until the breakdown is built): a line that appears later
        # would move every view below it while the user looks at them.

    def changeEvent(self, event) -> None:
        if event.type() in (
            QEvent.Type.PaletteChange,
            QEvent.Type.ApplicationPaletteChange,
        ) and hasattr(self, "title"):  # (built)
            self.title.setStyleSheet(theme.caption_style())
        super().changeEvent(event)

    def set_split(
        self,
        split: dict[str, int] | None,
        guessed: int = 0,
        caption: str = "",
        leaked: int = 0,
        scope: str = "",
        held: dict[str, int] | None = None,
    ) -> None:
        """``split`` (None: empty); ``guessed``: bytes of it placed by a guess; ``leaked``:
        bytes of it kept by leaking lines (the views paint those as a leak); ``scope``:
        whose split it is where the figures above are not only its ("device 1 only");
        ``held``: what CUDA graphs hold beside it (:meth:`MemoryBreakdown.graph_held_at`)."""
        self.split = dict(split or {})
        if split is None:
            self.bar.set_split(None)
            self.text.setText("")
            return
        self.bar.set_split(split, guessed, caption)
        # The total first: a long split (sharded training has ten categories) is cut at
        # the window's edge, and the total is what the split adds up to.
        self.text.setText(
            (f"{scope}: " if scope else "")
            + split_total(self.split, guessed)
            + (f" · leak: {format_bytes(leaked)}" if leaked else "")
            + f" = {format_split(self.split)}"
            + (f" · + {held_words(held)}" if held else "")
        )
        self.text.setToolTip(
            self.bar.toolTip() + (f"\nand {held_words(held)} ({HELD_WHY})" if held else "")
        )


def _shape_panel(panel: CategoriesPanel) -> None:
    """The tab's chart and Leaks view laid out for the main window's bottom area."""
    panel.leaks.caption.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    panel.body.setStretchFactor(0, 2)
    panel.body.setStretchFactor(1, 3)
    inner = panel.leaks.findChild(QSplitter)
    if inner is not None:  # the leaks' table beside their chart, for the same reason
        inner.setOrientation(Qt.Orientation.Horizontal)
    panel.leaks.chart.setMinimumHeight(40)  # (the tab must not raise the window's
    panel.timeline.plot.setMinimumHeight(40)  # minimum height)
    legend = panel.timeline.plot.getPlotItem().legend
    if legend is not None:  # (the timeline's header names the colours; no room here)
        legend.setVisible(False)


class CategoriesWiring(QObject):
    """Connects ``window`` (a MainWindow) to its own :class:`CategoryView` (``cv``)."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self._bars = ()
        self.w = w = window
        w.installEventFilter(self)  # (closing: the build in flight is cancelled)
        self.highlighted: int | None = None  # the category a split bar's click highlights
        self.cv = cv = CategoryView()
        self.doc = None
        # What leaking lines keep (bool per allocation; None: no leak) and the colour
        # indices present (categories, then LEAK): a leak is painted as a leak, and
        # every colour painted is in the legends - and none that is not.
        self.leak_mask: np.ndarray | None = None
        self.present: list[int] = []
        self._built_for = None  # (doc, device) whose breakdown is built or building
        self._waiting = None  # a live document that arrived while a build ran
        # (doc, device) whose build waits for the window's next paint (see _on_document)
        self._deferred: tuple | None = None
        self._deferred_timer = QTimer(self, singleShot=True, interval=DEFER_LIMIT_MS)
        self._deferred_timer.timeout.connect(self.start_deferred)
        # -- the tab beside Blocks and Call tree (a dock beside the segment map would
        # squeeze it: the timeline's header row already needs ~1240 px)
        self.panel = CategoriesPanel()
        self.panel.status.setWordWrap(True)
        self.panel.body.setOrientation(Qt.Orientation.Horizontal)  # (the bottom area is
        self.panel.shape(_shape_panel)  # wide and low: side by side; made when first shown)
        self.panel.layout().setContentsMargins(2, 2, 2, 0)
        self.panel.layout().setSpacing(2)
        self.tab_index = w.tabs.addTab(self.panel, TAB_TITLE)
        w.tabs.setTabToolTip(
            self.tab_index,
            "What the memory is: parameters, gradients, "
            "optimizer state, activations, temporaries, inputs; the "
            "iterations and the Leaks view (Ctrl+Shift+M)",
        )
        # -- the header line
        self.header_split = HeaderSplit()
        w.header.layout().addWidget(self.header_split)
        # -- the timeline's bands and colours, the map's overlay
        self.phases = PhaseBands(w.timeline)
        w.timeline.color_provider = self._timeline_colors
        w.timeline.legend_provider = self._legend
        w.map.legend_provider = self._map_legend
        w.map.tooltip_provider = self._block_lines
        self.overlay = CategoryOverlay(w.map.item)
        w.map.plot.addItem(self.overlay, ignoreBounds=True)
        w.table.row_filter = self._table_keep
        # A click on a part of a split bar highlights that category's blocks.
        self._bars = (self.header_split.bar, self.panel.split)
        for bar in self._bars:
            bar.installEventFilter(self)
            bar.setCursor(Qt.CursorShape.PointingHandCursor)
        # -- signals
        self._quiet = False  # the Leaks view selects its first row on its own: no highlight
        self.panel.highlightStacks.connect(self._on_leak_highlight)
        self.panel.cursorRequested.connect(w.set_cursor)
        self.panel.stackSelected.connect(self._show_leak_stack)
        self.panel.breakdownBuilt.connect(self._built)
        self.panel.buildEnded.connect(self._after_build)
        w.documentChanged.connect(self._on_document)
        w.momentShown.connect(self._on_moment)
        w.vs.events.cursor.connect(self._on_cursor)
        w.timeline.time_button.toggled.connect(lambda _on: self.phases.redraw())
        cv.events.breakdown.connect(self._on_breakdown)
        cv.events.color_mode.connect(lambda _m: self._recolor())
        cv.events.category_filter.connect(self._on_filter)
        self._build_menu()
        if w.persist:
            s = st.settings()
            mode = str(s.value(KEY_COLOR, COLOR_SITE))
            cv.set_color_mode(mode if mode in (COLOR_SITE, COLOR_CATEGORY) else COLOR_SITE)
            self.phases_action.setChecked(str(s.value(KEY_PHASES, "true")).lower() == "true")
        self.color_action.setChecked(cv.color_mode == COLOR_CATEGORY)

    def eventFilter(self, obj, event) -> bool:
        if obj is self.w and event.type() == QEvent.Type.Paint:
            if self._deferred is not None:  # (after this paint: queued behind it)
                QTimer.singleShot(0, self.start_deferred)
        elif obj is self.w and event.type() == QEvent.Type.Close:
            self._deferred = None
            self._deferred_timer.stop()
            self.panel.stop()
        elif obj in self._bars and event.type() == QEvent.Type.MouseButtonPress:
            x = event.position().x()
            hit = [n for n, x0, x1 in obj.parts() if x0 <= x < x1]
            if hit:
                self.highlight_category(CATEGORY_NAMES.index(hit[0]))
        return False

    def highlight_category(self, category: int | None) -> None:
        """Highlight the blocks of one category (a click on a split bar's part); the same
        category again, or None, clears it."""
        w = self.w
        if (
            category is None
            or category == self.highlighted
            or self.cv.bd is None
            or w.vs.doc is None
        ):
            self.highlighted = None
            w.vs.set_category_mask(None)
            return
        self.highlighted = category
        w.vs.set_category_mask(self.cv.category_stack_mask(category, len(w.vs.doc.snap.stacks)))
        w.statusBar().showMessage(
            f"Highlighted: {CATEGORY_LABELS[category]} (click the part again to clear)", 5000
        )

    # ------------------------------------------------------------------ menu
    def _build_menu(self) -> None:
        w, cv = self.w, self.cv
        view = next((a.menu() for a in w.menuBar().actions() if a.text() == "&View"), None)
        if view is None:
            view = w.menuBar().addMenu("&View")
        view.addSeparator()
        self.color_action = QAction("Colour by &category", w, checkable=True)
        self.color_action.setShortcut(QKeySequence("Ctrl+Shift+K"))
        tip = (
            "Colour the timeline's allocations, the segment map and the Blocks table by "
            "what the memory is (parameters, gradients, optimizer state, activations, "
            "temporaries, inputs), instead of by code site (Ctrl+Shift+K)"
        )
        self.color_action.setToolTip(tip)
        self.color_action.setStatusTip(tip)
        self.color_action.toggled.connect(
            lambda on: cv.set_color_mode(COLOR_CATEGORY if on else COLOR_SITE)
        )
        view.addAction(self.color_action)
        self.phases_action = QAction(
            "Iteration &phases on the timeline", w, checkable=True, checked=True
        )
        self.phases_action.setShortcut(QKeySequence("Ctrl+Shift+I"))
        self.phases_action.setToolTip(
            "Shade every iteration's forward, backward and "
            "optimizer step on the timeline (Ctrl+Shift+I)"
        )
        self.phases_action.setStatusTip(self.phases_action.toolTip())
        self.phases_action.toggled.connect(self._on_phases_toggled)
        view.addAction(self.phases_action)
        self.filter_menu = view.addMenu("Show &only category")
        self.filter_menu.setToolTipsVisible(True)
        group = QActionGroup(w)
        self.filter_actions: dict[int | None, QAction] = {}
        everything = QAction("&All categories", w, checkable=True, checked=True)
        everything.setShortcut(QKeySequence("Ctrl+Shift+0"))
        everything.triggered.connect(lambda: cv.set_category_filter(None))
        group.addAction(everything)
        self.filter_menu.addAction(everything)
        self.filter_actions[None] = everything
        for c, label in enumerate(CATEGORY_LABELS):
            a = QAction(label, w, checkable=True)
            key = FILTER_KEYS.get(CATEGORY_NAMES[c])
            if key is not None:
                a.setShortcut(QKeySequence(f"Ctrl+Shift+{key}"))
            a.setToolTip(
                f"Only {label} in the Blocks table; the other blocks veiled in the "
                "segment map and their stacks highlighted"
                + (f" (Ctrl+Shift+{key})" if key is not None else "")
            )
            a.triggered.connect(lambda _c=False, c=c: cv.set_category_filter([c]))
            group.addAction(a)
            self.filter_menu.addAction(a)
            self.filter_actions[c] = a
        self.tab_action = QAction("&What the memory is", w)
        # (M for memory: Ctrl+Shift+W is Tools > What-if's; one key, one action)
        self.tab_action.setShortcut(QKeySequence(TAB_SHORTCUT))
        self.tab_action.setToolTip(f"The categories, iterations and Leaks view ({TAB_SHORTCUT})")
        self.tab_action.setStatusTip(self.tab_action.toolTip())
        self.tab_action.triggered.connect(lambda: w.tabs.setCurrentWidget(self.panel))
        view.addAction(self.tab_action)

    def _on_phases_toggled(self, on: bool) -> None:
        self.phases.set_visible(on)
        self.w.timeline.update_legend()
        if self.w.persist:
            st.settings().setValue(KEY_PHASES, "true" if on else "false")

    # ------------------------------------------------------------------ feeding
    def _on_document(self, doc) -> None:
        w = self.w
        dev = w.vs.cursor_device
        if doc is None or dev is None:
            # Nothing to classify (no file, or one without a trace): nothing of the last
            # file stays - its tab title's leaks, its chart, its split.
            self._built_for = None
            self._waiting = None
            self._deferred = None
            self.w.tabs.setTabText(self.tab_index, TAB_TITLE)
            self.panel.start(doc, dev)
            self.cv.set_breakdown(None)
            self.highlighted = None
            return
        if self._built_for is not None and self._built_for[0] is doc and self._built_for[1] == dev:
            return
        thread = self.panel.thread
        live = w.live is not None
        if live and thread is not None and thread.isRunning():
            # Live updates come faster than a build: restarting each time would never
            # finish.  The build in flight ends first; the latest document follows.
            self._waiting = doc
            return
        self._waiting = None
        self._built_for = (doc, dev)
        self._quiet = True
        if not live:  # (live: the last breakdown stays shown until the next one lands)
            self.w.tabs.setTabText(self.tab_index, TAB_TITLE)
            self.cv.set_breakdown(None)
        if not live and w.isVisible():
            # The build's thread and the GUI thread share the interpreter (the GIL): started
            # now, it would hold back the window's first paint of the document, which the
            # user waits for.  It starts right after that paint instead (or after
            # DEFER_LIMIT_MS, or when something waits for it: start_deferred).
            self._deferred = (doc, dev)
            self.panel.clear_for_build()
            self._deferred_timer.start()
            return
        self._deferred = None
        self.panel.start(doc, dev)  # (its breakdownBuilt / buildEnded: connected once)

    def start_deferred(self) -> None:
        """Start the build that waits for the window's paint now (nothing if none does)."""
        pending, self._deferred = self._deferred, None
        self._deferred_timer.stop()
        if pending is not None and pending[0] is self.w.vs.doc:
            self.panel.start(*pending)

    def settled(self) -> bool:
        """What the header line and the tab show is the latest build's outcome (its
        breakdown, or why there is none): no build in flight or waiting to start, none
        undelivered."""
        return self._deferred is None and self.panel.settled() and self.cv.bd is self.panel.bd

    def _after_build(self) -> None:
        """A live document that arrived during the build: its turn now."""
        doc, self._waiting = self._waiting, None
        if doc is not None and doc is self.w.vs.doc:
            self._on_document(doc)

    def _on_leak_highlight(self, mask) -> None:
        if not self._quiet:  # (a row the user picked, not the first one shown)
            self.w.vs.set_category_mask(mask)

    def _built(self, bd, spans) -> None:
        if self._built_for is None:
            return  # (the file closed meanwhile; the panel drops superseded builds)
        self._quiet = False
        n = len(bd.leaks)
        self.w.tabs.setTabText(
            self.tab_index, TAB_TITLE + (f" ({n} leak{'s' if n > 1 else ''})" if n else "")
        )
        if bd.device == self._built_for[1]:
            self.cv.set_breakdown(bd, spans)

    def _on_cursor(self, dev, k) -> None:
        if dev is not None and self._built_for is not None and dev != self._built_for[1]:
            self._on_document(self.w.vs.doc)  # another device's trace: its own breakdown
            return
        self.panel.set_cursor(k if k is not None and k >= 0 else None)
        self._update_header()

    def _on_breakdown(self, bd) -> None:
        self.leak_mask = leak_interval_mask(bd) if bd is not None and bd.leaks else None
        self.present = self._colors_present(bd)
        self.phases.set_spans(self.cv.spans)
        self.w.timeline.update_legend()
        self._update_header()
        self._recolor()
        if self.cv.category_filter is not None:
            self.w.table.apply_filter()

    def _on_moment(self) -> None:
        self._update_header()
        if self.cv.bd is not None:
            self._color_map_and_table()

    def _on_filter(self, categories) -> None:
        self.filter_actions[
            None if categories is None or len(categories) != 1 else next(iter(categories))
        ].setChecked(True)
        w = self.w
        w.table.apply_filter()
        if categories is not None and self.cv.bd is not None and w.vs.doc is not None:
            mask = np.zeros(len(w.vs.doc.snap.stacks), bool)
            for c in categories:
                mask |= self.cv.category_stack_mask(c, len(mask))
            w.vs.set_category_mask(mask)
        else:
            w.vs.set_category_mask(None)
        self._color_map_and_table()

    # ------------------------------------------------------------------ drawing
    def _update_header(self) -> None:
        bd, k = self.cv.bd, self.w.vs.cursor_k
        if bd is None or k is None or not 0 <= k < bd.n_events:
            self.header_split.set_split(None)
            return
        # (a breakdown is one device's: beside figures summing several, it says whose)
        scope = f"device {bd.device} only" if self.w.vs.spans_devices() else ""
        self.header_split.set_split(
            bd.split_at(k),
            bd.guessed_bytes_at(k),
            f"after event {k}",
            bd.leaked_bytes_at(k) if bd.leaks else 0,
            scope,
            bd.graph_held_at(k),
        )

    def _timeline_colors(self):
        """The timeline's colour provider: (colour index per interval, ARGB palette)."""
        if not self.cv.by_category:
            return None
        tl = self.w.timeline
        cats = self.cv.interval_categories()
        built = self._built_for
        if (
            tl.iv is None
            or len(cats) != len(tl.iv)
            or built is None
            or built[0] is not tl.doc
            or self.cv.bd.device != tl.device
        ):
            return None  # (a breakdown of another document or device: not its colours)
        if self.leak_mask is not None and len(self.leak_mask) == len(cats):
            cats = np.where(self.leak_mask, np.int8(LEAK), cats).astype(cats.dtype)
        palette = [color(c).rgba() for c in range(len(CATEGORY_NAMES) + 1)]
        return cats, palette

    def colored_categories(self) -> np.ndarray | None:
        """The colour index per allocation the views paint: its category, or LEAK for
        what a leaking line keeps (None: no breakdown)."""
        cats = self.cv.interval_categories()
        if cats is None or self.leak_mask is None or len(self.leak_mask) != len(cats):
            return cats
        return np.where(self.leak_mask, np.int8(LEAK), cats).astype(cats.dtype)

    def _colors_present(self, bd) -> list[int]:
        if bd is None:
            return []
        cats = self.colored_categories()
        if cats is None:
            return []
        return [int(c) for c in np.unique(cats) if c >= 0]

    def _recolor(self) -> None:
        w, cv = self.w, self.cv
        self.color_action.setChecked(cv.color_mode == COLOR_CATEGORY)
        if w.persist:
            st.settings().setValue(KEY_COLOR, cv.color_mode)
        tl = w.timeline
        if tl.n and tl.iv is not None and tl.layout is not None:
            tl.refresh_stack()  # (the layout too: it may be of a document just replaced)
        tl.update_legend()
        w.map.update_legend()
        # The longer category legends are cut rather than widen the window (and squeeze
        # the other views); their tooltips say what the colours are.
        # The category legends wrap (two lines) rather than lose an entry: a colour on
        # the screen that the legend does not name is a colour nobody can read.
        tl.legend.setWordWrap(cv.by_category)
        for legend in (tl.legend, w.map.legend):
            legend.setMinimumWidth(360 if cv.by_category else 0)  # (0: its own hint)
        self._color_map_and_table()

    def _legend(self, parts: list[str]) -> list[str]:
        """The timeline's legend: the category colours while colouring by category, and
        the phase bands' colours while they show."""
        if self.cv.by_category:
            # (the curves' names give way: the header row has room for one legend)
            parts = [swatch_html(c) for c in self._legend_colors()] + parts[len(CURVES) :]
        return parts

    def _legend_colors(self) -> list[int]:
        """The colour indices the category legends list: those present (all of the
        categories until a breakdown says which are)."""
        return self.present if self.cv.bd is not None else list(range(len(CATEGORY_NAMES)))

    def _map_legend(self, parts: list[str]) -> list[str]:
        """The segment map's legend: live blocks by category while colouring by it."""
        if self.cv.by_category:
            # (allocated, rounding waste, pending free and the state 'unknown' give way)
            return [swatch_html(c) for c in self._legend_colors()] + parts[3:4] + parts[5:]
        return parts

    def _block_lines(self, block: int) -> list[str]:
        """The map's tooltip: what a live block is, and how that was decided."""
        bd, vs = self.cv.bd, self.w.vs
        if bd is None or vs.cursor_device != bd.device:
            return []
        i = vs.interval_of_block(block)
        if i < 0 or i >= len(bd.category):
            return []
        return [bd.explain(i)]

    def _block_categories(self, doc) -> np.ndarray | None:
        if self.cv.bd is None or doc is None:
            return None
        return self.cv.block_categories(self.w.vs.cursor_k, doc.snap.blocks.address)

    def _block_colors(self, doc, cats: np.ndarray) -> np.ndarray:
        """``cats`` (per block of ``doc``) with the blocks a leaking line keeps as LEAK."""
        bd = self.cv.bd
        if bd is None or self.leak_mask is None or self.w.vs.cursor_k is None:
            return cats
        leaked = leaked_blocks(bd, self.w.vs.cursor_k, doc.snap.blocks.address, self.leak_mask)
        return np.where(leaked, np.int8(LEAK), cats).astype(cats.dtype)

    def _color_map_and_table(self) -> None:
        w, cv = self.w, self.cv
        doc = w.vs.view_doc
        cats = self._block_categories(doc) if (cv.by_category or cv.category_filter) else None
        if cats is not None and cv.by_category:
            colors = self._block_colors(doc, cats)
        else:
            colors = cats
        layout = w.map.item.layout
        if cats is None or layout is None:
            self.overlay.set_categories(None, None)
        else:
            per = cats[layout.blocks]
            keep = None
            if cv.category_filter is not None:  # (by category, not by colour: leaks too)
                keep = np.isin(per, np.fromiter(cv.category_filter, np.int64))
            self.overlay.set_categories(
                colors[layout.blocks] if cv.by_category else np.full(len(per), -1), keep
            )
        cats = colors
        model = w.table.model
        if cv.by_category and cats is not None:
            qcolors = [QColor(*row.tolist()) for row in rgba_table()]
            model.block_colors = lambda b, cats=cats: (
                qcolors[int(cats[b])] if 0 <= b < len(cats) and cats[b] >= 0 else None
            )
        else:
            model.block_colors = None
        if model.rowCount():
            model.dataChanged.emit(
                model.index(0, 0), model.index(model.rowCount() - 1, model.columnCount() - 1)
            )

    def _table_keep(self, doc, rows: np.ndarray):
        """The Blocks table's category filter: bool per row, None for all."""
        return self.cv.keep_blocks(self.w.vs.cursor_k, doc.snap.blocks.address[rows])

    def _show_leak_stack(self, stack: int) -> None:
        if self._quiet:
            return
        lk = self.panel.leaks.selected_leak()
        facts = (
            f"<b>leak</b>: {lk.sentence()}<br>Its blocks are highlighted." if lk is not None else ""
        )
        self.w.stack.show_stack(int(stack), facts)
