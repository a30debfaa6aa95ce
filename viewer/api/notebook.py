"""The report's sections as HTML fragments for notebooks (``_repr_html_``), without Qt.

A recording shows as the HTML report does (:mod:`vramscope.viewer.model.reports.html_report`:
its :class:`DeviceSection` data, filled by its :func:`complete_section`, drawn by its
section blocks): per device the figures, the OOM verdict, what the memory is, the leaks,
the remedies and the top allocation sites; the memory over time is an inline SVG chart
(peak reserved and every OOM marked) instead of a picture of the window.  A fragment is
one ``<div class="vramscope-report">`` with its own scoped style: no network, no script,
and readable on a light or a dark notebook theme (text inherits the theme's colour; lines
and fills are mid-tones; the chart draws in ``currentColor``).
"""

from __future__ import annotations

import datetime
import html
import os
from typing import Any

#: Scoped to the fragment: a notebook's own styles stay untouched, and every colour
#: reads on white and on a dark theme alike.
CSS = """
.vramscope-report { font-family: system-ui, sans-serif; line-height: 1.35;
  overflow-wrap: break-word; max-width: 100%; color: inherit; }
.vramscope-report h1 { font-size: 1.25em; margin: 0 0 2px; }
.vramscope-report h2 { font-size: 1.12em; margin: 18px 0 4px; padding: 2px 0;
  border-bottom: 2px solid rgba(128,128,128,.6); }
.vramscope-report h3 { font-size: 1em; margin: 14px 0 4px;
  border-bottom: 1px solid rgba(128,128,128,.35); }
.vramscope-report .muted { opacity: .72; }
.vramscope-report .verdict { background: #c62828; color: #fff; font-weight: bold;
  padding: 6px 10px; border-radius: 4px; }
.vramscope-report table { border-collapse: collapse; max-width: 100%; margin: 2px 0;
  color: inherit; background: transparent; }
.vramscope-report td, .vramscope-report th { padding: 2px 8px; text-align: left;
  vertical-align: top; border: none; background: transparent; color: inherit; }
.vramscope-report th { border-bottom: 1px solid rgba(128,128,128,.45); white-space: nowrap; }
.vramscope-report tr:nth-child(even) { background: rgba(128,128,128,.08); }
.vramscope-report td.fits, .vramscope-report td.method { white-space: nowrap; }
.vramscope-report td.path, .vramscope-report td.where, .vramscope-report td.change {
  overflow-wrap: anywhere; }
.vramscope-report td.num { text-align: right; font-variant-numeric: tabular-nums;
  white-space: nowrap; }
.vramscope-report table.figures tr { display: flex; flex-wrap: wrap; background: none; }
.vramscope-report table.figures td { padding: 2px 14px 2px 0; }
.vramscope-report table.figures .title { font-size: .78em; opacity: .72; }
.vramscope-report table.figures .value { font-size: 1.1em; font-weight: 600; }
.vramscope-report table.remedies td.where { min-width: min(10em, 15vw); }
.vramscope-report table.remedies td.change { min-width: min(14em, 22vw); }
/* A narrow notebook column: the remedies' headers and figures wrap rather than widen it. */
.vramscope-report table.remedies td.num, .vramscope-report table.remedies th,
.vramscope-report table.remedies td.method { white-space: normal; }
.vramscope-report table.remedies td.num:nth-child(3) { white-space: nowrap; }
.vramscope-report .swatch { display: inline-block; width: 10px; height: 10px;
  margin-right: 4px; }
.vramscope-report code { background: rgba(128,128,128,.16); color: inherit; padding: 0 3px;
  white-space: pre-wrap; overflow-wrap: anywhere; }
.vramscope-report pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0;
  background: rgba(128,128,128,.10); color: inherit; padding: 6px 8px; }
.vramscope-report svg.chart { width: 100%; max-width: 760px; height: auto; display: block; }
.vramscope-report img { max-width: 100%; height: auto; }
"""

#: The chart's curves: mid-tones, visible on white and on a dark background.
RESERVED_COLOR = "#e8833a"
ALLOCATED_COLOR = "#3b82f6"
OOM_COLOR = "#e53935"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def wrap(body: list[str] | str) -> str:
    """``body`` in the fragment's scoped ``<div>`` with its style."""
    inner = body if isinstance(body, str) else "\n".join(body)
    return f'<div class="vramscope-report"><style>{CSS}</style>\n{inner}\n</div>'


