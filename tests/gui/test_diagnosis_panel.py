"""The Diagnosis panel with a real event loop (offscreen): ranked remedies, overlay, cancel."""

from __future__ import annotations

import pytest

from tests.gui.conftest import DATA

GPT2_OOM = DATA / "gpt2_oom.pickle"  # a real OOM (fragmentation) under a 10.49 GiB limit
RESNET = DATA / "resnet50_train.pickle"


@pytest.fixture
def make_panel(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.diagnosis_panel import DiagnosisPanel
    from vramscope.viewer.model import load_snapshot

    application()

    def make(path):
        p = DiagnosisPanel(load_snapshot(path))
        qtbot.addWidget(p)
        p.resize(1200, 760)
        p.show()
        qtbot.waitExposed(p)
        return p

    return make


def test_oom_shows_verdict_split_and_remedies_in_order(make_panel, qtbot, tmp_path):
    from vramscope.viewer.model.remedies.advise import advise
    from vramscope.viewer.model.units import format_bytes
    from vramscope.viewer.model.whatif import prepare

    panel = make_panel(GPT2_OOM)
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    assert "Out of memory" in panel.verdict.text() and "fragmentation" in panel.verdict.text()
    assert panel.split_label.text().startswith("At the OOM: scales with the batch")
    assert "Largest batch scale that fits" in panel.fit_label.text()
    want = advise(prepare(panel.snap))
    assert panel.table.rowCount() == len(want.remedies) >= 4
    for r, rem in enumerate(want.remedies):
        assert panel.table.item(r, 1).text() == rem.title
        assert panel.table.item(r, 2).text() == format_bytes(rem.predicted_peak_reserved_bytes)
    # Selecting a simulated remedy overlays its curve and names the memory it acts on.
    sim = next(r for r, rem in enumerate(want.remedies) if rem.remedy == "smaller_batch")
    with qtbot.waitSignal(panel.remedySelected, timeout=5000) as blocker:
        panel.table.selectRow(sim)
    rem, events = blocker.args
    assert rem.remedy == "smaller_batch" and len(events) > 1000
    curves = [c for c in panel.plot.listDataItems() if c.xData is not None and len(c.xData) > 1]
    assert len(curves) == 2
    panel.copy_table()
    from PySide6.QtGui import QGuiApplication
    lines = QGuiApplication.clipboard().text().splitlines()
    assert lines[0].startswith("#\tremedy\tpredicted peak") and len(lines) == len(want.remedies) + 1
    out = tmp_path / "diagnosis.png"
    assert panel.grab().save(str(out), "PNG") and out.stat().st_size > 5000


def test_batch_and_limit_give_the_largest_batch(make_panel, qtbot):
    panel = make_panel(RESNET)
    panel.batch_spin.setValue(32)
    panel.limit_edit.setText("3GiB")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    assert "Largest batch that fits 3.00 GiB:" in panel.fit_label.text()
    assert panel.advice.largest_batch_that_fits > 32


def test_bad_limit_and_cancel(make_panel, qtbot):
    panel = make_panel(RESNET)
    panel.limit_edit.setText("lots")
    panel.run()
    assert "not a size" in panel.error.text() and panel.thread is None
    panel.limit_edit.setText("")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
        panel.cancel()
    assert panel.run_button.isEnabled()
    assert panel.verdict.text() in ("Cancelled.",) or panel.advice is not None


def test_main_window_menu_opens_it_and_highlights_what_a_remedy_acts_on(make_window, qtbot):
    w = make_window()
    assert not w.diagnosis_action.isEnabled()
    w.open_file(str(GPT2_OOM))
    qtbot.waitUntil(lambda: w.doc is not None, timeout=60000)
    assert w.diagnosis_action.isEnabled()
    assert w.diagnosis_action.shortcut().toString() == "Ctrl+Shift+D"
    from vramscope.viewer._qt.diagnosis_panel import DiagnosisPanel
    w.diagnosis_action.trigger()
    panels = [x for x in w._aux_windows if isinstance(x, DiagnosisPanel)]
    assert len(panels) == 1 and panels[0].isVisible()
    panel = panels[0]
    qtbot.waitUntil(lambda: panel.advice is not None and panel.thread is None, timeout=120000)
    row = next(r for r, rem in enumerate(panel.advice.remedies) if rem.remedy == "smaller_batch")
    panel.table.selectRow(row)
    mask = w.timeline.stack_mask
    assert mask is not None and 0 < mask.sum() < len(mask)
    panel.close()
    assert w.timeline.stack_mask is None  # the window's own highlight (none) is back


def test_button_beside_the_oom_banner(make_window, qtbot, load):
    from vramscope.viewer._qt.diagnosis_panel import DiagnosisPanel

    w = make_window()
    assert w.fix_button is not None and not w.fix_button.isVisible()
    load(w, RESNET)  # no OOM: no banner, no button
    assert not w.header.banner.isVisible() and not w.fix_button.isVisible()
    load(w, GPT2_OOM)
    qtbot.waitUntil(lambda: w.header.banner.isVisible(), timeout=30000)
    assert w.fix_button.isVisible()
    from PySide6.QtCore import Qt

    qtbot.mouseClick(w.fix_button, Qt.MouseButton.LeftButton)
    panels = [x for x in w._aux_windows if isinstance(x, DiagnosisPanel)]
    assert len(panels) == 1
    qtbot.waitUntil(lambda: panels[0].thread is None, timeout=120000)
    panels[0].close()
