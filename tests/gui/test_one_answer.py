"""The same memory gets the same split in the header, ``summary`` and the Diagnosis
panel: at the same event, the same categories and bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
FILES = ["resnet50_train.pickle", "gpt2_oom.pickle", "truth/gpt2_leak.pickle.xz"]


@pytest.mark.parametrize("name", FILES)
def test_header_summary_and_diagnosis_split_alike(make_window, qtbot, load, name):
    from vramscope.viewer._qt.diagnosis.panel import open_panel
    from vramscope.viewer.model.categories import format_split
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.replay.timeline import build_timeline
    from vramscope.viewer.model.reports.summary import summarize

    path = DATA / name
    w = make_window()
    assert load(w, path) == "loaded"
    panel = open_panel(w)
    qtbot.waitUntil(lambda: panel.advice is not None and panel.thread is None, timeout=180000)
    split = panel.advice.split_at_peak
    event = split["event"]
    assert event is not None and event >= 0
    # The header at the Diagnosis' instant says the same split ...
    w.set_cursor(event)
    qtbot.waitUntil(
        lambda: w.categories_wiring.header_split.split == split["categories"], timeout=30000
    )
    assert format_split(split["categories"]) in panel.split_label.text()
    # ... and summary's "at the peak" is that instant where the recording did not fail.
    snap = load_snapshot(path)
    summ = summarize(snap, build_timeline(snap))
    if panel.advice.moment == "at the peak":
        assert summ["peak_requested_event"] == event
        assert summ["categories_at_peak"] == split["categories"]
    panel.close()
