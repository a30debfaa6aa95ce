"""Two recordings of one program on one time axis: did the change work, and where.

``vramscope diff`` compares two end states; a change a user makes after ``advise``
(a smaller batch, ``no_grad`` around evaluation, checkpointing, bf16, an allocator
setting, a leak removed) shows *during* the run, at each side's peak.  So:

* **Alignment.** Each side's trace (on its default device, :mod:`..analysis.focus`)
  is cut into the iterations the categories find (:mod:`..categories.iterations`);
  iteration ``i`` of A is paired with iteration ``i`` of B.  Where either side has no
  iterations both are cut into :data:`RELATIVE_SPANS` equal stretches of their events
  (relative time).  Each span's figures are the curves' maxima inside it: memory live
  at the span's start counts on both sides (the curves are absolute), so no baseline
  is dropped.
* **What changed.** Per aligned span: peak reserved, allocated and requested and the
  category split at its requested peak, on each side and their difference; at each
  side's own peak, the live bytes by allocation site (the user's frame, as the call
  tree and ``summary`` pick it: :func:`..analysis.calltree.site_frames`), matched
  across the files by (file, line, function) and sorted by the size of the change.
* **Prediction.** Where the change is one ``advise`` predicts (an allocator setting,
  read from the files; another named by the caller), A's advice is computed and the
  prediction held against B's real peak: ``prediction_error``.

Everything here is columns and per-span numpy reductions; the only Python loops run
over spans (iterations) and distinct sites.

May import: :mod:`..categories`, :mod:`..remedies` (lazily, for the prediction),
:mod:`..whatif`, :mod:`..analysis`, :mod:`..replay`, :mod:`..io`, :mod:`..core`.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis.calltree import site_frames, top_sites
from ..analysis.focus import default_trace_device
from ..categories import CATEGORY_LABELS, CATEGORY_NAMES, MemoryBreakdown
from ..core import frames as fr
from ..core.progress import Progress
from ..core.snapshot import Snapshot
from ..core.units import format_bytes, plural
from ..replay.timeline import Timeline

#: Stretches of relative time a side without iterations is cut into.
RELATIVE_SPANS = 10
#: Sites listed (by the size of their change).
TOP_SITES = 10
CURVES = ("reserved", "allocated", "requested")
# A site's status: live at B's peak only, at A's only, at both with other bytes, at both
# with the same bytes (an allocator setting moves reserved memory, not the program's).
SITE_ADDED, SITE_GONE, SITE_CHANGED, SITE_UNCHANGED = "added", "gone", "changed", "unchanged"
SITE_STATUSES = (SITE_ADDED, SITE_GONE, SITE_CHANGED, SITE_UNCHANGED)
SITES_HEADER = "live bytes at each side's peak by allocation site"


@dataclass
class SpanFigures:
    """One side's figures over one aligned span (events ``start..end`` inclusive)."""

    start: int
    end: int
    peak_reserved: int
    peak_allocated: int
    peak_requested: int
    peak_event: int  # the first event at the span's requested peak
    peak_phase: str | None  # forward / backward / optimizer / other (None: no iterations)
    categories: dict[str, int]  # requested bytes by category at peak_event

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_event": self.start,
            "end_event": self.end,
            "peak_reserved_bytes": self.peak_reserved,
            "peak_allocated_bytes": self.peak_allocated,
            "peak_requested_bytes": self.peak_requested,
            "peak_event": self.peak_event,
            "peak_phase": self.peak_phase,
            "categories": self.categories,
        }


