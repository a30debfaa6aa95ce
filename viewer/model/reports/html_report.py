"""One self-contained HTML file about one snapshot, to attach to a bug report.

:func:`build_html` turns plain data - the figures as the window shows them, the OOM
verdict, what the memory is, the leaks, the remedies, the top allocation sites - and PNG
bytes of the views into one HTML page with no external resource: the images are
``data:`` URIs, the style is inline.  Every text is escaped (``html.escape``): file
names and stack frames come from the recording.  The GUI's File > Export report grabs
the images and gathers the data; this module never sees Qt.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..categories import CATEGORY_COLORS, CATEGORY_LABELS, CATEGORY_NAMES
from ..core.units import format_bytes



# ----------------------------------------------------------------------------- the page
@dataclass
class ReportParts:
    """What one report says (plain data; every field optional but the title)."""

    title: str  # the file's name
    path: str = ""
    generated: str = ""  # "vramscope X.Y, 2026-11-28 05:40"
    figures: list[tuple[str, str]] = field(default_factory=list)  # (title, value) as shown
    scope: str = ""  # what the figures count ("device 0 · after event 11,112")
    facts: str = ""  # torch version, GPU, how it was captured
    verdict: str | None = None  # the OOM banner's text; None: no OOM
    categories: dict[str, int] | None = None  # category name -> bytes
    categories_caption: str = ""  # the moment of that split
    leaked_bytes: int = 0  # of the split, bytes kept by leaking lines
    leaks: list[dict[str, Any]] = field(default_factory=list)  # Leak.to_dict()
    advice: dict[str, Any] | None = None  # Advice.to_dict()
    advice_note: str = ""  # why there is no advice, when there is none
    top_sites: list[dict[str, Any]] | None = None  # the summary's top_sites, if it has them
    images: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, PNG bytes)
    notes: list[str] = field(default_factory=list)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #1a1a1a; background: #fff; }
h1 { font-size: 20px; margin-bottom: 2px; }
h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ccc; }
.muted { color: #555; }
.verdict { background: #c62828; color: #fff; font-weight: bold; padding: 8px 12px;
           border-radius: 4px; }
table { border-collapse: collapse; }
td, th { padding: 3px 10px; text-align: left; vertical-align: top; }
th { border-bottom: 1px solid #ccc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.figures td { padding: 2px 14px 2px 0; }
table.figures .title { font-size: 11px; color: #555; }
table.figures .value { font-size: 17px; font-weight: 600; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
img { max-width: 100%; border: 1px solid #ddd; }
figure { margin: 12px 0; }
code { background: #f3f3f3; padding: 0 3px; }
"""

