"""One self-contained HTML file about one snapshot, to attach to a bug report.

:func:`build_html` turns plain data - per device (the device that ran out of memory
first, :func:`report_devices`): the figures, the OOM verdict, what the memory is, the
leaks, the remedies (``Advice.to_dict()``: the CLI's JSON, read as it is - recorded
peak, predicted peaks and the fits word are never decided again here), the top
allocation sites; and PNG bytes of the views - into one HTML page with no external
resource: the images are ``data:`` URIs, the style is inline.  Every text is escaped
(``html.escape``): file names and stack frames come from the recording.
:func:`complete_section` computes what a section still lacks (off the GUI thread).  The
GUI's File > Export report and ``vramscope report`` gather the data and grab the
images; this module never sees Qt.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis.focus import default_device, devices_of, peak_reserved_by_device
from ..categories import CATEGORY_COLORS, CATEGORY_LABELS, CATEGORY_NAMES
from ..core.progress import Progress
from ..core.snapshot import Action
from ..core.units import format_bytes, plural
from ..remedies.advise import peak_text, peak_words


# ----------------------------------------------------------------------------- the page
@dataclass
class DeviceSection:
    """What the report says about one device (plain data)."""

    device: int | None  # None: the snapshot as a whole (no device told apart)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (title, value) as shown
    scope: str = ""  # what the figures count ("device 0 · after event 11,112")
    verdict: str | None = None  # the OOM banner's text; None: no OOM on this device
    categories: dict[str, int] | None = None  # category name -> bytes
    categories_caption: str = ""  # the moment of that split
    categories_note: str = ""  # why there is no split, when there is none
    leaked_bytes: int = 0  # of the split, bytes kept by leaking lines
    graph_held: dict[str, int] = field(default_factory=dict)  # beside it, in CUDA graph pools
    leaks: list[dict[str, Any]] = field(default_factory=list)  # Leak.to_dict()
    advice: dict[str, Any] | None = None  # Advice.to_dict()
    advice_note: str = ""  # why there is no advice, when there is none
    top_sites: list[dict[str, Any]] | None = None  # the summary's sites of this device
    sites_caption: str = ""  # their moment ("at the OOM, event 421")
    images: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, PNG bytes)
    has_trace: bool = True  # the device has allocation history (remedies possible)
    # Its highest reserved bytes as recorded (the advice's figure where there is one).
    recorded_peak_reserved_bytes: int | None = None

    @property
    def heading(self) -> str:
        if self.device is None:
            return "The snapshot"
        return f"Device {self.device}" + (" · ran out of memory" if self.verdict else "")


@dataclass
class ReportParts:
    """What one report says (plain data; every field optional but the title)."""

    title: str  # the file's name
    path: str = ""
    generated: str = ""  # "vramscope X.Y, 2026-11-28 05:40"
    facts: str = ""  # torch version, GPU, how it was captured
    devices: list[DeviceSection] = field(default_factory=list)  # the OOM's device first
    all_devices: list[int] = field(default_factory=list)  # every device the file has
    notes: list[str] = field(default_factory=list)


def report_devices(snap) -> list[int]:
    """The devices a report covers, in its order: the last OOM's device (else the one
    whose reserved memory peaked highest: the device every command answers for first),
    then the other devices that ran out of memory, then the rest, ascending."""
    devices = devices_of(snap)
    first = default_device(snap)
    trace = snap.trace
    oom = set(trace.device[trace.action == Action.OOM].tolist()) if len(trace) else set()
    return sorted(devices, key=lambda d: (d != first, d not in oom, d))


STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #1a1a1a; background: #fff;
       overflow-wrap: break-word; }
h1 { font-size: 20px; margin-bottom: 2px; }
h2 { font-size: 18px; margin-top: 36px; padding: 4px 0; border-bottom: 2px solid #888; }
h3 { font-size: 15px; margin-top: 24px; border-bottom: 1px solid #ccc; }
.muted { color: #555; }
.verdict { background: #c62828; color: #fff; font-weight: bold; padding: 8px 12px;
           border-radius: 4px; }
table { border-collapse: collapse; max-width: 100%; }
td, th { padding: 3px 10px; text-align: left; vertical-align: top; }
th { white-space: nowrap; }
td.fits, td.method { white-space: nowrap; }
/* File paths and settings (one long word): break anywhere rather than widen the page. */
td.path, td.where, td.change { overflow-wrap: anywhere; }
th { border-bottom: 1px solid #ccc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; overflow-wrap: normal;
         white-space: nowrap; }
table.figures tr { display: flex; flex-wrap: wrap; }
table.figures td { padding: 2px 14px 2px 0; }
table.figures .title { font-size: 11px; color: #555; }
table.figures .value { font-size: 17px; font-weight: 600; }
table.remedies td.where { min-width: 14em; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figure { margin: 12px 0; }
code { background: #f3f3f3; padding: 0 3px; white-space: pre-wrap; overflow-wrap: anywhere; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def data_uri(png: bytes) -> str:
    """``png`` as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _code(text: Any) -> str:
    """``text`` in a code box; nothing at all when there is no text (an allocator setting
    has no line of code to change)."""
    return f"<code>{_e(text)}</code>" if text else ""