# ----------------------------------------------------------------------------- the chart
def timeline_svg(
    snap, timeline, device: int, at: int | None = None, width: int = 760, height: int = 220
) -> str:
    """Reserved and allocated bytes of ``device`` over its trace events as an inline SVG
    (the highest value of each pixel column, so no peak is lost), with its peak
    reserved, every OOM and, with ``at``, that event marked; "" without a trace."""
    import numpy as np

    from vramscope.viewer.model.core.units import format_bytes
    from vramscope.viewer.model.replay.timeline import oom_events

    rep = timeline.replay(device) if timeline is not None else None
    if rep is None or not len(rep):
        return ""
    res = np.asarray(rep.reserved, dtype=np.float64)
    alc = np.asarray(rep.allocated, dtype=np.float64)
    n = len(res)
    left, right, top, bottom = 70, 12, 22, 26
    w, h = width - left - right, height - top - bottom
    cols = max(1, min(n, w))
    starts = np.unique(np.linspace(0, n, cols, endpoint=False).astype(np.int64))
    r_max = np.maximum.reduceat(res, starts)
    a_max = np.maximum.reduceat(alc, starts)
    peak_bytes, peak_event = rep.peak("reserved")
    y_top = max(float(res.max()), 1.0) * 1.08

    def x(k: float) -> float:
        return left + (w * k / max(n - 1, 1))

    def y(v: float) -> float:
        return top + h - h * v / y_top

    def line(values: np.ndarray, color: str, name: str) -> str:
        xs = [x(k) for k in starts.tolist()]
        pts = " ".join(f"{a:.1f},{y(v):.1f}" for a, v in zip(xs, values.tolist()))
        return (
            f'<polyline class="{name}" fill="none" stroke="{color}" stroke-width="1.6" '
            f'points="{pts}"><title>{name}</title></polyline>'
        )

    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" '
        f'font-size="11" fill="currentColor">',
        f"<title>Memory over time, device {device}</title>",
    ]
    for frac in (0.0, 0.5, 1.0):
        v = y_top / 1.08 * frac
        out.append(
            f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            'stroke="currentColor" stroke-opacity=".18"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
            f"{_e(format_bytes(int(v)))}</text>"
        )
    out.append(f'<text x="{left}" y="{height - 8}">event 0</text>')
    out.append(f'<text x="{left + w}" y="{height - 8}" text-anchor="end">event {n - 1:,}</text>')
    out.append(line(r_max, RESERVED_COLOR, "reserved"))
    out.append(line(a_max, ALLOCATED_COLOR, "allocated"))

    def mark(k: int, color: str, label: str, dash: str, row: int) -> None:
        xx = x(k)
        anchor = "end" if xx > left + w * 0.6 else "start"
        dx = -4 if anchor == "end" else 4
        out.append(
            f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{top}" y2="{top + h}" '
            f'stroke="{color}" stroke-width="1.2" stroke-dasharray="{dash}"/>'
        )
        out.append(
            f'<text x="{xx + dx:.1f}" y="{top - 8 + 12 * row}" text-anchor="{anchor}" '
            f'fill="{color}">{_e(label)}</text>'
        )

    mark(
        int(peak_event),
        RESERVED_COLOR,
        f"peak reserved {format_bytes(int(peak_bytes))} (event {int(peak_event):,})",
        "4 3",
        0,
    )
    ooms = oom_events(snap).get(device, [])
    for k in ooms[-3:]:
        mark(int(k), OOM_COLOR, f"OOM (event {int(k):,})", "", 1)
    if at is not None and 0 <= at < n:
        mark(at, "currentColor", f"event {at:,}", "2 2", 2)
    # The legend, bottom centre.
    cx = left + w // 2 - 80
    out.append(
        f'<rect x="{cx}" y="{height - 16}" width="10" height="3" '
        f'fill="{RESERVED_COLOR}"/><text x="{cx + 14}" y="{height - 12}">reserved</text>'
    )
    out.append(
        f'<rect x="{cx + 80}" y="{height - 16}" width="10" height="3" '
        f'fill="{ALLOCATED_COLOR}"/><text x="{cx + 94}" y="{height - 12}">allocated'
        "</text>"
    )
    out.append("</svg>")
    return "".join(out)


# ----------------------------------------------------------------------------- the report
def report_parts(rec, remedies: bool = True):
    """The report's data for ``rec`` (a :class:`~.recording.Recording`; one section per
    device, the OOM's first), filled
    the way the GUI's export fills a device it does not show: the figures at the end as
    recorded (in the header's words), the device's last OOM verdict, then
    :func:`complete_section` (top sites, what the memory is, the remedies: the same
    answer as ``rec.advise(device=N)``).  Returns (ReportParts, {device: chart SVG})."""
    from vramscope.viewer import __version__
    from vramscope.viewer.model.analysis.figures import Selection, memory_stats
    from vramscope.viewer.model.analysis.oom import oom_reports
    from vramscope.viewer.model.reports.html_report import (
        DeviceSection,
        ReportParts,
        complete_section,
        report_devices,
    )
    from vramscope.viewer.model.view.figure_words import FIGURE_TITLES, figure_text, oom_where

    snap = rec.snapshot
    timeline = rec._timeline_of() if len(snap.trace) else None
    parts = ReportParts(
        title=os.path.basename(rec.path.rstrip("/")) or rec.path,
        path=rec.path,
        generated=f"vramscope {__version__}, {datetime.datetime.now():%Y-%m-%d %H:%M}",
    )
    order = report_devices(snap)
    parts.all_devices = sorted(order)
    ooms = oom_reports(snap, timeline)
    charts: dict[Any, str] = {}
    sections = [DeviceSection(device=d) for d in order] or [DeviceSection(device=None)]
    for sec in sections:
        d = sec.device
        stats = memory_stats(snap, Selection(device=d))
        sec.figures = [(title, figure_text(stats, key)) for key, title in FIGURE_TITLES.items()]
        sec.scope = (
            f"device {d} · " if d is not None else ""
        ) + "as recorded (the end of its trace)"
        oom = next((r for r in reversed(ooms) if d is None or r.device == d), None)
        sec.verdict = (
            f"CUDA out of memory ({oom_where(oom)}): {oom.verdict}" if oom is not None else None
        )
        advice = None
        traced = timeline is not None and d is not None and d in timeline.devices
        if remedies and traced:
            advice = rec._advice_of(d)
        complete_section(sec, snap, timeline, advice, remedies=remedies)
        if d is not None:
            charts[d] = rec._chart(d)
    parts.devices = sections
    if snap.warnings:
        parts.notes.append(
            f"{len(snap.warnings)} kinds of entries were skipped while reading the file"
        )
    return parts, charts