@dataclass
class AlignedSpan:
    """One iteration (or stretch of relative time) of both sides."""

    index: int
    label: str  # "iteration 3" / "30-40 %"
    a: SpanFigures | None
    b: SpanFigures | None

    def delta(self, what: str) -> int | None:
        """B - A of ``peak_reserved`` / ``peak_allocated`` / ``peak_requested``."""
        if self.a is None or self.b is None:
            return None
        return int(getattr(self.b, what) - getattr(self.a, what))

    def category_delta(self) -> dict[str, int]:
        if self.a is None or self.b is None:
            return {}
        names = sorted(set(self.a.categories) | set(self.b.categories))
        return {n: self.b.categories.get(n, 0) - self.a.categories.get(n, 0) for n in names}

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "label": self.label,
            "a": self.a.to_dict() if self.a else None,
            "b": self.b.to_dict() if self.b else None,
            "delta_peak_reserved_bytes": self.delta("peak_reserved"),
            "delta_peak_allocated_bytes": self.delta("peak_allocated"),
            "delta_peak_requested_bytes": self.delta("peak_requested"),
            "delta_categories": self.category_delta(),
        }


@dataclass
class SiteDelta:
    """Live bytes at one allocation site at each side's peak."""

    frame: str  # "file.py:123 function"
    filename: str
    line: int
    function: str
    a_bytes: int
    b_bytes: int
    a_count: int
    b_count: int
    a_line: int | None = None  # A's line where an edit moved it (None: the same as B's)

    @property
    def delta(self) -> int:
        return self.b_bytes - self.a_bytes

    @property
    def status(self) -> str:
        """:data:`SITE_UNCHANGED` whenever the bytes are the same on both sides (the
        number of allocations may differ: the bytes are what changed or not); else
        added, gone or changed."""
        if not self.delta:
            return SITE_UNCHANGED
        return SITE_ADDED if not self.a_count else SITE_GONE if not self.b_count else SITE_CHANGED

    def to_dict(self) -> dict[str, Any]:
        return {
            "frame": self.frame,
            "filename": self.filename,
            "line": self.line,
            "function": self.function,
            "a_bytes": self.a_bytes,
            "b_bytes": self.b_bytes,
            "a_count": self.a_count,
            "b_count": self.b_count,
            "delta": self.delta,
            "status": self.status,
            "a_line": self.a_line,
        }


@dataclass
class Side:
    """What one recording contributes: its device, breakdown and per-event curves."""

    snap: Snapshot
    timeline: Timeline
    device: int
    breakdown: MemoryBreakdown
    n_events: int

    @property
    def curves(self) -> dict[str, np.ndarray]:
        rep = self.timeline.replay(self.device)
        return {c: np.asarray(getattr(rep, c), np.int64) for c in CURVES}

    @property
    def peak_event(self) -> int:
        """The first event at the highest requested bytes (summary's "at the peak")."""
        rep = self.timeline.replay(self.device)
        return int(rep.peak("requested")[1]) if rep is not None and len(rep) else -1


