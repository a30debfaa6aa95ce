"""What the window shows, as one Qt-free object: the document, the selection (device,
pool, stream, segment kind), the timeline's cursor, the selected block or allocation
and the highlight masks, with change events the views subscribe to.

The logic that decides *what* to show lives here, testable without Qt: which moment a
document opens at, which OOM a jump goes to, which block an allocation is at a moment,
and how a selection carries over to a newer document of the same process (live
attach).  The Qt side (the main window) orders the drawing.

Events (see :class:`~vramscope.viewer.model.view.evented.EmitterGroup`): ``document``
(doc; :attr:`ViewState.origin` says why), ``selection`` (Selection), ``trace``
(device: the cursor's trace changed, the cursor at its end), ``cursor`` (device, k),
``moment`` (keep_view: what the views show changed, redraw once), ``selected``
(block, interval), ``highlight`` (mask or None; :meth:`ViewState.highlight_label`
says what it is, for the legends).

Order and coalescing (the views rely on both): one change of document emits
``document``, ``trace``, ``cursor``, ``moment``; one cursor move emits ``cursor`` then
``moment``, once each; a new selection emits (``trace``, ``cursor`` if the device's
trace changed,) ``selection``, ``moment``.  Inside :meth:`ViewState.batch` the
``moment`` is held and emitted once at its end (``keep_view`` only if every change
kept it), so a compound change redraws each view once.

Why one long class: what it holds and emits is one contract the views rely on, and its
helpers are small queries of it; split up, the order and coalescing above would be
spread over several objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from ..analysis.figures import Selection
from ..core.snapshot import HOST_DEVICE, BlockState
from ..core.units import event_of, plural
from ..replay.timeline import Intervals
from .document import Document, pool_label, stream_label
from .evented import EmitterGroup

HOST_LABEL = "host (pinned)"  # the device selector's entry for pinned host memory
HOST_SCOPE = "pinned host memory (its own device: never part of a GPU figure)"


# What the legends call each kind of highlight (:meth:`ViewState.highlight_label`).
HIGHLIGHT_SEARCH = "search match"
HIGHLIGHT_NODE = "call-tree node"
HIGHLIGHT_CATEGORY = "category / leak"  # (the categories views may name theirs)
HIGHLIGHT_PANEL = "selected in a panel"
HIGHLIGHT_DIFF_ROW = "selected diff row"  # the Diff window's maps: a stack row's blocks
HIGHLIGHT_DIFF_NODE = "selected call path"  # the Diff window's maps: a tree node's blocks


@dataclass(frozen=True)
class IntervalKey:
    """What identifies one allocation of the timeline in a newer document of the same
    process: its device, address, size and the time of its alloc event."""

    device: int
    addr: int
    time_us: int | None
    size: int


@dataclass(frozen=True)
class Carried:
    """A view state's picks, kept across documents by value (addresses, times), never
    by index: indices mean something in their own document only."""

    selection: Selection
    addr: int  # the selected block's address (-1: none)
    gap: tuple[int, int] | None  # a selected free gap: (address, size)
    interval: IntervalKey | None


@dataclass(frozen=True)
class OomMarks:
    """The cursor among the OOMs of its trace."""

    count: int  # OOM events in the trace
    before: bool  # an OOM before the cursor
    after: bool  # an OOM after the cursor
    not_latest: bool  # the cursor is before the trace's last event
    number: int  # 1-based: the OOM the cursor is at (0: none)
    last_k: int  # the last OOM's event (-1: none)
    here: object  # the OOM at the cursor (None: none)


class ViewState:
    """The state of one window over one document (see the module docstring)."""

    def __init__(self) -> None:
        self.events = EmitterGroup(
            "document", "selection", "trace", "cursor", "moment", "selected", "highlight"
        )
        # Why the latest ``document`` event: "open" (a file), "host" (to or from the
        # pinned host memory's own document), "replace" (a newer picture, live).
        self.origin = "open"
        self._batch = 0
        self._held_moment: bool | None = None  # keep_view of a moment held by batch()
        self.doc: Document | None = None
        # The document of the opened file (its GPUs); ``doc`` is the pinned host memory's
        # own document while that is shown (``host_shown``).
        self.file_doc: Document | None = None
        self.host_shown = False
        self._host_doc: tuple[Document, Document] | None = None  # (file doc, host doc)
        self.view_doc: Document | None = None  # the document at the cursor
        self.selection = Selection()
        self.cursor_device: int | None = None
        self.cursor_k = -1
        self.selected_block = -1  # a block of view_doc
        self.selected_addr = -1  # the selected block's address: kept across moments
        self.selected_interval = -1  # an allocation of the timeline (interval id)
        # Who picked (the latest ``selected`` event): "map", "table" (that view shows it
        # already), "interval" (the timeline), "moment" (the same block at a new moment),
        # "moment-interval" (the picked allocation at a new moment), "moment-none".
        self.pick_origin = ""
        self.node_mask: np.ndarray | None = None  # per stack: the call-tree node's stacks
        self.search_mask: np.ndarray | None = None  # per stack: frames matching the search
        self.category_mask: np.ndarray | None = None  # per stack: a leak's / category's
        self.category_label = ""  # what the category mask is (the legends name it)
        # Per stack: what a panel's selection acts on (a remedy of the Diagnosis panel),
        # drawn over the window's own highlight while set; ``panel_label`` names it.
        self.panel_mask: np.ndarray | None = None
        self.panel_label = ""

    # ------------------------------------------------------------------ document
    @contextmanager
    def batch(self) -> Iterator[None]:
        """Changes inside emit one ``moment`` at the end (see the module docstring)."""
        self._batch += 1
        try:
            yield
        finally:
            self._batch -= 1
            if not self._batch and self._held_moment is not None:
                keep, self._held_moment = self._held_moment, None
                self.events.moment.emit(keep)

    def _moment(self, keep_view: bool) -> None:
        if self._batch:
            held = self._held_moment
            self._held_moment = keep_view if held is None else (held and keep_view)
        else:
            self.events.moment.emit(keep_view)

    def set_document(
        self, doc: Document | None, host: bool = False, origin: str | None = None
    ) -> None:
        """A new document: the default selection, the cursor at the end, nothing picked.
        ``host``: ``doc`` is the file's pinned host memory (:meth:`host_document`), the
        file's own document stays :attr:`file_doc`."""
        if not host:
            self.file_doc = doc
        self.origin = origin or ("host" if host else "open")
        self.host_shown = bool(host)
        self.doc = doc
        self.view_doc = doc
        self.selected_block = self.selected_addr = self.selected_interval = -1
        self.node_mask = self.category_mask = self.panel_mask = None
        self.selection = Selection(device=HOST_DEVICE) if host else self.default_selection(doc)
        self.reset_cursor(emit=False)
        self.events.document.emit(doc)
        self.reset_cursor()
        self._moment(False)

    def show_host(self, on: bool, device: int | None = None) -> bool:
        """The file's pinned host memory as its own document (``on``), or the file's GPUs
        again (``device``: the one to select); one ``moment``.  False when there is none."""
        target = self.host_document() if on else self.file_doc
        if target is None:
            return False
        with self.batch():
            self.set_document(target, host=on, origin="host")
            if not on:
                self.set_selection(Selection(device=device))
        return True

    def host_document(self) -> Document | None:
        """The document of the file's pinned host memory (``host_segments`` /
        ``host_traces``, device :data:`HOST_DEVICE`), built once per file; None when the
        file has none."""
        f = self.file_doc
        if f is None or not f.snap.has_host_memory:
            return None
        if self._host_doc is None or self._host_doc[0] is not f:
            host = f.snap.host_snapshot()
            if host is None:
                return None
            self._host_doc = (f, Document.build(host))
        return self._host_doc[1]

    def device_choices(self) -> list[tuple[str, int | None]]:
        """The device selector's entries: all, each GPU with segments, and the pinned host
        memory when the file has any (after the GPUs: it is no GPU)."""
        f = self.file_doc
        out: list[tuple[str, int | None]] = [("All devices", None)]
        if f is None:
            return out
        out += [(f"Device {d}", int(d)) for d in sorted(set(f.snap.segments.device.tolist()))]
        if f.snap.has_host_memory:
            out.append((HOST_LABEL, HOST_DEVICE))
        return out

    @staticmethod
    def default_selection(doc: Document | None) -> Selection:
        """Everything; one device at a time when there are several (the timeline's, the
        OOM's first): a sum over devices beside one device's curves reads as a
        contradiction."""
        if doc is None:
            return Selection()
        devices = sorted(set(doc.snap.segments.device.tolist()))
        if len(devices) < 2:
            return Selection()
        dev = doc.trace_device(None)
        return Selection(device=dev if dev in devices else devices[0])

    def opening_event(self) -> int | None:
        """Where a newly opened document's cursor belongs, if not at the end: the last
        OOM of a recording that goes on after it (the banner's verdict and the map's
        ruler apply there)."""
        doc, dev = self.doc, self.cursor_device
        if doc is None or dev is None:
            return None
        ooms = doc.oom_events(dev)
        return ooms[-1] if ooms and ooms[-1] != self.cursor_k else None

    def spans_devices(self, selection: Selection | None = None) -> bool:
        """Does ``selection`` (default: the current one) sum several GPUs of the file?
        Their layouts are all known at one instant only, as recorded: a trace's cursor
        is one device's, and so is the layout replayed at any earlier event."""
        sel = self.selection if selection is None else selection
        if sel.device is not None or self.host_shown:
            return False
        return len(self.gpu_devices()) > 1

    def gpu_devices(self) -> list[int]:
        """The file's GPUs with segments (the device selector's, less all and host)."""
        return [d for _, d in self.device_choices() if d is not None and d != HOST_DEVICE]

    def set_selection(self, selection: Selection) -> bool:
        """Returns whether the cursor moved: to another device's trace, or (several
        devices summed, :meth:`spans_devices`) to the end, as recorded."""
        old = self.selection
        self.selection = selection
        moved = False
        if self.doc is not None and (
            self.doc.trace_device(selection.device) != self.cursor_device
            or (self.spans_devices(selection) and not self.at_latest())
        ):
            self.reset_cursor()
            moved = True
        if old != selection:
            self.events.selection.emit(selection)
        self._moment(False)
        return moved

    # ------------------------------------------------------------------ cursor
    def reset_cursor(self, emit: bool = True) -> None:
        """The trace of the selected device (or the document's), cursor at its end."""
        doc = self.doc
        dev = doc.trace_device(self.selection.device) if doc is not None else None
        self.cursor_device = dev
        self.cursor_k = doc.n_events(dev) - 1 if doc is not None and dev is not None else -1
        self.view_doc = doc
        self.selected_interval = -1
        if emit:
            self.events.trace.emit(dev)
            self.events.cursor.emit(dev, self.cursor_k)

    def set_cursor(self, k: int) -> bool:
        """The layout after event ``k`` (clamped) of the cursor's device; False without
        a trace."""
        doc, dev = self.doc, self.cursor_device
        if doc is None or dev is None:
            return False
        n = doc.n_events(dev)
        self.cursor_k = int(min(max(k, 0), n - 1))
        self.view_doc = doc.at(dev, self.cursor_k)
        keep = True
        if self.cursor_k != n - 1 and self.spans_devices():
            # Before the end only the cursor's device has a known layout: the selection
            # says so (the selector shows it) rather than "All devices" over one device.
            self.selection = replace(self.selection, device=dev)
            self.events.selection.emit(self.selection)
            keep = False
        self.events.cursor.emit(dev, self.cursor_k)
        self._moment(keep)
        return True

    def at_latest(self) -> bool:
        doc = self.doc
        if doc is None or self.cursor_device is None:
            return True
        return self.cursor_k >= doc.n_events(self.cursor_device) - 1

    def oom_target(self, direction: int = 0) -> int | None:
        """The event a jump goes to: 0 the last OOM, -1 / +1 the one before / after the
        cursor; None when there is none."""
        if self.doc is None or self.cursor_device is None:
            return None
        ooms = self.doc.oom_events(self.cursor_device)
        k = self.cursor_k
        if direction < 0:
            before = [o for o in ooms if o < k]
            return before[-1] if before else None
        if direction > 0:
            after = [o for o in ooms if o > k]
            return after[0] if after else None
        return ooms[-1] if ooms else None

    def oom_marks(self) -> OomMarks:
        """Where the cursor stands among its trace's OOMs (the OOM buttons, the banner)."""
        doc, dev, k = self.doc, self.cursor_device, self.cursor_k
        if doc is None or dev is None:
            return OomMarks(0, False, False, False, 0, -1, None)
        ooms = doc.oom_events(dev)
        n = doc.n_events(dev)
        here = doc.oom_at(dev, k)
        number = ooms.index(k) + 1 if here is not None and k in ooms else 0
        return OomMarks(
            len(ooms),
            any(o < k for o in ooms),
            any(o > k for o in ooms),
            n > 0 and k != n - 1,
            number,
            ooms[-1] if ooms else -1,
            here,
        )

    def oom_shown(self):
        """The OOM whose request the map draws: the one at the cursor's event (a trace),
        else the document's last (no trace: the final layout is what it judged)."""
        doc = self.doc
        if doc is None:
            return None
        if self.cursor_device is None:
            return doc.oom
        return doc.oom_at(self.cursor_device, self.cursor_k)

    def oom_in_view(self):
        """The OOM the views speak of when nothing is picked (the stack panel): the one
        at the cursor, else the file's last OOM of a device the selection shows; None
        when the OOMs are other devices' (shown, those are named as theirs)."""
        here = self.oom_shown() if self.cursor_device is not None else None
        if here is not None:
            return here
        doc = self.doc
        if doc is None or self.host_shown:
            return None
        dev = self.selection.device
        mine = [r for r in doc.root.ooms if dev is None or r.device == dev]
        return mine[-1] if mine else None

    def oom_event(self, report) -> int:
        """The event (of its device's trace) of OOM ``report``; -1 when unknown."""
        doc = self.doc
        rep = (
            doc.root.timeline.replay(report.device)
            if doc is not None and doc.root.timeline is not None
            else None
        )
        if rep is None:
            return -1
        hit = np.flatnonzero(rep.rows == report.event_index)
        return int(hit[0]) if len(hit) else -1

    def oom_hint(self, report) -> str:
        """Whether the views show OOM ``report``'s moment ("at the cursor") or how to
        get there ("Ctrl+J jumps there": the last OOM of the cursor's trace; "select
        device 1 to see it": another device's)."""
        k = self.oom_event(report)
        if self.cursor_device != report.device or k < 0:
            return f"select device {report.device} to see it"
        if self.cursor_k == k:
            return "at the cursor"
        return "Ctrl+J jumps there" if self.oom_target(0) == k else "on the timeline"

    def oom_place(self, report) -> str:
        """Which device and instant OOM ``report`` is of, in words: "device 1, event
        421; Ctrl+J jumps there" (:meth:`oom_hint`)."""
        k = self.oom_event(report)
        where = f"device {report.device}" + (f", event {k:,}" if k >= 0 else "")
        return f"{where}; {self.oom_hint(report)}"

    # ------------------------------------------------------------------ picks
    def live_block(self, addr: int) -> int:
        """The allocated (or pending-free) block at ``addr`` at the cursor, or -1."""
        if self.view_doc is None or addr < 0:
            return -1
        blocks = self.view_doc.snap.blocks
        hit = np.flatnonzero(
            (blocks.address == addr)
            & (blocks.state != BlockState.FREE)
            & (blocks.state != BlockState.UNKNOWN)
        )
        return int(hit[0]) if len(hit) else -1

    def interval_of_block(self, block: int) -> int:
        """The timeline allocation that is ``block`` at the cursor, or -1."""
        if block < 0 or self.cursor_device is None or self.doc is None:
            return -1
        iv = self.doc.intervals(self.cursor_device)
        if iv is None or self.view_doc is None:
            return -1
        addr = int(self.view_doc.snap.blocks.address[block])
        k = self.cursor_k
        hit = np.flatnonzero((iv.addr == addr) & (iv.start <= k) & (iv.end > k))
        return int(hit[-1]) if len(hit) else -1

    def _cursor_intervals(self) -> Intervals:
        """The allocations of the cursor's trace (callers hold an interval of it)."""
        doc, dev = self.doc, self.cursor_device
        iv = doc.intervals(dev) if doc is not None and dev is not None else None
        if iv is None:
            raise LookupError("no timeline at the cursor")
        return iv

    def _view_doc(self) -> Document:
        if self.view_doc is None:
            raise LookupError("no document")
        return self.view_doc

    def interval_details(self, i: int):
        """What newer torch recorded about allocation ``i`` of the cursor's device
        (:class:`~..analysis.alloc_details.AllocationDetails`; None without an alloc event)."""
        from ..analysis.alloc_details import allocation_details

        doc, dev = self.doc, self.cursor_device
        if i < 0 or doc is None or dev is None or doc.timeline is None:
            return None
        iv, rep = doc.intervals(dev), doc.timeline.replay(dev)
        if iv is None or rep is None or i >= len(iv):
            return None
        return allocation_details(doc.snap, rep.rows, int(iv.event[i]), int(iv.end[i]))

    def interval_live(self, i: int) -> bool:
        """Is allocation ``i`` alive at the cursor?"""
        iv = self._cursor_intervals()
        return bool(iv.start[i] <= self.cursor_k < iv.end[i])

    def select_block(self, block: int, keep_interval: bool = False, origin: str = "") -> None:
        """Pick ``block`` of the document at the cursor (-1: nothing); ``origin``: the
        view it was picked in (see :attr:`pick_origin`)."""
        self.pick_origin = origin
        self.selected_block = int(block)
        self.selected_addr = int(self._view_doc().snap.blocks.address[block]) if block >= 0 else -1
        if not keep_interval:
            self.selected_interval = -1
        self.events.selected.emit(self.selected_block, self.selected_interval)

    def select_interval(self, i: int) -> int:
        """Pick allocation ``i`` of the timeline; returns its block at the cursor (-1 if
        it is not alive there)."""
        self.pick_origin = "interval"
        self.selected_interval = int(i)
        iv = self._cursor_intervals()
        b = self.live_block(int(iv.addr[i])) if self.interval_live(i) else -1
        self.selected_block = b
        self.selected_addr = -1
        self.events.selected.emit(b, self.selected_interval)
        return b

    def reselect(self) -> tuple[int, bool]:
        """After the cursor moved: the picked allocation's block at the new moment (by
        address, if still alive).  Returns (block, picked_by_interval)."""
        i = self.selected_interval
        if i >= 0:
            iv = self._cursor_intervals()
            b = self.live_block(int(iv.addr[i])) if self.interval_live(i) else -1
            self.selected_block = b
            return b, True
        b = self.live_block(self.selected_addr)
        snap = self._view_doc().snap
        if b >= 0 and not self.selection.segment_mask(snap)[snap.blocks.segment[b]]:
            b = -1
        if b < 0:
            self.selected_block = -1
        return b, False

    def repick(self) -> None:
        """After the cursor moved: pick the picked allocation again at the new moment
        (:meth:`reselect`) and emit ``selected`` (origin "moment…")."""
        if self.view_doc is None:
            return
        b, by_interval = self.reselect()
        if by_interval:
            self.pick_origin = "moment-interval"
            self.events.selected.emit(b, self.selected_interval)
        elif b >= 0:
            self.select_block(b, keep_interval=True, origin="moment")
        else:
            self.pick_origin = "moment-none"
            self.events.selected.emit(-1, self.selected_interval)

    def holders_at(self, peak_k: int | None = None):
        """What the call tree groups: (document, per-block mask of the selection or None,
        caption), at the cursor, or after event ``peak_k`` (the peak of allocated memory)
        of the cursor's trace; None without a document."""
        doc, dev = self.view_doc, self.cursor_device
        if doc is None:
            return None
        # (with several GPUs the event numbers are one device's: the caption names it)
        who = f"device {dev}, " if len(self.gpu_devices()) > 1 and dev is not None else ""
        if peak_k is not None and dev is not None and self.doc is not None:
            doc = self.doc.at(dev, peak_k)
            caption = f"{who}at the peak of allocated (event {peak_k:,})"
        elif dev is not None and self.spans_devices():
            caption = "every device, as recorded"
        elif dev is not None:
            caption = f"{who}at the cursor (event {self.cursor_k:,})"
        else:
            caption = "as recorded"
        snap = doc.snap
        mask = self.selection.segment_mask(snap)[snap.blocks.segment] if len(snap.blocks) else None
        return doc, mask, caption

    # ------------------------------------------------------------------ highlight
    def set_search_mask(self, mask: np.ndarray | None) -> None:
        self.search_mask = mask
        self.events.highlight.emit(self.highlight_mask())

    def set_node_mask(self, mask: np.ndarray | None) -> None:
        self.node_mask = mask
        self.events.highlight.emit(self.highlight_mask())

    def set_category_mask(self, mask: np.ndarray | None, label: str = "") -> None:
        """A leak or a category picked in the categories views; ``label``
        names it in the legends (e.g. "category: activations")."""
        self.category_mask = mask
        self.category_label = label if mask is not None else ""
        self.events.highlight.emit(self.highlight_mask())

    def set_panel_mask(self, mask: np.ndarray | None, label: str = "") -> None:
        """What a panel's selection acts on (e.g. ``"acted on by: <remedy>"``), shown
        instead of the window's own highlight until cleared (None)."""
        self.panel_mask = mask
        self.panel_label = label if mask is not None else ""
        self.events.highlight.emit(self.highlight_mask())

    def highlight_mask(self) -> np.ndarray | None:
        """Per stack: highlighted in the map and the timeline (None: nothing is)."""
        if self.panel_mask is not None:  # a panel's pick, until it is cleared
            return self.panel_mask
        if self.category_mask is not None:  # the latest pick of the categories views
            return self.category_mask
        a, b = self.node_mask, self.search_mask
        if a is not None and b is not None and len(a) == len(b):
            return a & b
        return a if a is not None else b

    def highlight_label(self) -> str:
        """What :meth:`highlight_mask` is, as the legends name it ("" when nothing is
        highlighted): a search's matches, a call-tree node's stacks, a category, or
        what a panel's pick acts on."""
        if self.panel_mask is not None:
            return self.panel_label or HIGHLIGHT_PANEL
        if self.category_mask is not None:
            return self.category_label or HIGHLIGHT_CATEGORY
        a, b = self.node_mask, self.search_mask
        if a is not None and b is not None and len(a) == len(b):
            return f"{HIGHLIGHT_SEARCH} in {HIGHLIGHT_NODE}"
        return HIGHLIGHT_NODE if a is not None else HIGHLIGHT_SEARCH if b is not None else ""

    # ------------------------------------------------------------------ carry-over
    def carried(self) -> Carried:
        """The picks to keep when a newer document of the same process replaces this one."""
        gap = None
        if self.selected_block >= 0 and self.view_doc is not None:
            b = self.view_doc.snap.blocks
            if b.state[self.selected_block] == BlockState.FREE:
                gap = (int(b.address[self.selected_block]), int(b.size[self.selected_block]))
        return Carried(
            self.selection, self.selected_addr, gap, self.interval_key(self.selected_interval)
        )

    def interval_key(self, i: int) -> IntervalKey | None:
        doc, dev = self.doc, self.cursor_device
        if i < 0 or dev is None or doc is None or doc.timeline is None:
            return None
        iv, rep = doc.intervals(dev), doc.timeline.replay(dev)
        if iv is None or rep is None:
            return None
        ev = int(iv.event[i])
        return IntervalKey(
            dev, int(iv.addr[i]), int(rep.time_us[ev]) if ev >= 0 else None, int(iv.size[i])
        )

    def find_interval(self, key: IntervalKey | None) -> int:
        """The allocation ``key`` names in the current document, or -1."""
        doc = self.doc
        if key is None or doc is None or doc.timeline is None or key.device != self.cursor_device:
            return -1
        iv, rep = doc.intervals(key.device), doc.timeline.replay(key.device)
        if iv is None or rep is None:
            return -1
        hit = np.flatnonzero((iv.addr == key.addr) & (iv.size == key.size))
        if key.time_us is not None:
            ev = iv.event[hit]
            hit = hit[(ev >= 0) & (rep.time_us[np.maximum(ev, 0)] == key.time_us)]
        return int(hit[-1]) if len(hit) else -1

    def find_gap(self, gap: tuple[int, int] | None) -> int:
        """The free block at (address, size) at the cursor, or -1."""
        if gap is None or self.view_doc is None:
            return -1
        b = self.view_doc.snap.blocks
        hit = np.flatnonzero(
            (b.address == gap[0]) & (b.size == gap[1]) & (b.state == BlockState.FREE)
        )
        return int(hit[0]) if len(hit) else -1

    @staticmethod
    def carry_selection(old: Document, new: Document, sel: Selection) -> Selection:
        """``sel`` of ``old`` in ``new``: pools are indices into each snapshot's own pool
        list, so they are matched by (device, id); values gone become "all"."""
        segs = new.snap.segments
        pool = None
        if sel.pool is not None and 0 <= sel.pool < len(old.snap.pools):
            key = tuple(old.snap.pools[sel.pool])
            pool = next((i for i, p in enumerate(new.snap.pools) if tuple(p) == key), None)
        device = sel.device if sel.device in set(segs.device.tolist()) else None
        stream = sel.stream if sel.stream in set(segs.stream.tolist()) else None
        return Selection(device=device, pool=pool, stream=stream, is_small=sel.is_small)

    def replace_document(self, doc: Document, selection: Selection, addr: int = -1) -> None:
        """A newer document of the same process: ``selection`` (carried), the cursor at
        its end, the block at ``addr`` (carried) picked if live, the other picks cleared
        (the caller re-finds them from :meth:`carried`).  The new document is the
        file's: a shown pinned host memory goes back to the GPUs."""
        if self.host_shown or selection.device == HOST_DEVICE:
            selection = Selection()
        self.origin = "replace"
        self.file_doc = doc
        self.host_shown = False
        self.doc = doc
        self.view_doc = doc
        self.selection = selection
        self.reset_cursor(emit=False)
        self.selected_block = -1
        self.node_mask = self.category_mask = None
        self.events.document.emit(doc)
        self.reset_cursor()
        self.selected_addr = int(addr)
        self._moment(True)

    def carry_over(self, doc: Document, carried: Carried) -> None:
        """Show ``doc``, a newer document of the same process, with the picks
        ``carried`` (:meth:`carried`, taken from the older one): the selection, the
        allocation picked on the timeline (by address, size and time) or the block
        (by address) or free gap (by address and size)."""
        old = self.doc
        sel = (
            self.carry_selection(old, doc, carried.selection)
            if old is not None
            else carried.selection
        )
        self.replace_document(doc, sel, carried.addr)
        i = self.find_interval(carried.interval)
        gap = self.find_gap(carried.gap) if self.selected_block < 0 else -1
        if i >= 0:
            self.select_interval(i)
        elif gap >= 0:
            self.select_block(gap, keep_interval=True, origin="moment")

    @staticmethod
    def stacks_mask(doc: Document, stacks) -> np.ndarray:
        """Per stack of ``doc``: one of ``stacks`` (ids; negative or unknown ones skipped)."""
        mask = np.zeros(len(doc.snap.stacks), bool)
        ids = np.asarray([s for s in stacks if 0 <= s < len(mask)], dtype=np.int64)
        mask[ids] = True
        return mask

    # ------------------------------------------------------------------ words
    def scope_text(self) -> str:
        """Which device(s), pool, stream and instant the header's figures are of."""
        doc, view, sel = self.doc, self.view_doc, self.selection
        if doc is None or view is None:
            return ""
        segs = view.snap.segments
        devs = sorted(set(segs.device[sel.segment_mask(view.snap)].tolist())) if len(segs) else []
        if self.host_shown or sel.device == HOST_DEVICE:
            where = HOST_SCOPE
        elif sel.device is not None:
            where = f"device {sel.device}"
        elif len(devs) > 1:
            where = f"{plural(len(devs), 'device')} summed ({', '.join(map(str, devs))})"
        elif devs:
            where = f"device {devs[0]}"
        else:
            where = "no segment"
        parts = [where]
        if sel.pool is not None and 0 <= sel.pool < len(doc.snap.pools):
            parts.append(pool_label(doc.snap.pools[sel.pool]))
        if sel.stream is not None:
            parts.append(stream_label(sel.stream))
        if sel.is_small is not None:
            parts.append("small segments" if sel.is_small else "large segments")
        return "Figures: " + " · ".join(parts) + " · " + self.instant_text()

    def instant_text(self) -> str:
        """Which instant the views show: "after event 421 of 596 (the OOM)", "as
        recorded" (no trace, or several devices summed)."""
        doc, dev = self.doc, self.cursor_device
        if doc is None or dev is None:
            return "as recorded"
        if self.spans_devices():
            return "as recorded (each device at the end of its trace)"
        n = doc.n_events(dev)
        k = self.cursor_k
        when = f"after {event_of(k, n)}"
        if doc.oom_at(dev, k) is not None:
            when += " (the OOM)"
        elif k == n - 1:
            when += " (latest, as recorded)"
        return when