def build_report(got) -> tuple[str, str]:
    """(the page, the fragment) of :func:`report_parts`' result."""
    from vramscope.viewer.model.reports.html_report import report_body

    parts, charts = got
    fragment = wrap(report_body(parts, charts))
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width">'
        f"<title>{_e(parts.title)} — vramscope report</title>"
        "<style>body { margin: 24px; color: #1a1a1a; background: #fff; }"
        "@media (prefers-color-scheme: dark) { body { color: #e6e6e6; "
        "background: #1e1e1e; } }</style>"
        f"</head><body>\n{fragment}\n</body></html>\n"
    )
    return page, fragment


# ----------------------------------------------------------------------------- results
def summary_fragment(data: dict, chart: str) -> str:
    """A summary as a fragment: its figures, verdict, chart, split and top sites."""
    from vramscope.viewer.model.core.units import format_bytes
    from vramscope.viewer.model.reports.html_report import DeviceSection, section_html

    at = data.get("at")
    sec = DeviceSection(device=data.get("device"))
    keys = (
        ("Reserved", "reserved_bytes"),
        ("Allocated", "allocated_bytes"),
        ("Active", "active_bytes"),
        ("Requested", "requested_bytes"),
        ("Peak reserved", "peak_reserved_bytes"),
        ("Peak allocated", "peak_allocated_bytes"),
    )
    sec.figures = [(t, format_bytes(int(data[k]))) for t, k in keys if data.get(k) is not None]
    sec.scope = (
        f"after event {at['event']:,} of device {at['device']}" if at else "as recorded"
    ) + f" · {data['file']}"
    ooms = data.get("ooms") or []
    if at:
        ooms = [o for o in ooms if o["event_index"] <= at["trace_row"]]
    split = data.get("categories_at") if at else data.get("categories_at_peak")
    if split:
        sec.categories = split
        sec.categories_caption = f"after event {at['event']:,}" if at else "at the peak"
        sec.graph_held = data.get("graph_held_at" if at else "graph_held_at_peak") or {}
    peak = data.get("top_sites_at_peak")
    if peak:
        sec.top_sites = peak["sites"]
        sec.sites_caption = f"at the peak allocated, event {peak['event']:,}"
    body = [f"<h2>{_e(data['file'])}</h2>"]
    if ooms:
        body.append(f'<p class="verdict">CUDA out of memory: {_e(ooms[-1].get("verdict"))}</p>')
    body += section_html(sec, ("figures",))
    if chart:
        body += ["<h3>Memory over time</h3>", chart]
    body += section_html(sec, ("categories", "sites"))
    return wrap(body)


def categories_fragment(data: dict, split: dict, at: int | None) -> str:
    from vramscope.viewer.model.reports.html_report import DeviceSection, section_html

    sec = DeviceSection(
        device=data.get("categories_at_device" if at is not None else "categories_device")
    )
    sec.categories = split or None
    sec.categories_caption = f"after event {at:,}" if at is not None else "at the peak"
    sec.categories_note = "No allocation history: nothing to tell apart."
    sec.leaked_bytes = int(data.get("leaked_bytes_at_peak") or 0) if at is None else 0
    sec.leaks = data.get("leaks") or []
    sec.graph_held = data.get("graph_held_at" if at is not None else "graph_held_at_peak") or {}
    return wrap(section_html(sec, ("categories", "leaks")))


def advice_fragment(data: dict) -> str:
    from vramscope.viewer.model.reports.html_report import DeviceSection, section_html

    sec = DeviceSection(device=data.get("device"), advice=data)
    return wrap(section_html(sec, ("remedies",)))


def text_fragment(title: str, text: str) -> str:
    """A CLI answer with no section of the report: its text, as printed."""
    return wrap([f"<h3>{_e(title)}</h3>", f"<pre>{_e(text)}</pre>"])