def _figures(sec: DeviceSection) -> list[str]:
    if not sec.figures:
        return []
    cells = "".join(
        f'<td class="figure"><div class="title">{_e(t)}</div><div class="value">{_e(v)}</div></td>'
        for t, v in sec.figures
    )
    out = ["<h3>Figures</h3>", f'<table class="figures"><tr>{cells}</tr></table>']
    if sec.scope:
        out.append(f'<p class="muted scope">{_e(sec.scope)}</p>')
    return out


def _categories(sec: DeviceSection) -> list[str]:
    split = sec.categories
    if not split:
        return (
            [f'<h3>What the memory is</h3><p class="muted">{_e(sec.categories_note)}</p>']
            if sec.categories_note
            else []
        )
    total = sum(split.values())
    caption = f" ({_e(sec.categories_caption)})" if sec.categories_caption else ""
    out = [
        f"<h3>What the memory is{caption}</h3>",
        '<table class="categories"><tr><th>Category</th><th>Bytes</th><th>Share</th></tr>',
    ]
    for name in CATEGORY_NAMES:
        b = int(split.get(name, 0))
        if b <= 0:
            continue
        label = CATEGORY_LABELS[CATEGORY_NAMES.index(name)]
        swatch = CATEGORY_COLORS.get(name, "#999")
        out.append(
            f'<tr><td><span class="swatch" style="background:{swatch}">'
            f'</span>{_e(label)}</td><td class="num">{_e(format_bytes(b))}</td>'
            f'<td class="num">{b / total:.0%}</td></tr>'
        )
    out.append(
        f'<tr><th>total</th><th class="num">{_e(format_bytes(total))}</th><th></th></tr></table>'
    )
    if sec.leaked_bytes:
        out.append(
            f"<p>Of it, {_e(format_bytes(sec.leaked_bytes))} is kept by leaking lines (below).</p>"
        )
    if sec.graph_held:
        from ..categories.wording import HELD_WHY, held_words

        out.append(
            f"<p>Beside it: {_e(held_words(sec.graph_held))} "
            f'<span class="muted">({_e(HELD_WHY)})</span>.</p>'
        )
    return out


def _leaks(sec: DeviceSection) -> list[str]:
    if not sec.leaks:
        return []
    out = [
        "<h3>Leaks</h3>",
        "<p>Lines whose allocations survive iteration after iteration:</p>",
        '<table class="leaks"><tr><th>Line</th><th>Function</th><th>Per iteration</th>'
        "<th>Iterations</th><th>Live</th></tr>",
    ]
    for lk in sec.leaks:
        out.append(
            f'<tr><td class="path">{_code(lk.get("frame", ""))}</td>'
            f"<td>{_e(lk.get('function', ''))}</td>"
            f'<td class="num">{_e(format_bytes(int(lk.get("bytes_per_iteration", 0))))}'
            f'</td><td class="num">{_e(lk.get("iterations", ""))}</td>'
            f'<td class="num">{_e(format_bytes(int(lk.get("live_bytes", 0))))}</td></tr>'
        )
    out.append("</table>")
    return out


