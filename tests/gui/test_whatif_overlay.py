"""The What-if panel's selected setting on the main window's timeline (real files, a
real event loop, offscreen): the predicted reserved curve is overlaid under the key
"whatif", its peak is the table row's, and it goes when the selection is cleared, the
panel closes or the window opens another document."""

from __future__ import annotations

import os

import numpy as np

from tests import shared_data
from tests.gui.conftest import DATA

WHATIF = DATA / "whatif_default.pickle"
GPT2_LIMIT_OOM = DATA / "truth" / "limit_sweep_gpt2_oom.pickle.xz"  # OOMs under 2 GiB
RESNET = DATA / "resnet50_train.pickle"


def _run(panel, qtbot, confs, limit=""):
    panel.set_checked(confs)
    panel.limit_edit.setText(limit)
    if panel.thread is not None:
        qtbot.waitUntil(lambda: panel.thread is None, timeout=120000)
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    assert panel.preds, panel.error.text()


def test_selected_setting_is_overlaid_on_the_main_timeline(make_window, qtbot, load):
    from vramscope.viewer._qt.whatif.panel import OVERLAY_KEY, open_panel
    from vramscope.viewer.model.core.units import format_bytes as fb

    w = make_window()
    assert load(w, WHATIF) == "loaded"
    tl = w.timeline
    panel = open_panel(w)
    _run(panel, qtbot, ["expandable_segments:True", "max_split_size_mb:64"])
    assert OVERLAY_KEY not in tl.overlays  # nothing selected yet
    row = next(r for r, p in enumerate(panel.preds) if p.conf == "expandable_segments:True")
    panel.table.selectRow(row)
    ov = tl.overlays[OVERLAY_KEY]
    pred = panel.preds[row]
    d = pred.to_dict(panel.case)
    # Its peak is the row's predicted peak, as the table shows it.
    assert ov.peak == d["peak_reserved_bytes"]
    assert panel.table.item(row, 1).text() == fb(ov.peak)
    # The curve: the prediction's value after the last request of each event.
    cx = panel.case.curve_x()
    last = np.r_[cx[1:] != cx[:-1], True]
    assert np.array_equal(ov.y[cx[last]], pred.result.reserved[last])
    assert not np.array_equal(ov.y, np.asarray(tl.curves["reserved"]))  # not the recorded
    label = "what-if: expandable_segments:True"
    assert tl.overlay_labels() == [f"predicted: {label} · peak {fb(ov.peak)}"]
    assert (
        f"predicted: {label}, peak {fb(ov.peak)}"
        in tl.plot.getPlotItem().getAxis("bottom").labelText
    )
    assert "predicted" in tl.legend.text()
    x, y = ov.curve.getData()
    assert len(x) > 10 and float(y.max()) == float(d["peak_reserved_bytes"])
    if os.environ.get("VRAMSCOPE_SHOTS"):
        w.grab().save(os.path.join(os.environ["VRAMSCOPE_SHOTS"], "whatif_overlay.png"))
    # Another row replaces it; the recorded row is named as such.
    panel.table.selectRow(0)
    assert tl.overlay_labels()[0].startswith("predicted: what-if: recorded settings")
    # Cleared selection: gone, and the legend and axis say so.
    panel.table.clearSelection()
    assert OVERLAY_KEY not in tl.overlays
    assert "predicted" not in tl.legend.text()
    assert "predicted" not in tl.plot.getPlotItem().getAxis("bottom").labelText
    # A new run drops the old run's selection and overlay.
    panel.table.selectRow(row)
    assert OVERLAY_KEY in tl.overlays
    _run(panel, qtbot, ["expandable_segments:True"])
    assert OVERLAY_KEY not in tl.overlays
    # Closing the panel takes it away.
    panel.table.selectRow(1)
    assert OVERLAY_KEY in tl.overlays
    panel.close()
    assert OVERLAY_KEY not in tl.overlays
    # Another document: the old document's prediction goes and is not drawn on the new.
    panel = open_panel(w)
    _run(panel, qtbot, ["expandable_segments:True"])
    panel.table.selectRow(1)
    assert OVERLAY_KEY in tl.overlays
    assert load(w, RESNET) == "loaded"
    assert OVERLAY_KEY not in tl.overlays
    panel.table.selectRow(0)
    assert OVERLAY_KEY not in tl.overlays
    panel.close()


def test_a_predicted_oom_ends_the_overlay_at_the_row_peak(make_window, qtbot, load):
    """Under its 2 GiB limit the recorded GPT-2 run OOMs: the overlay's peak is the row's
    (up to the first OOM, where the program stopped), not the curve past it."""
    from vramscope.viewer._qt.whatif.panel import OVERLAY_KEY, open_panel

    w = make_window()
    assert load(w, GPT2_LIMIT_OOM) == "loaded"
    panel = open_panel(w)
    _run(panel, qtbot, ["max_split_size_mb:64"], limit="2GiB")
    row = next(r for r, p in enumerate(panel.preds) if p.result.first_oom is not None)
    panel.table.selectRow(row)
    ov = w.timeline.overlays[OVERLAY_KEY]
    pred = panel.preds[row]
    assert ov.peak == pred.to_dict(panel.case)["peak_reserved_bytes"]
    x, _ = panel.predicted_curve(pred)
    assert len(x) == pred.result.first_oom.request + 1
    # Nothing is drawn after the OOM's event: the program would have stopped there.
    oom_event = int(x[-1])
    assert len(ov.y) == oom_event + 1 < w.timeline.n
    w.timeline.plot.getViewBox().setXRange(0, w.timeline.n - 1, padding=0)
    qtbot.wait(50)
    drawn_x, _ = ov.curve.getData()
    xs = w.timeline.xs()
    assert drawn_x is not None and len(drawn_x)
    assert float(np.max(drawn_x)) <= float(xs[oom_event])
    panel.close()


SUN = (
    shared_data.EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"
)  # 3 GPUs, the OOM on GPU 1


@shared_data.needs(SUN)
def test_the_device_the_window_shows_is_simulated_and_another_clears_it(make_window, qtbot, load):
    """A three-GPU recording opens at its OOM on device 1: the panel simulates device 1
    (not the first device), so its curve goes on that timeline; showing another device
    removes it, and selecting a row then says why nothing is drawn."""
    from vramscope.viewer._qt.whatif.panel import OVERLAY_KEY, open_panel
    from vramscope.viewer.model.analysis.figures import Selection

    w = make_window()
    assert load(w, SUN) == "loaded"
    tl = w.timeline
    assert tl.device == 1
    panel = open_panel(w)
    _run(panel, qtbot, ["expandable_segments:True"])
    assert panel.case.device == 1
    panel.table.selectRow(1)
    ov = tl.overlays[OVERLAY_KEY]
    assert ov.peak == panel.preds[1].to_dict(panel.case)["peak_reserved_bytes"]
    assert panel.link_note.isHidden()
    w.set_selection(Selection(device=0))
    assert tl.device == 0 and OVERLAY_KEY not in tl.overlays
    panel.table.clearSelection()
    panel.table.selectRow(1)
    assert OVERLAY_KEY not in tl.overlays
    assert not panel.link_note.isHidden() and "device 0" in panel.link_note.text()
    w.set_selection(Selection(device=1))
    panel.table.clearSelection()
    panel.table.selectRow(1)
    assert OVERLAY_KEY in tl.overlays and panel.link_note.isHidden()
    panel.close()
