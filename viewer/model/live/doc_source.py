"""Documents of a live session, each made from the last one's replay: one model fed
incrementally (Tracy's worker), never the whole ring replayed per update.

The first picture (and any after a gap in the trace) is a full
``Document.build(snap, live=True)``; every later update of the ring extends its
timeline by the new trace rows (:meth:`Document.extend` over
:meth:`Timeline.extend`: the kept C replay state goes on from the last event;
intervals and curve summaries grow in place; labels only for new stacks).  Rows the ring
dropped at the front are passed on as ``dropped`` (the timeline compacts itself when they
are many).
"""

from __future__ import annotations

from ..core.snapshot import Snapshot
from ..replay.timeline import Timeline
from ..view.document import Document


class LiveDocumentSource:
    """``apply(snap, dropped_total)`` per live update -> the document to show."""

    def __init__(self) -> None:
        self.doc: Document | None = None  # the last document (its timeline grows)
        self.timeline: Timeline | None = None
        self.rows = 0  # trace rows of the last snapshot applied
        self.dropped = 0  # the ring's dropped counter at the last snapshot
        self.builds = 0  # full builds (the first update, gaps)
        self.extends = 0  # updates that only replayed their new rows
        self.fallbacks = 0  # extensions that disagreed with the update's segments: rebuilt

    def needs_build(self, dropped_total: int, gap: bool = False) -> bool:
        """Whether the next update must be replayed from scratch (nothing to extend,
        a gap in the trace, or the ring forgot more than it held)."""
        if self.timeline is None or gap or dropped_total < self.dropped:
            return True
        return self.rows - (dropped_total - self.dropped) < 0

    def adopt(self, doc: Document, dropped_total: int) -> Document:
        """Continue from ``doc`` (built with ``live=True``, e.g. on a worker thread)."""
        if doc.timeline is None or not doc.timeline.live:
            raise ValueError("adopt() needs a document built with live=True")
        self.doc = doc
        self.timeline = doc.timeline
        self.rows = len(doc.snap.trace.action)
        self.dropped = int(dropped_total)
        self.builds += 1
        return doc

    def apply(self, snap: Snapshot, dropped_total: int, gap: bool = False) -> Document:
        """The document of ``snap``, the ring now (``dropped_total``: rows it has dropped
        since the session began)."""
        if self.needs_build(dropped_total, gap) or self.doc is None:
            return self.adopt(Document.build(snap, live=True), dropped_total)
        dropped = int(dropped_total) - self.dropped
        first_row = self.rows - dropped
        before = self.inconsistencies()
        doc = self.doc.extend(snap, first_row, dropped)  # new labels only for new stacks
        self.timeline = doc.timeline
        if self.inconsistencies() > before:
            # The new rows do not account for the update's segments (a trace without
            # segment events, events lost between polls): what a full replay of this ring
            # shows is the truth here, never a drifted extension.
            self.fallbacks += 1
            return self.adopt(Document.build(snap, live=True), dropped_total)
        self.doc = doc
        self.rows = len(snap.trace.action)
        self.dropped = int(dropped_total)
        self.extends += 1
        return doc

    def inconsistencies(self) -> int:
        """Replay inconsistencies over the devices (the replay against the recording)."""
        tl = self.timeline
        return sum(int(r.inconsistencies) for r in tl.devices.values()) if tl is not None else 0