@dataclass
class Alignment:
    """Two recordings aligned: spans, the split at each side's peak, sites, prediction."""

    by: str  # "iteration" | "relative time"
    devices: tuple[int, int]
    spans: list[AlignedSpan]
    peak_events: tuple[int, int]
    categories_at_peak: tuple[dict[str, int], dict[str, int]]
    sites: list[SiteDelta]
    prediction_error: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    # The change the files themselves show (detect_change), None: not told.
    detected_change: str | None = None
    # B's peak reserved on its device: what a prediction for A is held against.
    b_peak_reserved: int = 0
    # Each side's breakdown (the views' category tables reuse them; not in to_dict).
    breakdowns: tuple[MemoryBreakdown, MemoryBreakdown] | None = field(default=None, repr=False)

    def largest_change(self) -> AlignedSpan | None:
        """The aligned span whose peak reserved changed most."""
        both = [s for s in self.spans if s.delta("peak_reserved") is not None]
        return max(both, key=lambda s: abs(s.delta("peak_reserved") or 0)) if both else None

    def changed_sites(self) -> list[SiteDelta]:
        """The sites whose bytes differ between the peaks, largest change first: the
        rows a list "by change" shows (the others hold the same bytes on both sides)."""
        return [s for s in self.sites if s.status != SITE_UNCHANGED]

    def site_counts(self) -> dict[str, int]:
        """How many sites are added, gone, changed and unchanged."""
        counts = dict.fromkeys(SITE_STATUSES, 0)
        for s in self.sites:
            counts[s.status] += 1
        return counts

    def site_summary(self) -> str:
        """One line on the sites: how many differ and how many hold the same bytes (the
        text's and the window's words when a list by change would be empty or short)."""
        same = self.site_counts()[SITE_UNCHANGED]
        differ = len(self.sites) - same
        if not self.sites:
            return "no allocation is live at either side's peak"
        hold = f"{'holds' if same == 1 else 'hold'} the same bytes on both sides"
        if not differ:
            return f"no site differs ({plural(same, 'site')} {hold})"
        text = f"{plural(differ, 'site')} {'differs' if differ == 1 else 'differ'}"
        return text + (f", {same:,} {hold}" if same else "")

    def to_dict(self, top: int = TOP_SITES) -> dict[str, Any]:
        return {
            "aligned_by": self.by,
            "devices": {"a": self.devices[0], "b": self.devices[1]},
            "iterations": [s.to_dict() for s in self.spans],
            "peak_events": {"a": self.peak_events[0], "b": self.peak_events[1]},
            "categories_at_peak": {
                "a": self.categories_at_peak[0],
                "b": self.categories_at_peak[1],
            },
            "sites": [s.to_dict() for s in self.sites[:top]],
            "site_counts": self.site_counts(),
            "prediction_error": self.prediction_error,
            "detected_change": self.detected_change,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class CategoryRow:
    """One memory category's requested bytes on each side (at a moment of each)."""

    name: str
    label: str
    a: int
    b: int

    @property
    def delta(self) -> int:
        return self.b - self.a


def category_rows(a: dict[str, int], b: dict[str, int]) -> list[CategoryRow]:
    """The categories to show side by side: those whose bytes changed, largest change
    first, then those holding the same bytes on both sides (in the categories' order).
    A category with no bytes on either side is left out: ten rows of "0 B" would push
    the one that changed out of sight."""
    rows = [
        CategoryRow(n, label, int(a.get(n, 0)), int(b.get(n, 0)))
        for n, label in zip(CATEGORY_NAMES, CATEGORY_LABELS)
    ]
    rows = [r for r in rows if r.a or r.b]
    changed = sorted((r for r in rows if r.delta), key=lambda r: -abs(r.delta))
    return changed + [r for r in rows if not r.delta]


# --------------------------------------------------------------------------- building


def side_of(
    snap: Snapshot, timeline: Timeline, device: int | None = None, progress: Progress | None = None
) -> Side | None:
    """The :class:`Side` of one recording (None: it has no trace to align)."""
    dev = device if device is not None else default_trace_device(snap)
    rep = timeline.replay(dev) if dev is not None else None
    if dev is None or rep is None or not len(rep):
        return None
    bd = MemoryBreakdown.build(snap, timeline, dev, progress)
    return Side(snap, timeline, dev, bd, len(rep))


def _spans_of(side: Side, use_iterations: bool, n_spans: int) -> list[tuple[int, int]]:
    if use_iterations:
        return [(it.start, it.end) for it in side.breakdown.iterations]
    n = side.n_events
    cuts = np.linspace(0, n, n_spans + 1).round().astype(np.int64)
    return [(int(a), int(b) - 1) for a, b in itertools.pairwise(cuts) if b > a]


def _figures(
    side: Side, spans: list[tuple[int, int]], curves: dict[str, np.ndarray]
) -> list[SpanFigures]:
    out = []
    phase_of = {it.start: it.peak_phase for it in side.breakdown.iterations}
    for a, b in spans:
        seg = {c: curves[c][a : b + 1] for c in CURVES}
        k = a + int(np.argmax(seg["requested"]))
        out.append(
            SpanFigures(
                a,
                b,
                int(seg["reserved"].max()),
                int(seg["allocated"].max()),
                int(seg["requested"].max()),
                k,
                phase_of.get(a),
                side.breakdown.split_at(k),
            )
        )
    return out


NO_STACK = ("<no stack recorded>", 0, "")  # the key of allocations without a stack
#: Path parts of installed code: a site in them is a library's line, not the program's.
LIBRARY_PATHS = ("/site-packages/", "/dist-packages/", "/lib/python3")


def program_site_frames(snap: Snapshot) -> np.ndarray:
    """Per stack id, the frame of the program's own code that made its allocation: the
    innermost frame outside torch and installed packages (a model from ``transformers``
    allocates in ``activations.py``; the line the user edits is the one that called it),
    else :func:`..analysis.calltree.site_frames`' choice."""
    frames = snap.frames
    cats = fr.frame_categories(frames).copy()
    ids = np.unique(frames.filename)
    lib_ids = [
        int(i)
        for i in ids.tolist()
        if any(m in snap.string(int(i)).replace("\\", "/") for m in LIBRARY_PATHS)
    ]
    installed = np.isin(frames.filename, np.array(lib_ids, dtype=frames.filename.dtype))
    cats[(cats == fr.CAT_USER) & installed] = fr.CAT_TORCH
    return site_frames(snap, cats)


def site_key(filename: str, line: int, function: str) -> tuple[str, int, str]:
    """How a site is matched across two files: the last two parts of its path (two
    checkouts, machines or environments put the same file under other roots), line and
    function."""
    parts = filename.replace("\\", "/").rstrip("/").split("/")
    return "/".join(parts[-2:]), line, function


def _live_by_site(side: Side, k: int) -> dict[tuple[str, int, str], tuple[int, int]]:
    """Requested bytes and count of the allocations live after event ``k``, by site (the
    call tree's grouping, :func:`..analysis.calltree.top_sites`, at the program's frames,
    then keyed as :func:`site_key` matches sites across files)."""
    iv = side.breakdown.intervals
    live = (iv.start <= k) & (iv.end > k)
    stacks = iv.stack[live]
    out: dict[tuple[str, int, str], tuple[int, int]] = {}
    for site in top_sites(
        side.snap, stacks, iv.requested[live], top=len(stacks), sites=program_site_frames(side.snap)
    ):
        if site.label == NO_STACK[0] and not site.filename:
            key = NO_STACK
        else:
            key = site_key(site.filename, site.line, site.function)
        got = out.get(key, (0, 0))
        out[key] = (got[0] + site.bytes, got[1] + site.count)
    return out


def _site_label(filename: str, line: int, function: str) -> str:
    if not filename or (filename, line, function) == NO_STACK:
        return NO_STACK[0]
    return f"{os.path.basename(filename)}:{line} {function}".rstrip()


def _moved_lines(
    only_a: list[tuple[str, int, str]], only_b: list[tuple[str, int, str]]
) -> dict[tuple[str, int, str], tuple[str, int, str]]:
    """Sites of A matched to sites of B in the same file and function at another line:
    the program was edited between the recordings (a ``with torch.no_grad():`` added
    above shifts every line below it by one).  Within one (file, function) the shift that
    pairs the most lines is taken first; further shifts (another edit further down) only
    where they pair two lines or more, so a line that was removed stays "gone"."""
    by_fn_a: dict[tuple[str, str], set[int]] = {}
    by_fn_b: dict[tuple[str, str], set[int]] = {}
    for f, line, fn in only_a:
        by_fn_a.setdefault((f, fn), set()).add(line)
    for f, line, fn in only_b:
        by_fn_b.setdefault((f, fn), set()).add(line)
    out = {}
    for (f, fn), lines_a in by_fn_a.items():
        lines_b = set(by_fn_b.get((f, fn), ()))
        first = True
        while lines_a and lines_b:
            shifts: dict[int, int] = {}
            for la in lines_a:
                for lb in lines_b:
                    shifts[lb - la] = shifts.get(lb - la, 0) + 1
            shift = min(shifts, key=lambda d: (-shifts[d], abs(d)))
            if shifts[shift] < (1 if first else 2):
                break
            for la in sorted(lines_a):
                if la + shift in lines_b:
                    out[(f, la, fn)] = (f, la + shift, fn)
                    lines_b.discard(la + shift)
            lines_a = {la for la in lines_a if (f, la, fn) not in out}
            first = False
    return out


def compare_sites(a: Side, b: Side) -> list[SiteDelta]:
    """Sites by live bytes at each side's peak, largest change first (then largest
    bytes, then name: a stable order).  A site whose line moved (same file and function,
    the program edited between the recordings) is one row, labelled ``file:A->B``."""
    sa, sb = _live_by_site(a, a.peak_event), _live_by_site(b, b.peak_event)
    moved = _moved_lines(sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa)))
    rows = []
    for key_a, key_b in moved.items():
        (ab, ac), (bb, bc) = sa.pop(key_a), sb.pop(key_b)
        f, la, fn = key_a
        label = f"{os.path.basename(f)}:{la}->{key_b[1]} {fn}".rstrip()
        rows.append(SiteDelta(label, f, key_b[1], fn, ab, bb, ac, bc, a_line=la))
    for key in set(sa) | set(sb):
        (ab, ac), (bb, bc) = sa.get(key, (0, 0)), sb.get(key, (0, 0))
        rows.append(SiteDelta(_site_label(*key), key[0], key[1], key[2], ab, bb, ac, bc))
    rows.sort(key=lambda r: (-abs(r.delta), -max(r.a_bytes, r.b_bytes), r.frame))
    return rows