def _remedies(sec: DeviceSection) -> list[str]:
    a = sec.advice
    if not a:
        return [
            "<h3>What would make it fit</h3>",
            f'<p class="muted">{_e(sec.advice_note or "Not computed.")}</p>',
        ]
    out = ["<h3>What would make it fit</h3>"]
    if a.get("verdict"):
        out.append(f"<p>{_e(a['verdict'])}</p>")
    limit = a.get("memory_limit_bytes")
    words = peak_words(
        int(a.get("recorded_peak_reserved_bytes") or 0),
        int(a.get("needed_peak_reserved_bytes") or a.get("recorded_peak_reserved_bytes") or 0),
    )
    out.append(
        f'<p class="muted peaks">{_e(words[:1].upper() + words[1:])}'
        + (
            f"; memory limit {_e(format_bytes(int(limit)))} "
            f"({_e(a.get('memory_limit_source', ''))})"
            if limit
            else ""
        )
        + ".</p>"
    )
    rems = a.get("remedies") or []
    # advise's notes say why there is no remedy, or what its answers rest on: the same
    # lines the CLI prints under its table.
    notes = [f'<p class="muted note">Note: {_e(n)}</p>' for n in a.get("notes") or []]
    if not rems:
        out.append("<p>No remedy found.</p>")
        return out + notes
    out.append(
        '<table class="remedies"><tr><th>Change</th><th>Predicted peak</th>'
        "<th>Saving</th><th>How</th><th>Fits</th><th>Where</th></tr>"
    )
    for r in rems:
        rng = r.get("predicted_peak_reserved_range")
        peak = peak_text(
            int(r.get("predicted_peak_reserved_bytes") or 0),
            (int(rng[0]), int(rng[1])) if rng else None,
            bool(r.get("predicted_peak_is_estimate")),
        )
        out.append(
            f'<tr><td class="change"><b>{_e(r.get("title", ""))}</b><br>'
            f"{_e(r.get('change', ''))}</td>"
            f'<td class="num">{_e(peak)}</td>'
            f'<td class="num">{_e(format_bytes(int(r.get("saving_bytes") or 0)))}</td>'
            f'<td class="method">{_e(r.get("method", ""))}</td>'
            f'<td class="fits">{_e(r.get("fits_word", "?"))}</td>'
            f'<td class="where">{_code(r.get("where"))}</td></tr>'
        )
    out.append("</table>")
    return out + notes


def _cell(key: str, value: Any) -> str:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and "bytes" in key:
        return f'<td class="num">{_e(format_bytes(int(value)))}</td>'
    if key == "line" and isinstance(value, (int, np.integer)):
        # A line number, as the frame beside it names it (file.py:3645): not a count.
        # Lines count from 1: 0 is the summary's "no line" (allocations without a stack).
        return f'<td class="num">{int(value) if value else ""}</td>'
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return f'<td class="num">{_e(f"{value:,}")}</td>'
    if isinstance(value, (list, tuple)):
        value = " \u2190 ".join(str(v) for v in value)
    # A file path or a stack: one long word that may break anywhere.
    path = any(w in key for w in ("file", "frame", "site", "stack", "where"))
    cls = ' class="path"' if path else ""
    return f"<td{cls}>{_e('' if value is None else value)}</td>"


def _top_sites(sec: DeviceSection) -> list[str]:
    sites = [s for s in (sec.top_sites or []) if isinstance(s, dict)]
    if not sites:
        return []
    # Whatever fields the summary gives (they are its to choose): the first site's keys.
    keys = [k for k in sites[0] if not isinstance(sites[0][k], dict)][:6]
    head = "".join(f"<th>{_e(k.replace('_', ' '))}</th>" for k in keys)
    rows = "".join("<tr>" + "".join(_cell(k, s.get(k)) for k in keys) + "</tr>" for s in sites)
    caption = f" ({_e(sec.sites_caption)})" if sec.sites_caption else ""
    return [
        f"<h3>Top allocation sites{caption}</h3>",
        f'<table class="sites"><tr>{head}</tr>{rows}</table>',
    ]


