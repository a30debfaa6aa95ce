"""A panel's selection drawn on the main window it was opened from.

The Diagnosis and What-if panels predict reserved memory under a change; the row the
user selects is drawn on the window's timeline as a keyed predicted-curve overlay
(:meth:`~..timeline.panel.TimelinePanel.set_overlay`) and, where the change acts on
known allocations, highlighted in the map and the timeline through the view state
(:meth:`~...model.view.view_state.ViewState.set_panel_mask`, whose label the legends show).
Both go when the selection is cleared (:meth:`WindowLink.clear`), the panel closes
(its ``closed`` signal) or the window shows another document or device (the panel's
prediction is of the old one).  One :class:`WindowLink` per panel does that wiring.
"""

from __future__ import annotations

import numpy as np


def shown_device(window, snap) -> int | None:
    """The device ``window``'s timeline shows, where ``snap`` has trace events of it (a
    multi-GPU file opens at its OOM's device): the one a panel opened from the window
    predicts, so that its curves can go on that timeline.  None: the model's default."""
    shown = getattr(getattr(window, "timeline", None), "device", None)
    dev = snap.trace.device
    return shown if shown is not None and len(dev) and bool((dev == shown).any()) else None


class WindowLink:
    """Draws one panel's selection (overlay ``key``) on ``window``, for the document
    the window shows now; ``closed``: the panel's signal emitted when it closes."""

    def __init__(self, window, key: str, closed=None) -> None:
        self.window = window
        self.vs = getattr(window, "vs", None)
        self.doc = self.vs.doc if self.vs is not None else None
        self.key = key
        self.highlighted = False
        if self.vs is not None:  # (its document event comes before the views redraw)
            self.vs.events.document.connect(self._document_replaced)
        if closed is not None:
            closed.connect(self.close)

    @property
    def current(self) -> bool:
        """The window still shows the document the panel was opened over."""
        return self.doc is not None and self.vs is not None and self.vs.doc is self.doc

    def _timeline(self):
        tl = getattr(self.window, "timeline", None)
        return tl if tl is not None and hasattr(tl, "set_overlay") else None

    def overlay(
        self,
        device: int,
        label: str,
        curve_x=None,
        y=None,
        level: int | None = None,
        value_range: tuple[int, int] | None = None,
        ends: bool = False,
    ) -> bool:
        """Show a predicted curve (or level) of ``device`` named ``label`` on the timeline
        (``ends``: it stops at its last request, a predicted OOM); False (and the old one
        gone) when the window shows another document or device."""
        tl = self._timeline()
        if tl is None or not self.current:
            return False
        if tl.device != device:  # the window shows another device
            tl.clear_overlay(self.key)
            return False
        has_curve = y is not None and curve_x is not None and len(y) > 0
        return tl.set_overlay(
            self.key,
            label,
            curve_x if has_curve else None,
            y if has_curve else None,
            None if has_curve else level,
            value_range,
            ends and has_curve,
        )

    def highlight(self, mask: np.ndarray | None, label: str) -> None:
        """Highlight the stacks of ``mask`` in the window's views, named ``label`` in the
        legends (None: the window's own highlight again)."""
        if not self.current or self.vs is None:
            return
        self.highlighted = mask is not None
        self.vs.set_panel_mask(mask, label)

    def clear(self) -> None:
        """The selection was cleared: the overlay and the highlight go."""
        if not self.current:
            return  # another document: the timeline dropped the overlay with the old one
        tl = self._timeline()
        if tl is not None:
            tl.clear_overlay(self.key)
        if self.highlighted:
            self.highlight(None, "")

    def close(self) -> None:
        """The panel closed: as :meth:`clear`, and no more document events."""
        self.clear()
        self._disconnect()

    def _disconnect(self) -> None:
        if self.vs is not None:  # (a slot no longer connected is ignored)
            self.vs.events.document.disconnect(self._document_replaced)

    def _document_replaced(self, new_doc) -> None:
        """The window shows another document: the highlight of the old one's stacks goes
        before any view draws the new one with it (the timeline drops the overlay
        itself; the view state forgot the panel's mask)."""
        if new_doc is self.doc:
            return
        self._disconnect()
        if self.highlighted:
            self.highlighted = False
            for view in (getattr(self.window, "map", None), getattr(self.window, "timeline", None)):
                if view is not None and hasattr(view, "set_highlight"):
                    view.set_highlight(None)