def align(
    a_snap: Snapshot,
    b_snap: Snapshot,
    a_timeline: Timeline,
    b_timeline: Timeline,
    devices: tuple[int | None, int | None] = (None, None),
    progress: Progress | None = None,
) -> Alignment | None:
    """A and B aligned (None: one of them has no trace)."""
    a = side_of(a_snap, a_timeline, devices[0], progress)
    b = side_of(b_snap, b_timeline, devices[1], progress)
    if a is None or b is None:
        return None
    notes = []
    ia, ib = a.breakdown.iterations, b.breakdown.iterations
    by_iteration = bool(ia) and bool(ib)
    if not by_iteration:
        notes.append(
            "aligned by relative time: "
            + (
                "neither recording has"
                if not ia and not ib
                else "A has no"
                if not ia
                else "B has no"
            )
            + " iterations"
        )
    elif len(ia) != len(ib):
        notes.append(
            f"A has {plural(len(ia), 'iteration')}, B {len(ib)}: the first "
            f"{min(len(ia), len(ib))} are paired, the rest stand alone"
        )
    spans_a = _figures(a, _spans_of(a, by_iteration, RELATIVE_SPANS), a.curves)
    spans_b = _figures(b, _spans_of(b, by_iteration, RELATIVE_SPANS), b.curves)
    spans = []
    for i in range(max(len(spans_a), len(spans_b))):
        fa = spans_a[i] if i < len(spans_a) else None
        fb_ = spans_b[i] if i < len(spans_b) else None
        if by_iteration:
            label = f"iteration {i}"
        else:
            label = f"{i * 100 // RELATIVE_SPANS}-{(i + 1) * 100 // RELATIVE_SPANS} %"
        spans.append(AlignedSpan(i, label, fa, fb_))
    pa, pb = a.peak_event, b.peak_event
    rep_b = b.timeline.replay(b.device)
    return Alignment(
        by="iteration" if by_iteration else "relative time",
        devices=(a.device, b.device),
        spans=spans,
        peak_events=(pa, pb),
        categories_at_peak=(a.breakdown.split_at(pa), b.breakdown.split_at(pb)),
        sites=compare_sites(a, b),
        notes=notes,
        detected_change=detect_change(a_snap, b_snap, a.breakdown, b.breakdown),
        b_peak_reserved=int(rep_b.peak("reserved")[0]) if rep_b is not None else 0,
        breakdowns=(a.breakdown, b.breakdown),
    )