# The same colours as the GUI's category views (widgets/category_colors.py).
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def data_uri(png: bytes) -> str:
    """``png`` as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _figures(parts: ReportParts) -> list[str]:
    if not parts.figures:
        return []
    cells = "".join(f'<td class="figure"><div class="title">{_e(t)}</div>'
                    f'<div class="value">{_e(v)}</div></td>' for t, v in parts.figures)
    out = ['<h2>Figures</h2>', f'<table class="figures"><tr>{cells}</tr></table>']
    if parts.scope:
        out.append(f'<p class="muted scope">{_e(parts.scope)}</p>')
    return out


def _categories(parts: ReportParts) -> list[str]:
    split = parts.categories
    if not split:
        return []
    total = sum(split.values())
    caption = f" ({_e(parts.categories_caption)})" if parts.categories_caption else ""
    out = [f"<h2>What the memory is{caption}</h2>",
           '<table class="categories"><tr><th>Category</th><th>Bytes</th><th>Share</th></tr>']
    for name in CATEGORY_NAMES:
        b = int(split.get(name, 0))
        if b <= 0:
            continue
        label = CATEGORY_LABELS[CATEGORY_NAMES.index(name)]
        swatch = CATEGORY_COLORS.get(name, "#999")
        out.append(f'<tr><td><span class="swatch" style="background:{swatch}">'
                   f'</span>{_e(label)}</td><td class="num">{_e(format_bytes(b))}</td>'
                   f'<td class="num">{b / total:.0%}</td></tr>')
    out.append(f'<tr><th>total</th><th class="num">{_e(format_bytes(total))}</th><th></th></tr>'
               "</table>")
    if parts.leaked_bytes:
        out.append(f"<p>Of it, {_e(format_bytes(parts.leaked_bytes))} is kept by leaking "
                   "lines (below).</p>")
    return out


def _leaks(parts: ReportParts) -> list[str]:
    if not parts.leaks:
        return []
    out = ["<h2>Leaks</h2>", "<p>Lines whose allocations survive iteration after "
           "iteration:</p>",
           '<table class="leaks"><tr><th>Line</th><th>Function</th><th>Per iteration</th>'
           "<th>Iterations</th><th>Live</th></tr>"]
    for lk in parts.leaks:
        out.append(f"<tr><td><code>{_e(lk.get('frame', ''))}</code></td>"
                   f"<td>{_e(lk.get('function', ''))}</td>"
                   f"<td class=\"num\">{_e(format_bytes(int(lk.get('bytes_per_iteration', 0))))}"
                   f"</td><td class=\"num\">{_e(lk.get('iterations', ''))}</td>"
                   f"<td class=\"num\">{_e(format_bytes(int(lk.get('live_bytes', 0))))}</td></tr>")
    out.append("</table>")
    return out


def _remedies(parts: ReportParts) -> list[str]:
    a = parts.advice
    if not a:
        return ["<h2>What would make it fit</h2>",
                f"<p class=\"muted\">{_e(parts.advice_note or 'Not computed.')}</p>"]
    out = ["<h2>What would make it fit</h2>"]
    if a.get("verdict"):
        out.append(f"<p>{_e(a['verdict'])}</p>")
    limit = a.get("memory_limit_bytes")
    out.append(f"<p class=\"muted\">Recorded peak reserved "
               f"{_e(format_bytes(int(a.get('recorded_peak_reserved_bytes') or 0)))}"
               + (f", limit {_e(format_bytes(int(limit)))} "
                  f"({_e(a.get('memory_limit_source', ''))})" if limit else "") + ".</p>")
    rems = a.get("remedies") or []
    if not rems:
        out.append("<p>No remedy found.</p>")
        return out
    out.append('<table class="remedies"><tr><th>Change</th><th>Predicted peak</th>'
               "<th>Saving</th><th>How</th><th>Fits</th><th>Where</th></tr>")
    for r in rems:
        fits = {True: "yes", False: "no"}.get(r.get("fits"), "?")
        rng = r.get("predicted_peak_reserved_range")
        peak = format_bytes(int(r.get("predicted_peak_reserved_bytes") or 0))
        if rng:
            peak += f" ({format_bytes(int(rng[0]))} – {format_bytes(int(rng[1]))})"
        out.append(f"<tr><td><b>{_e(r.get('title', ''))}</b><br>{_e(r.get('change', ''))}</td>"
                   f"<td class=\"num\">{_e(peak)}</td>"
                   f"<td class=\"num\">{_e(format_bytes(int(r.get('saving_bytes') or 0)))}</td>"
                   f"<td>{_e(r.get('method', ''))}</td><td>{fits}</td>"
                   f"<td><code>{_e(r.get('where') or '')}</code></td></tr>")
    out.append("</table>")
    return out


def _cell(key: str, value: Any) -> str:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) \
            and "bytes" in key:
        return f'<td class="num">{_e(format_bytes(int(value)))}</td>'
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return f'<td class="num">{_e(f"{value:,}")}</td>'
    if isinstance(value, (list, tuple)):
        value = " \u2190 ".join(str(v) for v in value)
    return f"<td>{_e('' if value is None else value)}</td>"


def _top_sites(parts: ReportParts) -> list[str]:
    sites = [s for s in (parts.top_sites or []) if isinstance(s, dict)]
    if not sites:
        return []
    # Whatever fields the summary gives (they are its to choose): the first site's keys.
    keys = [k for k in sites[0] if not isinstance(sites[0][k], dict)][:6]
    head = "".join(f"<th>{_e(k.replace('_', ' '))}</th>" for k in keys)
    rows = "".join("<tr>" + "".join(_cell(k, s.get(k)) for k in keys) + "</tr>"
                   for s in sites)
    return ["<h2>Top allocation sites</h2>",
            f'<table class="sites"><tr>{head}</tr>{rows}</table>']


def _images(parts: ReportParts) -> list[str]:
    out = []
    for caption, png in parts.images:
        out.append(f'<figure><img alt="{_e(caption)}" src="{data_uri(png)}">'
                   f"<figcaption class=\"muted\">{_e(caption)}</figcaption></figure>")
    return (["<h2>Views</h2>"] + out) if out else []


def build_html(parts: ReportParts) -> str:
    """The report page (a ``str`` of UTF-8 HTML, self-contained)."""
    body: list[str] = [f"<h1>{_e(parts.title)}</h1>"]
    sub = " · ".join(_e(x) for x in (parts.path, parts.facts) if x)
    if sub:
        body.append(f'<p class="muted">{sub}</p>')
    if parts.verdict:
        body.append(f'<p class="verdict">{_e(parts.verdict)}</p>')
    else:
        body.append('<p class="no-oom">No CUDA out-of-memory error in this snapshot.</p>')
    for section in (_figures, _categories, _leaks, _remedies, _top_sites, _images):
        body += section(parts)
    if parts.notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in parts.notes)
                    + "</ul>")
    if parts.generated:
        body.append(f'<p class="muted">Made by {_e(parts.generated)}.</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(parts.title)} — vramscope report</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
