"""What the memory is, in the window: the split at the cursor, the category timeline with
iteration bands, and the Leaks view - one panel, fed by a worker thread.

How a window wires it in (the main window's is :class:`~.wiring.CategoriesWiring`)::

    panel = CategoriesPanel()
    tabs.addTab(panel, "What it is")                      # or a dock
    panel.start(doc, device)                              # after a document is loaded
    cursor_moved.connect(panel.set_cursor)                # time travel -> split + cursor
    panel.cursorRequested.connect(go_to_event)            # a click on the category timeline
    panel.highlightStacks.connect(set_highlight)          # a leak's stacks (bool per stack)
    panel.stackSelected.connect(stack_panel.show_stack)   # a leak's stack

The breakdown is built off the GUI thread (:class:`BreakdownThread`, progress and
cancel through the model's :class:`Progress`); the panel only draws.  Its chart and
Leaks view are made when first shown or used (:attr:`CategoriesPanel.timeline`,
:attr:`~CategoriesPanel.leaks`): a tab behind another costs the window's first paint
nothing; once made, they show what they would have shown all along.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Qt, QThread, Signal
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from ...model.categories.iterations import describe_iterations
from ...model.categories.wording import HELD_WHY, held_words
from ...model.core.errors import LoadCancelled
from ...model.core.progress import Progress
from ...model.core.units import plural
from ...model.view.category_view import phase_spans
from .category_timeline import CategoryTimeline
from .leaks_view import LeaksView
from .split_bar import CategorySplitBar

if TYPE_CHECKING:
    from ...model.categories.breakdown import MemoryBreakdown

NO_SNAPSHOT = "No snapshot"
NO_TRACE = (
    "This snapshot has no allocation history (no trace), so what the memory is "
    "cannot be told: record with torch.cuda.memory._record_memory_history() "
    "(Help > How to record a snapshot)."
)
NO_TRACE_LEAKS = "Leaks need the allocation history: this snapshot has none."
CLASSIFYING = "Classifying the memory..."


class BreakdownThread(QThread):
    """Builds a :class:`MemoryBreakdown` for one device of a document."""

    progressed = Signal(float)
    built = Signal(object)  # MemoryBreakdown
    failed = Signal(str)

    def __init__(self, doc, device: int, parent=None) -> None:
        super().__init__(parent)
        self.doc = doc
        self.device = device
        self.cancel_event = threading.Event()
        self.spans: list | None = None  # the breakdown's phase spans, built with it

    def cancel(self) -> None:
        self.cancel_event.set()

    def run(self) -> None:  # worker thread
        progress = Progress(lambda stage, f: self.progressed.emit(f), self.cancel_event)
        try:
            # Imported here, off the GUI thread: the breakdown's rules are not needed
            # before the window's first paint (the categories package reads them lazily).
            from ...model.categories.breakdown import MemoryBreakdown

            iv = self.doc.intervals(self.device) if hasattr(self.doc, "intervals") else None
            bd = MemoryBreakdown.build(
                self.doc.snap, self.doc.timeline, self.device, progress, intervals_of_device=iv
            )
            # The views' first draw needs these: built here, not on the GUI thread when
            # the breakdown lands (seconds on 10M events: the window would freeze).
            bd.category_curves(np.zeros(1, np.int64))  # (its per-category index, cached)
            self.spans = phase_spans(bd)
        except LoadCancelled:
            return
        except (ValueError, IndexError, KeyError, MemoryError) as exc:
            self.failed.emit(f"memory categories unavailable: {exc}")
            return
        if not self.cancel_event.is_set():
            self.built.emit(bd)


class CategoriesPanel(QWidget):
    """Split bar + category timeline + leaks, for one device's breakdown."""

    cursorRequested = Signal(int)
    # The breakdown of the latest build (and its phase spans), once this panel shows it,
    # and the end of that build (built or not).  Signals of the panel, not of each build's
    # thread: connected once, they cannot miss a build that ends before a caller of
    # start() could connect to its thread.
    breakdownBuilt = Signal(object, object)  # MemoryBreakdown, its phase spans (list)
    buildEnded = Signal()
    highlightStacks = Signal(object)  # np.ndarray bool per stack (None: clear)
    allocationsSelected = Signal(object)  # interval ids
    stackSelected = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.bd: MemoryBreakdown | None = None
        self.thread: BreakdownThread | None = None
        self._ended = True  # the latest build's thread has finished (and that is handled)
        self.status = QLabel(NO_SNAPSHOT)
        self.split = CategorySplitBar()
        self.body = QSplitter(Qt.Orientation.Vertical)  # the chart over the Leaks view
        self._timeline: CategoryTimeline | None = None
        self._leaks: LeaksView | None = None
        self._shapers: list[Callable[[CategoriesPanel], None]] = []
        # What the chart and the Leaks view were last told while not made yet: the
        # breakdown (``bd``), the cursor and the Leaks view's last call (method, args).
        self._cursor_k: int | None = None
        self._leaks_call: tuple[str, tuple] = ("set_leaks", ([],))
        self._catching_up = False
        lay = QVBoxLayout(self)
        lay.addWidget(self.status)
        lay.addWidget(self.split)
        lay.addWidget(self.body)

    # -- the chart and the Leaks view, made on first use ---------------------------------
    @property
    def timeline(self) -> CategoryTimeline:
        """The category timeline (made now if it was not)."""
        return self._made()[0]

    @property
    def leaks(self) -> LeaksView:
        """The Leaks view (made now if it was not)."""
        return self._made()[1]

    def made(self) -> bool:
        """Whether the chart and the Leaks view exist yet."""
        return self._timeline is not None

    def shape(self, shaper: Callable[["CategoriesPanel"], None]) -> None:
        """Call ``shaper(panel)`` once the chart and the Leaks view are made (at once if
        they are): how the window lays them out."""
        self._shapers.append(shaper)
        if self.made():
            shaper(self)

    def showEvent(self, event) -> None:
        self._made()
        super().showEvent(event)

    def _made(self) -> tuple[CategoryTimeline, LeaksView]:
        if self._timeline is None or self._leaks is None:
            timeline, leaks = CategoryTimeline(), LeaksView()
            self._timeline, self._leaks = timeline, leaks
            self.body.addWidget(timeline)
            self.body.addWidget(leaks)
            self.body.setStretchFactor(0, 3)
            self.body.setStretchFactor(1, 2)
            timeline.eventClicked.connect(self._event_clicked)
            leaks.allocationsSelected.connect(self._leak_selected)
            leaks.stackSelected.connect(self._leak_stack)
            for shaper in self._shapers:
                shaper(self)
            # What they would show had they been there all along (a leak row selected by
            # the catch-up is not the user's: no highlight, no stack shown).
            self._catching_up = True
            try:
                timeline.set_breakdown(self.bd)
                timeline.set_cursor(self._cursor_k)
                method, args = self._leaks_call
                getattr(leaks, method)(*args)
            finally:
                self._catching_up = False
        return self._timeline, self._leaks

    def _to_leaks(self, method: str, *args) -> None:
        """``leaks.method(*args)`` now, or when the Leaks view is made."""
        self._leaks_call = (method, args)
        if self._leaks is not None:
            getattr(self._leaks, method)(*args)

    # -- feeding ------------------------------------------------------------------------
    def start(self, doc, device: int | None) -> None:
        """Build the breakdown of ``device`` of ``doc`` in the background (None: clear)."""
        self.stop()
        self.set_breakdown(None)
        if (
            doc is None
            or device is None
            or doc.timeline is None
            or doc.timeline.replay(device) is None
        ):
            # Not "no leak": without the allocation history nothing can be judged.
            self.status.setText(NO_SNAPSHOT if doc is None else NO_TRACE)
            self._to_leaks("set_unavailable", NO_SNAPSHOT if doc is None else NO_TRACE_LEAKS)
            return
        self.status.setText(CLASSIFYING)
        self._ended = False
        self.thread = BreakdownThread(doc, device, self)
        self.thread.progressed.connect(lambda f: self.status.setText(f"{CLASSIFYING} {f:.0%}"))
        self.thread.built.connect(self._on_built)
        self.thread.failed.connect(self.status.setText)
        self.thread.finished.connect(self._on_finished)
        self.thread.start()

    def clear_for_build(self) -> None:
        """A build is about to start (:meth:`start`): the last one stopped, its breakdown
        no longer shown, the status saying what comes."""
        self.stop()
        self.set_breakdown(None)
        self.status.setText(CLASSIFYING)

    def _on_built(self, bd) -> None:
        # (queued: a build superseded by another file may still deliver; not shown)
        thread = self.sender()
        if thread is self.thread:
            self.set_breakdown(bd)
            self.breakdownBuilt.emit(bd, thread.spans)

    def _on_finished(self) -> None:
        # (queued after the build's result or failure: both are shown by now)
        if self.sender() is self.thread:
            self._ended = True
            self.buildEnded.emit()

    def settled(self) -> bool:
        """No build in flight, and what the last one ended with is shown: its breakdown,
        or why there is none (a failure, no trace)."""
        return self.thread is None or self._ended

    def stop(self) -> None:
        """Cancel a build in flight (and wait for its thread)."""
        if self.thread is not None:
            self.thread.cancel()
            self.thread.wait()
            self.thread = None

    def set_breakdown(self, bd: MemoryBreakdown | None) -> None:
        self.bd = bd
        if self._timeline is not None:
            self._timeline.set_breakdown(bd)
        if bd is None:
            self.split.set_split(None)
            self._to_leaks("set_leaks", [])
            return
        what = describe_iterations([it.to_dict() for it in bd.iterations])
        self.status.setText(f"device {bd.device}: {what}, {plural(len(bd.leaks), 'leak')}")
        self._to_leaks("set_leaks", bd.leaks, what.split(" (")[0] if bd.iterations else None)
        k = int(np.argmax(bd.requested)) if bd.n_events else None
        self.set_cursor(k, caption="at the peak")

    def set_cursor(self, k: int | None, caption: str | None = None) -> None:
        """The split after event ``k`` (the time-travel cursor)."""
        bd = self.bd
        if bd is None or k is None or not 0 <= k < bd.n_events:
            k = None
            self.split.set_split(None)
        else:
            self.split.set_split(
                bd.split_at(k), bd.guessed_bytes_at(k), caption or f"after event {k}"
            )
            held = bd.graph_held_at(k)
            if held:  # beside the split, not part of it (the allocator counts it free)
                self.split.setToolTip(
                    f"{self.split.toolTip()}\nand {held_words(held)} ({HELD_WHY})"
                )
        self._cursor_k = k
        if self._timeline is not None:
            self._timeline.set_cursor(k)

    # -- reactions ----------------------------------------------------------------------
    def _event_clicked(self, k: int) -> None:
        self.set_cursor(k)
        self.cursorRequested.emit(k)

    def _leak_stack(self, stack: int) -> None:
        if not self._catching_up:
            self.stackSelected.emit(stack)

    def _leak_selected(self, ids: np.ndarray) -> None:
        if self._catching_up:
            return
        self.allocationsSelected.emit(ids)
        bd = self.bd
        if bd is None:
            return
        mask = np.zeros(len(bd.snap.stacks), bool)
        stacks = bd.intervals.stack[ids]
        mask[stacks[stacks >= 0]] = True
        self.highlightStacks.emit(mask)