# --------------------------------------------------------------------------- prediction


def detect_change(
    a_snap: Snapshot,
    b_snap: Snapshot,
    a_bd: MemoryBreakdown | None = None,
    b_bd: MemoryBreakdown | None = None,
) -> str | None:
    """The remedy id of the change between the two recordings when the files themselves
    say it: other allocator settings (``allocator:SETTINGS``), B checkpointing where A
    does not (``gradient_checkpointing``), A keeping something every iteration that B
    does not (``free_kept``); None when they do not."""
    sa, sb = a_snap.allocator_settings or {}, b_snap.allocator_settings or {}
    if sa != sb and sb:
        conf = _conf_text(sb)
        if conf:
            return f"allocator:{conf}"
    if _uses_checkpoint(b_snap) and not _uses_checkpoint(a_snap):
        return "gradient_checkpointing"
    if a_bd is not None and b_bd is not None and a_bd.leaks and not b_bd.leaks:
        return "free_kept"
    return None


def _conf_text(settings: dict) -> str | None:
    """``PYTORCH_CUDA_ALLOC_CONF`` text of recorded settings (None: none to say)."""
    parts = []
    if settings.get("expandable_segments"):
        parts.append("expandable_segments:True")
    mss = settings.get("max_split_size")
    if isinstance(mss, int) and 0 < mss < (1 << 62):
        parts.append(f"max_split_size_mb:{mss >> 20}")
    gc = settings.get("garbage_collection_threshold")
    if isinstance(gc, (int, float)) and gc > 0:
        parts.append(f"garbage_collection_threshold:{gc:g}")
    return ",".join(parts) or None