def _images(sec: DeviceSection) -> list[str]:
    out = []
    for caption, png in sec.images:
        out.append(
            f'<figure><img alt="{_e(caption)}" src="{data_uri(png)}">'
            f'<figcaption class="muted">{_e(caption)}</figcaption></figure>'
        )
    return (["<h3>Views</h3>"] + out) if out else []


SECTIONS = (_figures, _categories, _leaks, _remedies, _top_sites, _images)

#: The blocks by name, for pages that show some of them (the notebook display).
BLOCKS = {
    "figures": _figures,
    "categories": _categories,
    "leaks": _leaks,
    "remedies": _remedies,
    "sites": _top_sites,
    "views": _images,
}


def section_html(sec: DeviceSection, only: tuple[str, ...] | None = None) -> list[str]:
    """The HTML of ``sec``'s blocks in the report's order (``only``: those of
    :data:`BLOCKS` named, in that order); a block with nothing to show gives nothing."""
    blocks = SECTIONS if only is None else tuple(BLOCKS[name] for name in only)
    return [line for block in blocks for line in block(sec)]


def _device_overview(parts: ReportParts) -> list[str]:
    """Which devices the file has and which this report covers: a report never covers
    one device of several without saying so."""
    covered = [s.device for s in parts.devices if s.device is not None]
    every = parts.all_devices or covered
    if len(every) < 2:
        return []
    left = [d for d in every if d not in covered]
    out = [
        f'<p class="devices">This file has {plural(len(every), "device")} '
        f"({', '.join(str(d) for d in every)}); this report covers "
        + (
            "all of them, one section each"
            + (
                f", device {covered[0]} first (it ran out of memory)"
                if parts.devices and parts.devices[0].verdict
                else ""
            )
            if not left
            else f"device{'s' if len(covered) > 1 else ''} {', '.join(map(str, covered))} "
            f"(not {', '.join(map(str, left))})"
        )
        + ".</p>"
    ]
    rows = []
    for sec in parts.devices:
        peak = (sec.advice or {}).get(
            "recorded_peak_reserved_bytes", sec.recorded_peak_reserved_bytes
        )
        rows.append(
            f"<tr><td>{_e(sec.device)}</td>"
            f"<td>{'ran out of memory' if sec.verdict else 'no OOM'}</td>"
            f'<td class="num">{_e(format_bytes(int(peak))) if peak is not None else ""}'
            "</td></tr>"
        )
    out.append(
        '<table class="device-list"><tr><th>Device</th><th>OOM</th>'
        "<th>Recorded peak reserved</th></tr>" + "".join(rows) + "</table>"
    )
    return out


def report_body(parts: ReportParts, charts: dict[int | None, str] | None = None) -> list[str]:
    """The report's HTML lines: the title, which devices it covers, one section per
    device in ``parts.devices``' order, the notes.  ``charts``: HTML drawn after a
    device's verdict under "Memory over time" (the notebook's inline chart), by device."""
    body: list[str] = [f"<h1>{_e(parts.title)}</h1>"]
    sub = " · ".join(_e(x) for x in (parts.path, parts.facts) if x and x != parts.title)
    if sub:
        body.append(f'<p class="muted">{sub}</p>')
    if not any(sec.verdict for sec in parts.devices):
        body.append('<p class="no-oom">No CUDA out-of-memory error in this snapshot.</p>')
    body += _device_overview(parts)
    for sec in parts.devices:
        anchor = f"device-{sec.device}" if sec.device is not None else "snapshot"
        body.append(f'<section class="device" id="{anchor}"><h2>{_e(sec.heading)}</h2>')
        if sec.verdict:
            body.append(f'<p class="verdict">{_e(sec.verdict)}</p>')
        chart = (charts or {}).get(sec.device)
        if chart:
            body += ["<h3>Memory over time</h3>", chart]
        body += section_html(sec)
        body.append("</section>")
    if parts.notes:
        body.append(
            "<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in parts.notes) + "</ul>"
        )
    if parts.generated:
        body.append(f'<p class="muted">Made by {_e(parts.generated)}.</p>')
    return body


