"""The HTML report, ``advise --json`` and the Diagnosis panel say the same thing, on every
snapshot in ``../shared`` (snapshots/ and external/): the device, the recorded peak (the
recording's own, the replay's and, where a sidecar has it, memory_stats'), each
remedy's predicted peak and its fits word.

One advise per file: the advice is computed once and each view renders it as it does
for the user - the report's device section (:func:`complete_section`, the page of
:func:`build_html`), the JSON ``vramscope advise --json`` prints (``Advice.to_dict``
through ``json``) and a real Diagnosis panel showing it.  What each view decides on its
own (the words, which peak it calls recorded, "maybe") is what this holds together.
Each page is laid out in a real headless Chromium 1400 px wide: never wider.
"""

from __future__ import annotations

import html.parser
import json

import pytest

from tests import browser, shared_data
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.analysis import focus
from vramscope.viewer.model.core.units import format_bytes
from vramscope.viewer.model.remedies.advise import advise, peak_words
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports.html_report import (
    DeviceSection,
    ReportParts,
    build_html,
    complete_section,
    report_devices,
)
from vramscope.viewer.model.reports.summary import peaks
from vramscope.viewer.model.whatif import prepare


class Sections(html.parser.HTMLParser):
    """Per device section of a report page: its peaks line and its remedies' cells."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []  # section ids, in page order
        self.peaks: dict[str, str] = {}
        self.rows: dict[str, list[dict[str, str]]] = {}
        self._sec = ""
        self._cls: list[str] = []
        self._cell = ""
        self._row: dict[str, str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class") or ""
        if tag == "section":
            self._sec = a.get("id") or ""
            self.order.append(self._sec)
            self.rows[self._sec] = []
        if tag in ("p", "td", "section", "table", "tr"):
            self._cls.append(f"{tag}.{cls}")
        if tag == "tr" and "table.remedies" in self._cls:
            self._row = {"cells": ""}
        if tag == "td":
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "td" and self._row is not None:
            cells = self._row.setdefault("list", [])
            assert isinstance(cells, list)
            cells.append(self._cell.strip())
        if tag == "tr" and self._row is not None:
            if self._row.get("list"):
                self.rows[self._sec].append(self._row)
            self._row = None
        if tag in ("p", "td", "section", "table", "tr") and self._cls:
            self._cls.pop()

    def handle_data(self, data):
        top = self._cls[-1] if self._cls else ""
        if top == "p.muted peaks":
            self.peaks[self._sec] = self.peaks.get(self._sec, "") + data
        self._cell += data


def _fits_in_chromium(page: str, folder) -> None:
    m = browser.measure(page, folder / "chromium", WIDTH)
    assert m["scrollWidth"] <= WIDTH and m["widest"] <= WIDTH, m


def _panel_cells(panel) -> list[tuple[str, str]]:
    from vramscope.viewer._qt.diagnosis.panel import COL_PEAK, COLUMNS

    fits = COLUMNS.index("fits")
    t = panel.table
    return [(t.item(r, COL_PEAK).text(), t.item(r, fits).text()) for r in range(t.rowCount())]


WIDTH = 1400  # the page never lays out wider (Chromium)


@pytest.mark.parametrize("path", shared_data.params())
def test_report_json_and_panel_agree(path, qtbot, tmp_path):
    path = shared_data.require(path)
    snap = load_snapshot(str(path))
    timeline = build_timeline(snap) if len(snap.trace) else None
    order = report_devices(snap)
    assert order and order[0] == focus.default_device(snap)
    traced = focus.default_trace_device(snap)
    sections = [DeviceSection(device=d) for d in order]
    if traced is None:
        # No allocation history: no remedies anywhere, and the page says why per device.
        for sec in sections:
            complete_section(sec, snap, timeline, remedies=True)
            assert sec.advice is None and "no allocation history" in sec.advice_note
        page = build_html(ReportParts(title=path.name, devices=sections, all_devices=sorted(order)))
        got = Sections()
        got.feed(page)
        assert got.order == [f"device-{d}" for d in order]
        assert not any(got.rows.values())
        _fits_in_chromium(page, tmp_path)
        return

    case = prepare(snap)  # the device `vramscope advise` and the panel answer for
    advice = advise(case)  # the one advise of this file
    d = advice.device
    assert d == case.device == traced
    # -- the recorded peak is the recording's ---------------------------------------------
    assert advice.recorded_peak_reserved_bytes == peaks(timeline, d)["peak_reserved_bytes"]
    stats = (snap.sidecar or {}).get("memory_stats") or {}
    if "reserved_bytes.all.peak" in stats and len(focus.devices_of(snap)) == 1:
        assert advice.recorded_peak_reserved_bytes == stats["reserved_bytes.all.peak"]
    if advice.verdict.startswith("out of memory"):
        assert advice.needed_peak_reserved_bytes >= advice.recorded_peak_reserved_bytes
    # -- the three views ------------------------------------------------------------------
    cli = json.loads(json.dumps(advice.to_dict()))  # what `advise --json` prints of it
    sec = next(s for s in sections if s.device == d)
    complete_section(sec, snap, timeline, advice=advice)
    page = build_html(ReportParts(title=path.name, devices=sections, all_devices=sorted(order)))
    report = Sections()
    report.feed(page)
    _fits_in_chromium(page, tmp_path)

    from vramscope.viewer._qt.diagnosis.panel import DiagnosisPanel

    panel = DiagnosisPanel(snap, device=d)
    qtbot.addWidget(panel)
    panel.show_result(case, advice)

    assert cli["device"] == d == panel.advice.device
    # The OOM's device (else the highest peak's) leads the page; every device has a section.
    assert report.order == [f"device-{x}" for x in order]
    if order[0] in (timeline.devices if timeline is not None else {}):
        assert report.order[0] == f"device-{d}"
    sid = f"device-{d}"
    words = peak_words(cli["recorded_peak_reserved_bytes"], cli["needed_peak_reserved_bytes"])
    assert report.peaks[sid].startswith(words[:1].upper() + words[1:])
    assert panel.peak_label.text() == words[:1].upper() + words[1:]
    assert f"recorded peak reserved {format_bytes(advice.recorded_peak_reserved_bytes)}" in words
    # Each remedy, in the same order: predicted peak and fits, word for word.
    rows = report.rows[sid]
    shown = _panel_cells(panel)
    assert len(rows) == len(cli["remedies"]) == len(shown)
    for row, r, (panel_peak, panel_fits) in zip(rows, cli["remedies"], shown):
        cells = row["list"]
        head = format_bytes(r["predicted_peak_reserved_bytes"])
        assert cells[1] == panel_peak and panel_peak.startswith(head), r["remedy"]
        assert cells[4] == r["fits_word"] == panel_fits, r["remedy"]
