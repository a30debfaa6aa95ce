"""The Diagnosis panel with a real event loop (offscreen): ranked remedies, estimates and
their ranges, copy, the chart's legend, the overlay on the main window's timeline, cancel."""

from __future__ import annotations

import pytest

from tests import shared_data
from tests.gui.conftest import DATA

GPT2_OOM = DATA / "gpt2_oom.pickle"  # a real OOM (fragmentation) under a 10.49 GiB limit
RESNET = DATA / "resnet50_train.pickle"
# A real GPT-2 OOM under a 2 GiB limit at batch 13 (12 fits: the truth's probes).
GPT2_LIMIT_OOM = DATA / "truth" / "limit_sweep_gpt2_oom.pickle.xz"
# ResNet-18 at batch 64: cuDNN workspaces make a batch prediction an estimate.
MOBILENET_B64 = DATA / "truth" / "sweep_mobilenet_b64.pickle.xz"
RESNET_B64 = DATA / "truth" / "sweep_resnet_b64.pickle.xz"


@pytest.fixture
def make_panel(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.diagnosis.panel import DiagnosisPanel
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
    from vramscope.viewer.model.core.units import format_bytes
    from vramscope.viewer.model.remedies.advise import advise, format_peak
    from vramscope.viewer.model.whatif import prepare

    panel = make_panel(GPT2_OOM)
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    assert "Out of memory" in panel.verdict.text() and "fragmentation" in panel.verdict.text()
    # What the memory is, in the categories' words, then the same bytes by the batch.
    from vramscope.viewer.model.categories import format_split

    first, second = panel.split_label.text().split("\n")
    assert first == (
        f"At the OOM (event 25902): {format_split(panel.advice.split_at_peak['categories'])}"
    )
    assert second.startswith("of which: ") and "scales with the batch" in second
    # No recorded batch given: the answer is a share "of the recorded batch".
    assert "Largest batch that fits" in panel.fit_label.text()
    assert "of the recorded batch" in panel.fit_label.text()
    want = advise(prepare(panel.snap))
    assert panel.table.rowCount() == len(want.remedies) >= 4
    for r, rem in enumerate(want.remedies):
        assert panel.table.item(r, 1).text() == panel.remedy_title(rem)
        assert panel.table.item(r, 2).text() == format_peak(rem)
        if rem.method == "estimated":  # labelled an estimate, and why
            assert "(estimate" in panel.table.item(r, 2).text()
            assert (
                "An estimate: what the change does depends on" in panel.table.item(r, 2).toolTip()
            )
            assert "cuDNN" not in panel.table.item(r, 2).toolTip()
            if rem.remedy == "gradient_checkpointing":  # half to two thirds: a range
                lo, hi = rem.predicted_peak_reserved_range
                assert (
                    panel.table.item(r, 2)
                    .text()
                    .endswith(f"(estimate, {format_bytes(lo)} - {format_bytes(hi)})")
                )
        else:  # simulated: an estimate only where the one rule says so
            assert ("estimate" in panel.table.item(r, 2).text()) == rem.is_estimate
            # The library-workspace explanation only on a batch prediction resting on it.
            assert ("cuDNN" in panel.table.item(r, 2).toolTip()) == rem.batch_estimate
    # Selecting a simulated remedy overlays its curve and names the memory it acts on.
    sim = next(r for r, rem in enumerate(want.remedies) if rem.remedy == "smaller_batch")
    with qtbot.waitSignal(panel.remedySelected, timeout=5000) as blocker:
        panel.table.selectRow(sim)
    rem, events = blocker.args
    assert rem.remedy == "smaller_batch" and len(events) > 1000
    curves = [c for c in panel.plot.listDataItems() if c.xData is not None and len(c.xData) > 1]
    assert len(curves) == 2
    # The legend names them (and the limit) below the chart, clear of the curves.
    qtbot.wait(50)
    labels = [label.text for _, label in panel.legend.items]
    from vramscope.viewer._qt.diagnosis.chart import _short  # (long titles are cut)

    # An estimate's range is a band, named before the curve.
    rng = want.remedies[sim].predicted_peak_reserved_range
    band = [f"estimate {format_bytes(rng[0])} - {format_bytes(rng[1])}"] if rng else []
    named = ["recorded", *band, "predicted: " + _short(panel.remedy_title(want.remedies[sim]))]
    assert labels[: len(named)] == named
    assert labels[-1].startswith("memory limit ")
    legend = panel.legend.sceneBoundingRect()
    view = panel.plot.getPlotItem().vb.sceneBoundingRect()
    assert legend.height() > 0 and legend.top() >= view.bottom() - 1
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication

    panel.copy_table()
    lines = QGuiApplication.clipboard().text().splitlines()
    assert lines[0].startswith("#\tremedy\tpredicted peak") and len(lines) == len(want.remedies) + 1
    # Ctrl+C in the table (and its context menu's Copy): the selected remedy, change and
    # code location whole.
    QGuiApplication.clipboard().setText("")
    panel.table.setFocus()
    qtbot.keyClick(panel.table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    lines = QGuiApplication.clipboard().text().splitlines()
    assert len(lines) == 2 and lines[0] == "\t".join(
        ("#", "remedy", "predicted peak", "saving", "fits", "method", "change", "where")
    )
    cells = lines[1].split("\t")
    rem = want.remedies[sim]
    assert cells[1:4] == [
        panel.remedy_title(rem),
        format_peak(rem),
        panel.table.item(sim, 3).text(),
    ]
    assert cells[5:] == [rem.method, panel.remedy_change(rem), rem.where or ""]
    assert [a.text() for a in panel.table.actions()] == ["&Copy", "Copy &table"]
    out = tmp_path / "diagnosis.png"
    assert panel.grab().save(str(out), "PNG") and out.stat().st_size > 5000


def test_an_estimated_batch_prediction_shows_its_range_and_why(make_panel, qtbot):
    """ResNet-18's cuDNN workspaces: the smaller-batch remedy's peak is an estimate with a
    range, shown in the table as the model gives it, the tooltip says why, and the chart
    shades the range."""
    import pyqtgraph as pg

    from vramscope.viewer.model.core.units import format_bytes as fb

    panel = make_panel(RESNET_B64)
    panel.batch_spin.setValue(64)
    panel.limit_edit.setText("1.4GiB")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    a = panel.advice
    row = next(r for r, rem in enumerate(a.remedies) if rem.remedy == "smaller_batch")
    rem = a.remedies[row]
    lo, hi = rem.predicted_peak_reserved_range
    assert lo < hi
    cell = panel.table.item(row, 2)
    assert cell.text() == (
        f"{fb(rem.predicted_peak_reserved_bytes)} (estimate, {fb(lo)} - {fb(hi)})"
    )
    assert "cuDNN" in cell.toolTip() and "cannot be known from one recording" in cell.toolTip()
    assert (
        f"an estimate: 168 library workspaces, peak {fb(lo)} - {fb(hi)}" in panel.fit_label.text()
        and "cuDNN" in panel.fit_label.toolTip()
    )
    panel.table.selectRow(row)
    bands = [i for i in panel.plot.getPlotItem().items if isinstance(i, pg.LinearRegionItem)]
    assert len(bands) == 1 and bands[0].getRegion() == pytest.approx((lo / 2**30, hi / 2**30))
    assert f"estimate {fb(lo)} - {fb(hi)}" in [label.text for _, label in panel.legend.items]


@pytest.mark.skipif(not MOBILENET_B64.exists(), reason="truth sweep not recorded")
def test_a_limit_far_above_the_curves_is_left_off_the_chart(make_panel, qtbot):
    """A run that fits easily (MobileNetV3 at batch 64: 3.4 GiB of an 80 GiB GPU): the
    chart keeps to the curves, and its legend says the limit is above it; a limit near
    them stays on it."""
    from vramscope.viewer.model.core.units import format_bytes as fb

    panel = make_panel(MOBILENET_B64)
    panel.batch_spin.setValue(64)
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    lim = panel.advice.memory_limit_bytes
    row = next(r for r, rem in enumerate(panel.advice.remedies) if rem.remedy == "smaller_batch")
    panel.table.selectRow(row)
    labels = [label.text for _, label in panel.legend.items]
    assert f"memory limit {fb(lim)} (above the chart)" in labels
    top = panel.plot.getPlotItem().vb.viewRange()[1][1] * 2**30
    assert top < lim / 3 and top >= panel.advice.recorded_peak_reserved_bytes
    panel.limit_edit.setText("4GiB")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    panel.table.selectRow(0)
    labels = [label.text for _, label in panel.legend.items]
    assert "memory limit 4.00 GiB" in labels
    assert panel.plot.getPlotItem().vb.viewRange()[1][1] >= 4.0


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
    qtbot.waitUntil(lambda: w.vs.doc is not None, timeout=60000)
    assert w.diagnosis_action.isEnabled()
    assert w.diagnosis_action.shortcut().toString() == "Ctrl+Shift+D"
    from vramscope.viewer._qt.diagnosis.panel import DiagnosisPanel

    w.diagnosis_action.trigger()
    panels = [x for x in w.aux_windows if isinstance(x, DiagnosisPanel)]
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
    from vramscope.viewer._qt.diagnosis.panel import DiagnosisPanel

    w = make_window()
    assert w.fix_button is not None and not w.fix_button.isVisible()
    load(w, RESNET)  # no OOM: no banner, no button
    assert not w.header.banner.isVisible() and not w.fix_button.isVisible()
    load(w, GPT2_OOM)
    qtbot.waitUntil(lambda: w.header.banner.isVisible(), timeout=30000)
    assert w.fix_button.isVisible()
    from PySide6.QtCore import Qt

    qtbot.mouseClick(w.fix_button, Qt.MouseButton.LeftButton)
    panels = [x for x in w.aux_windows if isinstance(x, DiagnosisPanel)]
    assert len(panels) == 1
    qtbot.waitUntil(lambda: panels[0].thread is None, timeout=120000)
    panels[0].close()


def test_selecting_a_remedy_overlays_its_curve_on_the_main_timeline(make_window, qtbot, load):
    """The real GPT-2 OOM under 2 GiB: the selected remedy's predicted reserved curve is
    drawn on the main window's timeline, at the events it was predicted for, named after
    the remedy; an estimated one is a level; it goes when the selection is cleared, the
    panel closes or the window opens another document."""
    import numpy as np

    from vramscope.viewer._qt.diagnosis.panel import OVERLAY_KEY, open_panel
    from vramscope.viewer.model.core.units import format_bytes as fb

    w = make_window()
    assert load(w, GPT2_LIMIT_OOM) == "loaded"
    tl = w.timeline
    panel = open_panel(w)
    panel.batch_spin.setValue(13)  # (the run starts with the panel: the batch is for a re-run)
    qtbot.waitUntil(lambda: panel.thread is None, timeout=120000)
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    assert panel.advice.largest_batch_that_fits == 12  # the truth: 12 fits, 13 does not
    # Labelled as the one rule labels it, with advise's range where it is an estimate (a
    # range that holds the real run at 12: tests/cli/test_advise_cli.py).
    assert ("estimate" in panel.fit_label.text()) is panel.advice.largest_batch_is_estimate
    rems = panel.advice.remedies
    sim = next(r for r, rem in enumerate(rems) if rem.remedy == "smaller_batch")
    panel.table.clearSelection()
    assert OVERLAY_KEY not in tl.overlays
    panel.table.selectRow(sim)
    rem = rems[sim]
    ov = tl.overlays[OVERLAY_KEY]
    # The prediction's x are the timeline's events: the recorded run replayed by the model
    # equals the timeline's reserved curve at every request event.
    cx = panel.case.curve_x()
    rec = panel.case.recorded_run().reserved
    assert np.array_equal(np.asarray(tl.curves["reserved"][cx]), rec)
    last = np.r_[cx[1:] != cx[:-1], True]  # the value after the last request of an event
    assert np.array_equal(ov.y[rem.curve_x[last]], rem.curve[last])
    # ... and its peak is the real run's at batch 12 (the truth's probe, memory_stats).
    import json

    spec = json.loads(
        json.loads(GPT2_LIMIT_OOM.with_name("limit_sweep_gpt2_oom.json").read_text())["argv"][4]
    )
    probe = next(p for p in spec["search"]["probes"] if p["batch_size"] == 12)
    assert ov.peak == int(rem.curve.max()) == probe["peak_reserved"]
    x, y = ov.curve.getData()
    assert len(x) > 10 and float(y.max()) == float(rem.curve.max())
    title = panel.remedy_title(rem)  # in samples: "batch 12 of the recorded 13"
    assert "batch 12 of the recorded 13" in title
    assert tl.overlay_labels() == [f"predicted: {title} · peak {fb(ov.peak)}"]
    assert "predicted" in tl.legend.text()
    axis = tl.plot.getPlotItem().getAxis("bottom").labelText
    assert f"predicted: {title}, peak {fb(ov.peak)}" in axis
    assert tl.stack_mask is not None and tl.stack_mask.any()  # the highlight is kept
    # In time mode it follows the x axis.
    tl.set_mode("time")
    x_time, _ = ov.curve.getData()
    assert float(x_time.max()) <= float(tl.tx[-1]) + 1e-9
    tl.set_mode("events")
    # An estimated remedy: its predicted peak as a level, no curve.
    est = next(r for r, rem in enumerate(rems) if rem.method == "estimated")
    panel.table.selectRow(est)
    ov = tl.overlays[OVERLAY_KEY]
    assert ov.curve is None and ov.level == rems[est].predicted_peak_reserved_bytes
    assert tl.overlay_labels()[0].startswith(f"predicted: {panel.remedy_title(rems[est])}")
    assert "estimated peak" in tl.plot.getPlotItem().getAxis("bottom").labelText
    # Cleared selection: overlay and highlight go.
    panel.table.clearSelection()
    assert OVERLAY_KEY not in tl.overlays and tl.stack_mask is None
    assert "predicted" not in tl.legend.text()
    assert "predicted" not in tl.plot.getPlotItem().getAxis("bottom").labelText
    # Closing the panel takes them away.
    panel.table.selectRow(sim)
    assert OVERLAY_KEY in tl.overlays
    panel.close()
    assert OVERLAY_KEY not in tl.overlays and tl.stack_mask is None
    # Another document: the overlay of the old one goes.
    panel = open_panel(w)
    qtbot.waitUntil(lambda: panel.advice is not None and panel.thread is None, timeout=120000)
    panel.table.selectRow(0)
    assert OVERLAY_KEY in tl.overlays
    assert load(w, RESNET) == "loaded"
    assert OVERLAY_KEY not in tl.overlays
    panel.table.selectRow(1)  # a panel over the old document draws nothing on the new one
    assert OVERLAY_KEY not in tl.overlays
    panel.close()


@pytest.mark.slow
def test_the_readme_picture_renders_in_a_real_process(tmp_path):
    """``python -m vramscope.viewer._qt.diagnosis_shot`` (how assets/diagnosis.png is made):
    the main window with the remedy's curve over the panel, one PNG."""
    import os
    import subprocess
    import sys

    from PySide6.QtGui import QImage

    from vramscope.viewer._qt.diagnosis_shot import PANEL_SIZE, WINDOW_SIZE

    out = tmp_path / "d.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramscope.viewer._qt.diagnosis_shot",
            str(GPT2_LIMIT_OOM),
            str(out),
            "--batch",
            "13",
            "--remedy",
            "smaller_batch",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    image = QImage(str(out))
    assert image.width() == WINDOW_SIZE.width()
    assert image.height() == WINDOW_SIZE.height() + 8 + PANEL_SIZE.height()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramscope.viewer._qt.diagnosis_shot",
            str(GPT2_LIMIT_OOM),
            str(tmp_path / "e.png"),
            "--remedy",
            "nothing",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "no remedy 'nothing'" in bad.stderr


def test_an_estimate_range_is_a_band_on_the_main_timeline(make_window, qtbot, load):
    """ResNet-18 at batch 64 under 1.4 GiB: the smaller batch's prediction is an estimate;
    on the main timeline its curve comes with the range shaded and named in the axis."""
    import pyqtgraph as pg

    from vramscope.viewer._qt.diagnosis.panel import OVERLAY_KEY, open_panel
    from vramscope.viewer.model.core.units import format_bytes as fb

    w = make_window()
    assert load(w, RESNET_B64) == "loaded"
    panel = open_panel(w)
    qtbot.waitUntil(lambda: panel.thread is None, timeout=120000)
    panel.batch_spin.setValue(64)
    panel.limit_edit.setText("1.4GiB")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    row = next(r for r, rem in enumerate(panel.advice.remedies) if rem.remedy == "smaller_batch")
    rem = panel.advice.remedies[row]
    panel.table.selectRow(row)  # (the same row as the first run's: the new answer drawn)
    ov = w.timeline.overlays[OVERLAY_KEY]
    lo, hi = rem.predicted_peak_reserved_range
    assert ov.value_range == (lo, hi) and ov.curve is not None
    (band,) = [i for i in ov.items if isinstance(i, pg.LinearRegionItem)]
    assert band.getRegion() == (lo, hi) and band in w.timeline.plot.getPlotItem().items
    assert f"({fb(lo)} - {fb(hi)})" in w.timeline.plot.getPlotItem().getAxis("bottom").labelText
    _, ymax = w.timeline.vb.viewRange()[1]
    assert ymax >= hi  # the band in view
    # A dark palette: drawn again in its colour, the same prediction.
    from PySide6.QtGui import QColor, QPalette
    from PySide6.QtWidgets import QApplication

    from vramscope.viewer._qt.timeline.overlay import OVERLAY_COLOR, OVERLAY_COLOR_DARK

    app = QApplication.instance()
    old = app.palette()
    dark = QPalette(old)
    dark.setColor(QPalette.ColorRole.Window, QColor("#202124"))
    dark.setColor(QPalette.ColorRole.Base, QColor("#17181a"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e8eaed"))
    assert ov.color == OVERLAY_COLOR
    try:
        app.setPalette(dark)
        qtbot.waitUntil(
            lambda: w.timeline.overlays[OVERLAY_KEY].color == OVERLAY_COLOR_DARK, timeout=3000
        )
        dark_ov = w.timeline.overlays[OVERLAY_KEY]
        assert dark_ov.value_range == (lo, hi) and (dark_ov.y == ov.y).all()
    finally:
        app.setPalette(old)
    qtbot.waitUntil(lambda: w.timeline.overlays[OVERLAY_KEY].color == OVERLAY_COLOR, timeout=3000)
    band = next(
        i for i in w.timeline.overlays[OVERLAY_KEY].items if isinstance(i, pg.LinearRegionItem)
    )
    panel.close()
    assert band not in w.timeline.plot.getPlotItem().items


def test_per_event_steps_a_remedy_curve_over_the_trace():
    """A remedy that frees what an evaluation loop keeps (a real recording) has requests
    added: its curve, made one value per trace event, is the value after the last request
    at or before each event, the recorded curve before its first request."""
    import numpy as np

    from vramscope.viewer._qt.timeline.overlay import per_event
    from vramscope.viewer.model import load_snapshot
    from vramscope.viewer.model.remedies.advise import advise
    from vramscope.viewer.model.view.document import Document
    from vramscope.viewer.model.whatif import prepare

    snap = load_snapshot(DATA / "truth" / "eval_keeps_outputs.pickle.xz")
    case = prepare(snap)
    rem = next(r for r in advise(case).remedies if r.remedy == "free_kept")
    doc = Document.build(snap)
    reserved = doc.curves(case.device)["reserved"]
    n = len(doc.timeline.replay(case.device))
    y = per_event(rem.curve_x, rem.curve, n, reserved)
    assert len(y) == n and len(rem.curve_x) > len(case.requests)  # frees were added
    cx = rem.curve_x
    last = np.r_[cx[1:] != cx[:-1], True]
    assert np.array_equal(y[cx[last]], rem.curve[last])
    first = int(cx[0])
    assert np.array_equal(y[:first], np.asarray(reserved[:first]))
    between = np.setdiff1d(np.arange(first, n), cx)  # events with no request: held
    prev = np.searchsorted(cx, between, side="right") - 1
    assert np.array_equal(y[between], rem.curve[prev])


SUN = (
    shared_data.EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"
)  # 3 GPUs, the OOM on GPU 1


@shared_data.needs(SUN)
def test_diagnosis_from_the_window_diagnoses_the_device_it_shows(make_window, qtbot, load):
    """The three-GPU recording opens at its OOM on device 1, where the banner's button
    is: the Diagnosis panel diagnoses that OOM (it diagnosed device 0, which has none),
    and its remedies' curves go on that timeline."""
    from vramscope.viewer._qt.diagnosis.panel import OVERLAY_KEY, open_panel

    w = make_window()
    assert load(w, SUN) == "loaded"
    assert w.timeline.device == 1
    panel = open_panel(w)
    qtbot.waitUntil(lambda: panel.advice is not None and panel.thread is None, timeout=120000)
    assert panel.case.device == 1
    assert panel.advice.verdict.startswith("out of memory at event 421")
    assert OVERLAY_KEY in w.timeline.overlays  # the first remedy, selected
    panel.close()