def _uses_checkpoint(snap: Snapshot) -> bool:
    # advise's rule (it offers no checkpointing to such a program), in one place.
    from ..remedies.evidence import uses_checkpoint

    return uses_checkpoint(snap)


def prediction_error(
    a_snap: Snapshot,
    b_peak_reserved: int,
    change: str,
    device: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any] | None:
    """How far ``advise``'s prediction for ``change`` (a remedy id, or ``allocator:CONF``
    for any setting) on A is from B's real peak reserved.  None: advise makes no such
    prediction on A (it offers no such remedy, or A has no trace)."""
    from ..core.errors import SnapshotError
    from ..remedies.advise import advise
    from ..whatif.predictions import prepare

    try:
        case = prepare(a_snap, device if device is not None else default_trace_device(a_snap))
    except SnapshotError:
        return None
    if change.startswith("allocator:"):
        # Any setting, not only those advise lists: the what-if simulates it the same way.
        res = case.simulate(change.split(":", 1)[1], None)
        predicted, rng, method = int(res.peak_reserved), None, "simulated"
    else:
        got = next(
            (r for r in advise(case, progress=progress).remedies if r.remedy == change), None
        )
        if got is None:
            return None
        predicted, method = got.predicted_peak_reserved_bytes, got.method
        rng = got.predicted_peak_reserved_range
    err = predicted - b_peak_reserved
    out: dict[str, Any] = {
        "change": change,
        "method": method,
        "predicted_peak_reserved_bytes": predicted,
        "real_peak_reserved_bytes": b_peak_reserved,
        "error_bytes": err,
        "error_fraction": err / b_peak_reserved if b_peak_reserved else None,
        "predicted_range": list(rng) if rng is not None else None,
        "real_inside_range": (rng[0] <= b_peak_reserved <= rng[1]) if rng is not None else None,
    }
    return out


# --------------------------------------------------------------------------- text


