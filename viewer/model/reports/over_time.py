"""The Over-time comparison: two recordings of one program on one aligned time axis,
with what the Diff window's Over-time view draws of each side.

:func:`compute` aligns two documents (:func:`.aligned.align`), lays their events on
the aligned axis (:mod:`.aligned_axis`) and gathers each side's category split, its
``reserved`` and ``allocated`` curves and, per stack, the allocation site that made
it (the sites table highlights a site's blocks on both maps:
:meth:`OverTime.site_stack_masks`).  :func:`prediction_text` words ``advise``'s prediction
held against B's real peak.  The view (``_qt/compare/over_time.py``) only draws.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..categories import MemoryBreakdown
from ..core import frames as fr
from ..core.errors import SnapshotError
from ..core.progress import Progress
from ..core.units import format_bytes
from . import aligned
from .aligned_axis import SpanAxis, build_axis
from .diff import signed_bytes

#: report(what is being done, fraction of the whole 0..1)
Report = Callable[[str, float], None]
NO_STACK = aligned.NO_STACK  # the sites' key of allocations without a stack


@dataclass
class SideData:
    """One side's part of the result: its document and device, breakdown, event x and
    curves, and per stack the id of its allocation site (-1: none)."""

    doc: Any  # a view.document.Document (reports sit beside view, never above it)
    device: int
    breakdown: MemoryBreakdown
    x: np.ndarray
    curves: dict[str, np.ndarray]
    stack_site: np.ndarray
    paths: dict[tuple[str, int, str], str] = field(default_factory=dict)


@dataclass
class OverTime:
    """What the alignment job computes."""

    alignment: aligned.Alignment
    axis: SpanAxis
    a: SideData
    b: SideData
    site_ids: dict[tuple[str, int, str], int]

    def side(self, s: str) -> SideData:
        return self.a if s == "a" else self.b

    def site_stack_masks(self, site: aligned.SiteDelta) -> tuple[np.ndarray, np.ndarray]:
        """Per stack of A and of B, whether ``site`` made its allocations (a block's mask
        is this indexed by the block's stack)."""
        masks = []
        for key, side in zip(self.site_keys(site), (self.a, self.b)):
            sid = self.site_ids.get(key, -2) if key != NO_STACK else -2
            masks.append(side.stack_site == sid)
        return masks[0], masks[1]

    def site_keys(self, site: aligned.SiteDelta) -> tuple[tuple, tuple]:
        """The (A, B) keys of a site: a moved line has A's own line."""
        key = aligned.site_key(site.filename, site.line, site.function)
        if site.filename == NO_STACK[0]:
            key = NO_STACK
        key_a = (key[0], site.a_line, key[2]) if site.a_line is not None else key
        return key_a, key


def no_history(doc: Any) -> bool:
    """The document has no trace to align (no allocation history)."""
    if doc is None:
        return True
    dev = doc.root.trace_device()
    return dev is None or not doc.root.n_events(dev)


def stack_sites(snap, ids: dict) -> tuple[np.ndarray, dict]:
    """Per stack, the id (in ``ids``, grown) of the site that made its allocations
    (:func:`vramscope.viewer.model.reports.aligned.program_site_frames`), and each
    site's full path."""
    frames_of = aligned.program_site_frames(snap)
    uniq, inv = np.unique(frames_of, return_inverse=True)
    site_of_frame = np.full(len(uniq), -1, np.int64)
    paths = {}
    for j, f in enumerate(uniq.tolist()):
        if f < 0:
            key = NO_STACK
        else:
            view = fr.frame_view(snap.frames, int(f), 0)
            key = aligned.site_key(view.filename, int(view.line), view.name)
            paths[key] = view.filename
        site_of_frame[j] = ids.setdefault(key, len(ids))
    return site_of_frame[inv] if len(uniq) else np.zeros(0, np.int64), paths


def compute(
    a: Any, b: Any, report: Report | None = None, cancel: threading.Event | None = None
) -> OverTime:
    """A and B (two documents) aligned with all the Over-time view draws: slow, run it
    off the GUI thread; ``report(what, fraction)`` hears the progress, ``cancel`` stops
    it at the next checkpoint (:class:`~..core.progress.LoadCancelled`).  Raises
    :class:`~..core.errors.SnapshotError` with one line when either side has no trace."""
    a, b = a.root, b.root
    missing = [s for s, d in (("A", a), ("B", b)) if no_history(d)]
    if missing:
        raise SnapshotError(
            f"{' and '.join(missing)} {'has' if len(missing) == 1 else 'have'}"
            " no allocation history: nothing to align"
        )

    def part(lo: float, hi: float, what: str) -> Progress:
        tell = report or (lambda _what, _f: None)
        return Progress(lambda _s, f: tell(what, lo + (hi - lo) * f), cancel)

    al = aligned.align(
        a.snap, b.snap, a.timeline, b.timeline, progress=part(0.0, 0.5, "aligning the iterations")
    )
    if al is None:
        raise SnapshotError("nothing to align: a recording has no trace on its device")
    n = (a.n_events(al.devices[0]), b.n_events(al.devices[1]))
    axis = build_axis(al, *n)
    ids: dict[tuple[str, int, str], int] = {}
    sides = []
    for i, (doc, dev, ax) in enumerate(((a, al.devices[0], axis.a), (b, al.devices[1], axis.b))):
        p = part(0.5 + 0.25 * i, 0.75 + 0.25 * i, "categories and curves of " + "AB"[i])
        bd = (
            al.breakdowns[i]
            if al.breakdowns is not None
            else MemoryBreakdown.build(
                doc.snap, doc.timeline, dev, p, intervals_of_device=doc.intervals(dev)
            )
        )
        cols = doc.curves(dev)
        curves = {c: np.asarray(cols[c], np.int64) for c in ("reserved", "allocated")}
        p.update("curves", 0.8)
        x = ax.x_of(np.arange(n[i], dtype=np.int64))
        stack_site, paths = stack_sites(doc.snap, ids)
        p.update("sites", 1.0)
        sides.append(SideData(doc, dev, bd, x, curves, stack_site, paths))
    return OverTime(al, axis, sides[0], sides[1], ids)


def prediction_text(p: dict[str, Any] | None, change: str) -> str:
    """advise's prediction held against B's peak, in one line."""
    if p is None:
        return f"advise makes no prediction for {change} on A"
    frac = f" ({p['error_fraction'] * 100:+.1f} %)" if p["error_fraction"] is not None else ""
    rng = ""
    if p["predicted_range"] is not None:
        lo, hi = p["predicted_range"]
        rng = f"; its range {format_bytes(lo)} – {format_bytes(hi)} " + (
            "holds it" if p["real_inside_range"] else "misses it"
        )
    return (
        f"advise predicted {p['change']} ({p['method']}) at "
        f"{format_bytes(p['predicted_peak_reserved_bytes'])}; B peaked at "
        f"{format_bytes(p['real_peak_reserved_bytes'])}: off by "
        f"{signed_bytes(p['error_bytes'])}{frac}{rng}"
    )
