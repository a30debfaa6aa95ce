"""A loaded snapshot plus the derived data every view shares.

Built once per load, on the loader thread: frame categories, the most telling
frame per stack and its label, the timeline (every device's trace replayed)
and the OOM reports judged on the layout at their moment.

Time travel: :meth:`Document.at` is the document of the snapshot as it was
after one trace event; it shares every per-stack array with its base, so a
view switches moments without recomputing labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..analysis.figures import Selection
from ..analysis.focus import default_trace_device
from ..analysis.oom import OomReport, oom_reports
from ..core import frames as fr
from ..core.progress import Progress
from ..core.snapshot import Action, Frames, Snapshot, Stacks
from ..core.units import format_address
from ..replay import curves as replay_curves
from ..replay.timeline import Intervals, Timeline, build_timeline, intervals


@dataclass
class Document:
    snap: Snapshot
    categories: np.ndarray  # per frame
    top_frame: np.ndarray  # per stack: frame id or -1
    top_label: np.ndarray  # per stack: str (object array)
    top_rank: np.ndarray  # per stack: rank of top_label in sorted order (int64)
    oom: OomReport | None
    timeline: Timeline | None = None
    ooms: list[OomReport] = field(default_factory=list)  # every OOM, in recorded order
    # Time travel: the device and event this document's snapshot is at;
    # event -1 is the snapshot as recorded (``base`` is then None).
    device: int | None = None
    event: int = -1
    base: "Document | None" = field(default=None, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        snap: Snapshot,
        progress: Progress | None = None,
        with_timeline: bool = True,
        live: bool = False,
        timeline: Timeline | None = None,
    ) -> "Document":
        """The document of ``snap``: frame labels, the replayed timeline, the OOM reports.
        ``live=True`` keeps the replay state so the timeline can be extended (a live
        session, :class:`~vramscope.viewer.model.live.doc_source.LiveDocumentSource`,
        or :meth:`extend`); ``timeline``: one already replayed (extended) for ``snap``,
        used as it is."""
        progress = progress or Progress()
        cats, top, labels, rank = _stack_labels(snap)
        if timeline is None and with_timeline and len(snap.trace.action):
            timeline = build_timeline(snap, progress, live=live)
        # The verdicts are judged on the layout at each OOM (replayed) when the
        # timeline exists; the last one is what last_oom(snap, timeline) gives.
        reports = oom_reports(snap, timeline)
        doc = cls(
            snap, cats, top, labels, rank, reports[-1] if reports else None, timeline, reports
        )
        # What the first window shows, computed here (the loader's thread), not on the
        # GUI thread: the shown device's allocation lifetimes and curves.
        device = doc.trace_device()
        if device is not None:
            doc.intervals(device)
            doc.curves(device)
            progress.update("replay", 1.0)
        return doc

    def extend(
        self, snap: Snapshot, first_row: int, dropped: int = 0, progress: Progress | None = None
    ) -> "Document":
        """The document after a live update, without a full replay.

        ``snap``, ``first_row``, ``dropped`` as :meth:`..replay.timeline.Timeline.extend`;
        from a live session: ``first_row = len(update.snap.trace) - update.added``
        and ``dropped`` = how much ``session.columns.dropped`` grew (after a gap,
        ``update.gap``, build a new document instead).  The timeline (built with
        ``live=True``) is extended in place and shared with this document: its
        replays, curve summaries and intervals are the same objects, grown.  Labels
        are computed for the new frames and stacks only (the session's interner
        keeps ids); the OOM verdicts are judged again.  Returns the new root.  When
        the timeline compacted (dropped rows past a quarter of it) its replays are new
        objects: views take them from the returned document, as always.
        """
        root = self.root
        tl = root.timeline
        if tl is None or not tl.live:
            return Document.build(snap, progress, live=True)
        rebuilt = tl.extend(snap, first_row, dropped, progress)
        cats, top, labels, rank = _stack_labels(snap, root)
        reports = oom_reports(snap, tl)
        doc = Document(snap, cats, top, labels, rank, reports[-1] if reports else None, tl, reports)
        if not rebuilt:  # intervals were extended in place (the same objects): keep them
            doc._cache.update({k: v for k, v in root._cache.items() if k[0] == "iv"})
        return doc

    # ------------------------------------------------------------------ time travel
    @property
    def root(self) -> "Document":
        return self.base if self.base is not None else self

    def trace_device(self, device: int | None = None) -> int | None:
        """The device whose trace drives the timeline: ``device`` if it has one, else
        :func:`..analysis.focus.default_trace_device`'s (the CLI's default too)."""
        root = self.root
        tl = root.timeline
        if tl is None or not tl.devices:
            return None
        if device is not None and device in tl.devices:
            return device
        # The rule every command follows (the last OOM's, else the highest peak's), once
        # per length of the trace (a live one grows, and may run out of memory later).
        key = ("trace_device", len(root.snap.trace))
        if key not in root._cache:
            root._cache[key] = default_trace_device(root.snap)
        best = root._cache[key]
        return best if best in tl.devices else min(tl.devices)

    def n_events(self, device: int) -> int:
        rep = self.root.timeline.replay(device) if self.root.timeline is not None else None
        return len(rep) if rep is not None else 0

    def at(self, device: int, k: int) -> "Document":
        """The document of the snapshot after event ``k`` of ``device``'s trace.

        The last event returns the snapshot as recorded (this document).  Per-stack
        labels, categories and ranks are shared, never recomputed; ``oom`` is the
        OOM recorded at exactly that event (its request is what the map shows).
        """
        root = self.root
        n = root.n_events(device)
        if not n or root.timeline is None:
            return root
        k = int(min(max(k, 0), n - 1))
        if k == n - 1:
            return root
        key = ("at", device, k)
        hit = root._cache.get("at")
        if hit is not None and hit[0] == key:
            return hit[1]
        snap = root.timeline.snapshot_at(device, k)
        doc = replace(
            root,
            snap=snap,
            oom=root.oom_at(device, k),
            device=device,
            event=k,
            base=root,
            _cache={},
        )
        root._cache["at"] = (key, doc)
        return doc

    def oom_at(self, device: int, k: int) -> OomReport | None:
        """The OOM report of event ``k`` of ``device``, if that event is an OOM."""
        root = self.root
        rep = root.timeline.replay(device) if root.timeline is not None else None
        if rep is None or not 0 <= k < len(rep) or rep.action[k] != Action.OOM:
            return None
        row = int(rep.rows[k])
        for r in root.ooms:
            if r.event_index == row:
                return r
        return None

    def oom_events(self, device: int) -> list[int]:
        """Event indices (of ``device``'s trace) of the OOMs, in order."""
        root = self.root
        rep = root.timeline.replay(device) if root.timeline is not None else None
        if rep is None:
            return []
        return np.flatnonzero(rep.action == Action.OOM).tolist()

    def intervals(self, device: int) -> Intervals | None:
        """Allocation lifetimes of ``device`` (cached)."""
        root = self.root
        key = ("iv", device)
        if key not in root._cache:
            rep = root.timeline.replay(device) if root.timeline is not None else None
            root._cache[key] = intervals(rep) if rep is not None else None
        return root._cache[key]

    def curves(
        self, device: int, stream: int | None = None, pool: int | None = None
    ) -> dict[str, np.ndarray]:
        """requested / allocated / active / reserved bytes after each event of ``device``,
        for one stream and/or pool (``None``: all)."""
        root = self.root
        rep = root.timeline.replay(device) if root.timeline is not None else None
        if rep is None:
            raise ValueError(f"no trace on device {device}")
        if stream is None and pool is None:
            # Columns computed on demand from block summaries: 10M events do not need
            # four arrays of 80 MB (see curve_index); they index like arrays.
            return rep.curve_index().columns()
        key = ("curves", device, stream, pool)
        if key not in root._cache:
            root._cache[key] = replay_curves(rep, stream, pool)
        return root._cache[key]

    @property
    def name(self) -> str:
        return Path(self.snap.path).name if self.snap.path else "(snapshot)"

    def stack_label(self, stack: int) -> str:
        return "" if stack < 0 or stack >= len(self.top_label) else self.top_label[stack]

    def block_stack(self, block: int) -> int:
        return int(self.snap.blocks.stack[block])

    def block_top_label(self, block: int) -> str:
        return self.stack_label(self.block_stack(block))

    def blocks_in(self, selection: Selection) -> np.ndarray:
        """Block rows of the selected segments, ascending."""
        snap = self.snap
        if not len(snap.blocks):
            return np.zeros(0, dtype=np.int64)
        mask = selection.segment_mask(snap)[snap.blocks.segment]
        return np.flatnonzero(mask)


def _stack_labels(snap: Snapshot, prev: Document | None = None):
    """(frame categories, top frame per stack, its label, label rank).  With ``prev``
    (an earlier document of the same live session: ids only ever appended) only the
    new frames and stacks are classified."""
    old_cats = prev.categories if prev is not None else np.zeros(0, np.int8)
    old_top = prev.top_frame if prev is not None else np.zeros(0, np.int64)
    old_labels = prev.top_label if prev is not None else np.zeros(0, object)
    nf, ns = len(old_cats), len(old_top)
    if nf > len(snap.frames) or ns > len(snap.stacks):
        nf = ns = 0  # not the same session's tables: from scratch
    frames, stacks = snap.frames, snap.stacks
    new_cats = fr.frame_categories(
        Frames(frames.filename[nf:], frames.line[nf:], frames.name[nf:], frames.strings)
    )
    cats = np.concatenate([old_cats[:nf], new_cats]) if nf else new_cats
    new_top = fr.top_frames(Stacks(stacks.offsets[ns:], stacks.frames), cats)
    top = np.concatenate([old_top[:ns], new_top]) if ns else new_top
    labels = np.empty(len(top), dtype=object)
    labels[:ns] = old_labels[:ns]
    cache: dict[int, str] = {}
    for i, fid in enumerate(new_top.tolist(), start=ns):
        if fid < 0:
            labels[i] = ""
            continue
        text = cache.get(fid)
        if text is None:
            text = cache[fid] = fr.frame_view(frames, fid, cats[fid]).short
        labels[i] = text
    rank = np.empty(len(top), dtype=np.int64)
    if len(top):
        rank[np.argsort(labels.astype(str), kind="stable")] = np.arange(len(top))
    return cats, top, labels, rank


def pool_label(pool: tuple[int, int]) -> str:
    if tuple(pool) == (0, 0):
        return "pool (0, 0)"
    return f"private pool ({pool[0]}, {pool[1]})"


def stream_label(stream: int) -> str:
    return "stream 0" if stream == 0 else f"stream {format_address(stream)}"