def _signed(n: int | None) -> str:
    if n is None:
        return "-"
    return ("+" if n > 0 else "") + format_bytes(n) if n else "0 B"


def site_lines(al: Alignment, top: int = TOP_SITES) -> list[str]:
    """The sites whose bytes differ, largest change first, under their header; the
    header never stands alone: with no row to list, one line says why."""
    changed = al.changed_sites()
    shown = changed[:top]
    if not shown:
        return [f"{SITES_HEADER}: {al.site_summary()}"]
    lines = [f"{SITES_HEADER}, largest change first:"]
    for site in shown:
        lines.append(
            f"  {_signed(site.delta):>12}  {site.status:<7}  {site.frame}  "
            f"(A {format_bytes(site.a_bytes)}, B {format_bytes(site.b_bytes)})"
        )
    more = len(changed) - len(shown)
    same = len(al.sites) - len(changed)
    if more or same:
        lines.append(
            "  ("
            + ", ".join(
                ([f"{more:,} more {'differs' if more == 1 else 'differ'} (--top)"] if more else [])
                + (
                    [
                        f"{plural(same, 'site')} {'holds' if same == 1 else 'hold'} the same "
                        "bytes on both sides"
                    ]
                    if same
                    else []
                )
            )
            + ")"
        )
    return lines


def format_text(al: Alignment, top: int = TOP_SITES, max_spans: int = 12) -> list[str]:
    """The aligned part of ``vramscope diff``'s text."""
    from ..categories.wording import format_split

    lines = [f"aligned by {al.by} (device {al.devices[0]} of A, device {al.devices[1]} of B)"]
    lines += [f"  note: {t}" for t in al.notes]
    rows = [("span", "peak reserved A", "B", "delta", "requested delta", "phase at peak")]
    shown = al.spans if len(al.spans) <= max_spans else al.spans[: max_spans - 1]
    for s in shown:
        rows.append(
            (
                s.label,
                format_bytes(s.a.peak_reserved) if s.a else "-",
                format_bytes(s.b.peak_reserved) if s.b else "-",
                _signed(s.delta("peak_reserved")),
                _signed(s.delta("peak_requested")),
                "/".join(
                    p
                    for p in ((s.a.peak_phase if s.a else None), (s.b.peak_phase if s.b else None))
                    if p
                )
                or "-",
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    if len(shown) < len(al.spans):
        lines.append(f"  ... {len(al.spans) - len(shown)} more (--json has them all)")
    big = al.largest_change()
    if big is not None and big.delta("peak_reserved") and big.a and big.b:
        moved = [r for r in category_rows(big.a.categories, big.b.categories) if r.delta]
        what = ", ".join(f"{r.label} {_signed(r.delta)}" for r in moved[:4])
        lines.append(
            f"largest change: {big.label}, peak reserved "
            f"{_signed(big.delta('peak_reserved'))}" + (f" ({what})" if what else "")
        )
    ca, cb = al.categories_at_peak
    lines.append(f"at A's peak (event {al.peak_events[0]}): {format_split(ca)}")
    lines.append(f"at B's peak (event {al.peak_events[1]}): {format_split(cb)}")
    lines += site_lines(al, top)
    p = al.prediction_error
    if p is not None:
        rng = ""
        if p["predicted_range"] is not None:
            lo, hi = p["predicted_range"]
            rng = f"; range {format_bytes(lo)} - {format_bytes(hi)} " + (
                "holds it" if p["real_inside_range"] else "misses it"
            )
        frac = f" ({p['error_fraction']:+.1%})" if p["error_fraction"] is not None else ""
        lines.append(
            f"advise predicted {p['change']} ({p['method']}) at "
            f"{format_bytes(p['predicted_peak_reserved_bytes'])}; B peaked at "
            f"{format_bytes(p['real_peak_reserved_bytes'])}: off by "
            f"{_signed(p['error_bytes'])}{frac}{rng}"
        )
    return lines
