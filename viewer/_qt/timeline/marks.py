"""What the timeline marks over its curves: peaks, OOM and snapshot lines, the
record_function ranges, and the note on a trace that starts mid-run."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from ...model.analysis.alloc_details import annotation_markers, integrity_stretches
from ...model.core.snapshot import Action
from ...model.core.units import format_bytes, plural
from ...model.replay import integrity
from ...model.view.annotations import pair_ranges
from ..widgets import theme
from .constants import ANNOTATION_COLORS, CURVES, X_TIME, curve_colors
from .notes import EDGE_PX, MARKER_PX


class MarksMixin:
    """Peaks, markers and annotation bands of :class:`TimelinePanel` (its attributes)."""

    def _place_peaks(self) -> None:
        for t in self.peak_labels:
            self.plot.removeItem(t)
        self.peak_labels = []
        colors = curve_colors()
        spots = []
        groups: list[list[str]] = []
        xs = self.xs()
        span = max(float(xs[-1] - xs[0]), 1e-9)
        vmax = max(max(v for v, _ in self.peaks.values()), 1)
        # Peaks close together share one label (allocated, active and requested often do).
        for name in CURVES:
            v, k = self.peaks[name]
            spots.append(
                {
                    "pos": (float(xs[k]), float(v)),
                    "brush": pg.mkBrush(colors[name]),
                    "pen": pg.mkPen(theme.background(), width=1.5),
                    "data": name,
                }
            )
            for g in groups:
                gv, gk = self.peaks[g[0]]
                if abs(float(xs[gk] - xs[k])) < span * 0.08 and abs(gv - v) < vmax * 0.06:
                    g.append(name)
                    break
            else:
                groups.append([name])
        self.peak_scatter.setData(spots)
        fill = theme.background()
        fill.setAlpha(235)
        placed: list[float] = []  # x of the labels placed so far, highest peak first
        groups.sort(key=lambda g: -self.peaks[g[0]][0])
        for g in groups:
            v, k = self.peaks[g[0]]
            near = sum(1 for x in placed if abs(x - float(xs[k])) < span * 0.3)
            placed.append(float(xs[k]))
            html = ("peak in this window " if self.starts_mid_run else "peak ") + " · ".join(
                f'<span style="color:{colors[n]}">{n} {format_bytes(self.peaks[n][0])}</span>'
                for n in g
            )
            right = float(xs[k] - xs[0]) > span * 0.6
            t = pg.TextItem(
                html=f'<div style="font-size:8pt">{html}</div>',
                anchor=(1.0 if right else 0.0, 1.0 - 1.1 * near),
                fill=fill,
            )
            t.setPos(float(xs[k]), float(v))
            t.setZValue(9)
            t.curves = g
            self.plot.addItem(t, ignoreBounds=True)
            self.peak_labels.append(t)

    def peak_label_texts(self) -> list[str]:
        return [t.textItem.document().toPlainText() for t in self.peak_labels]

    def _place_markers(self) -> None:
        rep = self.doc.timeline.replay(self.device)
        xs = self.xs()
        ooms = np.flatnonzero(rep.action == Action.OOM)
        snaps = np.flatnonzero(rep.action == Action.SNAPSHOT)
        lines = []
        if len(snaps):
            lines.append((xs[snaps], theme.muted(), "snapshot", Qt.PenStyle.DotLine))
        if len(ooms):
            lines.append((xs[ooms], QColor(theme.OOM_RED), "OOM", Qt.PenStyle.SolidLine))
        self.bands_item.set_lines(lines)
        self.bands_item.set_bands(self.annotation_bands())
        self._place_notes(rep)

    def _place_notes(self, rep) -> None:
        """Allocation annotations as markers, untrusted stretches hatched, and the left
        edge of a trace whose earlier history was overwritten (one item for all)."""
        snap = self.doc.snap
        self.markers = annotation_markers(snap, self.device, rep.rows)
        self.stretches = integrity_stretches(snap, self._untrusted(), self.device)
        n = self.n
        if self.mode == X_TIME and self.has_time:
            mx = self.tx[np.clip(self.markers.position, 0, n - 1)]
            spans = [
                (float(self.tx[max(s.first, 0)]), float(self.tx[min(s.last, n - 1)]), s.kind)
                for s in self.stretches
                if s.first >= 0
            ]
        else:
            mx = self.markers.x_events()
            spans = [(s.first - 0.5, s.last + 0.5, s.kind) for s in self.stretches if s.first >= 0]
        self.marker_xs = mx
        edge = any(s.kind == "overwritten" for s in self.stretches)
        self.notes_item.set_notes(mx, spans, float(self.x_of(0)) - 0.5 if edge else None)
        self.update_legend()

    def _untrusted(self) -> list:
        """integrity.check of the document, once per document (it replays to the end)."""
        doc = self.doc
        if getattr(self, "_untrusted_of", (None, None))[0] is not doc:
            try:
                found = integrity.check(doc.timeline)
            except (ValueError, KeyError, IndexError) as exc:  # say it, never crash
                doc.snap.warnings.append(f"integrity check skipped: {exc}")
                found = []
            self._untrusted_of = (doc, found)
        return self._untrusted_of[1]

    def note_tooltip(self, x: float, top_px: float) -> str:
        """The tooltip at view x: an annotation marker's when the pointer is in the strip
        of markers at the top (``top_px``: pixels below the plot's top), else the text
        of the untrusted stretch or overwritten edge there ("" if none)."""
        px = self.vb.viewPixelSize()[0] or 1.0
        if top_px <= MARKER_PX + 3 and len(getattr(self, "markers", ())):
            i = self.markers.nearest(x, self.marker_xs, 4 * px)
            if i >= 0:
                near = np.flatnonzero(np.abs(self.marker_xs - self.marker_xs[i]) <= px)
                tips = [self.markers.tip[j] for j in near[:5].tolist()]
                more = len(near) - len(tips)
                return "\n\n".join(tips) + (f"\n(+{more} more here)" if more > 0 else "")
        x0 = float(self.x_of(0))
        for s in getattr(self, "stretches", []):
            if s.first < 0:
                if x0 - 0.5 - EDGE_PX * px <= x <= x0 - 0.5 + 2 * px:
                    return s.text
                continue
            a, b = float(self.x_of(s.first)) - 0.5, float(self.x_of(s.last)) + 0.5
            if a <= x <= b:
                return s.text
        return ""

    def marker_count(self) -> int:
        return len(getattr(self, "markers", ()))

    def annotation_bands(self) -> list[tuple[float, float, str, QColor]]:
        """record_function ranges of this device: START/END paired per name, in x units."""
        doc = self.doc
        ann = doc.snap.annotations
        if not len(ann.device) or not self.has_time:
            return []
        rep = doc.timeline.replay(self.device)
        t0 = int(rep.time_us[0])
        ranges = pair_ranges(ann, self.device)
        spans = list(zip(ranges.start_us.tolist(), ranges.end_us.tolist(), ranges.name.tolist()))
        names = sorted(set(ranges.name.tolist()))
        color_of = {}
        for i, n in enumerate(names):
            c = QColor(ANNOTATION_COLORS[i % len(ANNOTATION_COLORS)])
            c.setAlpha(38)
            color_of[n] = c
        if not spans:
            return []
        a, b = ranges.start_us, ranges.end_us
        if self.mode == X_TIME:
            x0s, x1s = (a - t0) / 1e6, (b - t0) / 1e6
        else:  # one search for all of them
            x0s = np.searchsorted(rep.time_us, a, side="left") - 0.5
            x1s = np.searchsorted(rep.time_us, b, side="right") - 0.5
        labels = {}
        for n in names:
            text = doc.snap.strings[n] if 0 <= n < len(doc.snap.strings) else "?"
            labels[n] = text.split("#")[0]
        return [
            (x0, x1, labels[n], color_of[n])
            for x0, x1, (_, _, n) in zip(x0s.tolist(), x1s.tolist(), spans)
        ]

    def _set_window_note(self, rep) -> None:
        """Say what a trace that starts mid-run cannot show: the segments and
        blocks that existed before its first event were made outside it, so their
        creation, and any peak before it, are not in the recording."""
        init = getattr(rep, "initial", None)
        n_seg = len(init.seg_addr) if init is not None else 0
        self.starts_mid_run = n_seg > 0
        if not n_seg:
            self.window_note.hide()
            self.window_note.setText("")
            return
        reserved = int(init.seg_size.sum())
        n_blk = len(init.blk_addr)
        self.window_note.setText(
            f"<span style='color:{theme.gap_outline().name()}'>&#9888;</span> Trace starts "
            f"mid-run: {plural(n_seg, 'segment')} ({format_bytes(reserved)}) "
            "existed before event 0; their creation and any earlier peak are not recorded."
        )
        self.window_note.setToolTip(
            f"{plural(n_seg, 'segment')} ({format_bytes(reserved)} reserved) and "
            f"{plural(n_blk, 'block')} were "
            "there before the first recorded event.\nThe allocator's history is a ring buffer "
            "(max_entries): a long run keeps only its last events, or recording started after "
            "the model was loaded.\nPeaks are peaks of this window; a what-if replay cannot "
            "predict the segments made before it.\nRecord from the start of the program, or "
            "with a larger max_entries, to see everything."
        )
        self.window_note.show()