def build_html(parts: ReportParts) -> str:
    """The report page (a ``str`` of UTF-8 HTML, self-contained): one section per
    device, in ``parts.devices``' order."""
    body = report_body(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width">'
        f"<title>{_e(parts.title)} — vramscope report</title>"
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


# ----------------------------------------------------------------------------- the data
NO_HISTORY = (
    "No remedies: {what} has no allocation history (record with "
    "torch.cuda.memory._record_memory_history())."
)


def complete_section(
    sec: DeviceSection,
    snap,
    timeline,
    advice=None,
    breakdown=None,
    remedies: bool = True,
    progress: Progress | None = None,
) -> None:
    """Fill in what ``sec`` still lacks, from the model (slow: run it off the GUI thread):
    the device's top allocation sites (the summary's), what the memory is at the end of
    its trace (unless ``sec`` has a split), and its remedies (``advice``: an
    :class:`~..remedies.advise.Advice` computed already, else computed when
    ``remedies``).  A failing part leaves a note in its place; a cancelled
    ``progress`` raises :class:`~..core.errors.LoadCancelled`."""
    from ..core.errors import LoadCancelled
    from .summary import summarize

    progress = progress or Progress()
    d = sec.device
    traced = timeline is not None and d is not None and d in timeline.devices
    sec.has_trace = traced

    def check() -> None:
        if progress.cancel_event.is_set():
            raise LoadCancelled()

    progress.update("summary", 0.0)
    try:
        summary = summarize(snap, timeline, device=d)
    except (ValueError, IndexError, KeyError) as exc:  # (an inconsistent trace)
        sec.advice_note = f"top allocation sites unavailable: {exc}"
    else:
        # The summary's own sites: at this device's last OOM, else at its peak.
        at_oom = [e for e in summary.get("top_sites_at_oom") or [] if e["device"] == d]
        peak = summary.get("top_sites_at_peak")
        if at_oom and at_oom[-1]["sites"]:
            sec.top_sites = at_oom[-1]["sites"]
            sec.sites_caption = f"at the OOM, event {at_oom[-1]['event']:,}"
        elif peak and peak["device"] == d:
            sec.top_sites = peak["sites"]
            sec.sites_caption = f"at the peak allocated, event {peak['event']:,}"
    check()
    if sec.categories is None and traced:
        progress.update("categories", 0.0)
        try:
            from ..categories import MemoryBreakdown

            bd = (
                breakdown
                if breakdown is not None
                else MemoryBreakdown.build(
                    snap,
                    timeline,
                    d,
                    progress=Progress(
                        lambda _s, f: progress.update("categories", f), progress.cancel_event
                    ),
                )
            )
            k = bd.n_events - 1
            sec.categories = bd.split_at(k)
            sec.categories_caption = f"device {d}, after event {k:,}, the end of its trace"
            sec.leaked_bytes = bd.leaked_bytes_at(k)
            sec.graph_held = bd.graph_held_at(k)
            sec.leaks = [lk.to_dict() for lk in bd.leaks]
        except LoadCancelled:
            raise
        except (ValueError, IndexError, KeyError) as exc:
            sec.categories_note = f"What the memory is could not be computed: {exc}"
    check()
    if advice is None and remedies and traced:
        from ..remedies.advise import advise
        from ..whatif import prepare

        try:
            advice = advise(prepare(snap, d), progress=progress)
        except LoadCancelled:
            raise
        except (ValueError, IndexError, KeyError) as exc:
            sec.advice_note = f"The remedies could not be computed: {exc}"
    if advice is not None:
        sec.advice = advice.to_dict()
    elif not sec.advice_note:
        sec.advice_note = (
            NO_HISTORY.format(what="this device" if d is not None else "the snapshot")
            if not traced
            else "Remedies not computed."
        )
    if d is not None:
        sec.recorded_peak_reserved_bytes = (
            advice.recorded_peak_reserved_bytes
            if advice is not None
            else peak_reserved_by_device(snap).get(d)
        )
    check()
