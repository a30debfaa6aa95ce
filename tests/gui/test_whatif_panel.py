"""The What-if panel with a real event loop (offscreen): run, cancel, errors, copy, export,
menu hook."""

from __future__ import annotations

import pytest

from tests.gui.conftest import DATA

WHATIF = DATA / "whatif_h200" / "whatif_default.pickle.xz"


@pytest.fixture
def panel(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.whatif.panel import WhatIfPanel
    from vramscope.viewer.model import load_snapshot

    application()
    p = WhatIfPanel(load_snapshot(WHATIF))
    qtbot.addWidget(p)
    p.resize(1200, 760)
    p.show()
    qtbot.waitExposed(p)
    return p


def test_run_shows_curves_table_and_self_check(panel, qtbot, tmp_path):
    from vramscope.viewer.model.whatif import predict, prepare

    panel.set_checked(["expandable_segments:True", "max_split_size_mb:64"])
    with qtbot.waitSignal(panel.finished, timeout=60000):
        qtbot.mouseClick(panel.run_button, qtbot_button())
    assert panel.table.rowCount() == 3
    # The model's own sentence, as the commands would word it.
    assert prepare(panel.snap).self_check().sentence() in panel.summary.text()
    assert "Self-check passed" in panel.summary.text()
    # The table shows the model's figures.
    case = prepare(panel.snap)
    want = predict(case, ["recorded", "expandable_segments:True", "max_split_size_mb:64"])
    from vramscope.viewer.model.core.units import format_bytes

    for row, p in enumerate(want):
        assert panel.table.item(row, 1).text() == format_bytes(p.result.peak_reserved_until_oom)
    # One curve per setting, each as long as the request stream.
    curves = [
        c
        for c in panel.plot.listDataItems()
        if c.opts.get("pen") is not None and c.xData is not None and len(c.xData) > 1
    ]
    assert len(curves) == 3 and all(len(c.xData) == len(case.requests) for c in curves)
    # Copy and export.
    panel.copy_table()
    from PySide6.QtGui import QGuiApplication

    text = QGuiApplication.clipboard().text()
    assert text.splitlines()[0].startswith("setting\tpeak reserved")
    assert "expandable_segments:True" in text
    out = tmp_path / "whatif.png"
    assert panel.export_png(str(out)) and out.stat().st_size > 1000
    assert panel.run_button.isEnabled()  # enabled again after the run


def qtbot_button():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def test_predicted_oom_is_marked(panel, qtbot):
    """Under a tight limit the default settings run out of memory; the chart marks it."""
    panel.set_checked([])
    panel.limit_edit.setText("6GB")
    with qtbot.waitSignal(panel.finished, timeout=60000):
        panel.run()
    from vramscope.viewer._qt.whatif.panel import COL_OOM

    assert panel.table.item(0, COL_OOM).text().startswith("event ")
    marks = [c for c in panel.plot.listDataItems() if c.opts.get("symbol") == "x"]
    assert len(marks) == 1
    oom = panel.preds[0].result.first_oom
    assert marks[0].xData[0] == oom.event
    # The curve is solid up to the OOM and dashed after it (the program would have stopped).
    solid = [c for c in panel.plot.listDataItems() if c.name() == "recorded"]
    assert len(solid) == 1 and solid[0].xData[-1] == oom.event


def test_cancel_stops_the_run(panel, qtbot):
    panel.set_checked(
        [
            "expandable_segments:True",
            "max_split_size_mb:64",
            "roundup_power2_divisions:4",
            "garbage_collection_threshold:0.6",
        ]
    )
    panel.run()
    panel.cancel()
    qtbot.waitUntil(lambda: panel.thread is None, timeout=60000)
    assert panel.run_button.isEnabled()
    assert panel.summary.text() == "Cancelled." and panel.table.rowCount() == 0


def test_bad_setting_and_bad_limit_are_one_line_errors(panel, qtbot):
    panel.conf_edit.setText("max_split_size_mb:3")
    assert not panel.add_conf()
    assert "too small" in panel.error.text()
    panel.conf_edit.setText("max_split_size_mb:256")
    assert panel.add_conf() and "max_split_size_mb:256" in panel.checked_confs()
    panel.limit_edit.setText("plenty")
    panel.run()
    assert panel.thread is None and "not a size" in panel.error.text()


def test_main_window_menu_opens_the_panel(make_window, qtbot):
    w = make_window()
    assert not w.whatif_action.isEnabled()
    w.open_file(str(DATA / "whatif_default.pickle"))
    qtbot.waitUntil(lambda: w.vs.doc is not None, timeout=60000)
    assert w.whatif_action.isEnabled()
    assert w.whatif_action.shortcut().toString() == "Ctrl+Shift+W"
    w.whatif_action.trigger()
    from vramscope.viewer._qt.whatif.panel import WhatIfPanel

    panels = [x for x in w.aux_windows if isinstance(x, WhatIfPanel)]
    assert len(panels) == 1 and panels[0].isVisible()
    panels[0].close()


def test_snapshot_without_trace_shows_one_line(qtbot):
    import pickle

    from tests.snapshot_forms import raw_object
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.whatif.panel import WhatIfPanel
    from vramscope.viewer.model import load_bytes

    application()
    obj = raw_object(DATA / "small_pool_mixed.pickle")
    obj["device_traces"] = [[]]
    p = WhatIfPanel(load_bytes(pickle.dumps(obj)))
    qtbot.addWidget(p)
    p.show()
    with qtbot.waitSignal(p.finished, timeout=30000):
        p.run()
    assert "no trace events" in p.error.text() and p.table.rowCount() == 0
    assert p.run_button.isEnabled()


# --------------------------------------------------------------------------- readability
GPT2 = DATA / "gpt2_oom.pickle"  # the recorded run ends in an OOM at event 25902


@pytest.fixture
def gpt2_panel(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.whatif.panel import WhatIfPanel
    from vramscope.viewer.model import load_snapshot

    application()
    p = WhatIfPanel(load_snapshot(GPT2))
    qtbot.addWidget(p)
    p.resize(1200, 760)
    p.show()
    qtbot.waitExposed(p)
    return p


def _text_fits(view, text: str, width: int, icon: int = 0) -> bool:
    # Qt elides a cell whose text is wider than its rect less the style's text margins.
    from PySide6.QtWidgets import QStyle

    margin = view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1
    return view.fontMetrics().horizontalAdvance(text) + 2 * margin + icon <= width


def test_table_cells_are_never_cut(gpt2_panel, qtbot):
    """The OOM cell read "event 2590…" for event 25902; long settings were cut."""
    from vramscope.viewer._qt.whatif.panel import COL_OOM

    p = gpt2_panel
    long_conf = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
    p.set_checked(["expandable_segments:True,garbage_collection_threshold:0.6", long_conf])
    with qtbot.waitSignal(p.finished, timeout=120000):
        p.run()
    t = p.table
    assert t.item(0, COL_OOM).text() == "event 25902 (fragmentation)"
    icon = t.iconSize().width() + 4
    for r in range(t.rowCount()):
        for c in range(t.columnCount()):
            text = t.item(r, c).text()
            if c == 0 and not _text_fits(t, text, t.columnWidth(c), icon):
                # A long setting wraps (after its commas and colons), whole, in a taller
                # row; the tooltip has it on one line.
                assert t.item(r, c).toolTip() == text
                assert t.rowHeight(r) >= 2 * t.fontMetrics().height(), (r, text)
                continue
            assert _text_fits(t, text, t.columnWidth(c), icon if c == 0 else 0), (r, c, text)
    # The settings list shows every setting whole, also one typed in.
    p.conf_edit.setText("max_split_size_mb:256,garbage_collection_threshold:0.7")
    assert p.add_conf()
    qtbot.wait(50)
    lst = p.list
    box = lst.style().pixelMetric(lst.style().PixelMetric.PM_IndicatorWidth) + 8
    for i in range(lst.count()):
        text = lst.item(i).text()
        assert lst.item(i).toolTip() == text
        assert _text_fits(lst, text, lst.viewport().width(), box), text


def test_limit_and_legend_stay_off_the_curves(gpt2_panel, qtbot):
    """The 'limit' label sat under the curves and the ✕ marks: it is named in the legend,
    which lies below the chart, outside the area the curves are drawn in."""
    import pyqtgraph as pg

    p = gpt2_panel
    p.set_checked(["expandable_segments:True"])
    with qtbot.waitSignal(p.finished, timeout=120000):
        p.run()
    qtbot.wait(50)
    labels = [label.text for _sample, label in p.legend.items]
    assert "memory limit 10.49 GiB" in labels and "predicted OOM" in labels
    vb = p.plot.getPlotItem().getViewBox()
    inside = [
        i for i in vb.allChildren() if isinstance(i, (pg.TextItem, pg.InfLineLabel, pg.LegendItem))
    ]
    assert not inside  # nothing with text over the data
    chart = vb.sceneBoundingRect()
    legend = p.legend.sceneBoundingRect()
    assert legend.height() > 0 and not chart.intersects(legend)
    # The OOM marks lie inside the visible ranges, not on an edge.
    (xmin, xmax), (ymin, ymax) = vb.viewRange()
    for mark in [c for c in p.plot.listDataItems() if c.opts.get("symbol") == "x"]:
        assert xmin < mark.xData[0] < xmax and ymin < mark.yData[0] < ymax * 0.98


def test_wrapped_trace_says_what_the_window_cannot_show(qtbot):
    """A trace started mid-run, in the panel: on the 1M file (the ring started after every
    segment existed) every setting showed 1.34 GiB, +0.0%, as if predicted."""
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.whatif.panel import COL_PEAK, COL_VS, WhatIfPanel
    from vramscope.viewer.model import load_snapshot

    application()
    p = WhatIfPanel(load_snapshot(DATA / "transformer_long_python_1000k.pickle.xz"))
    qtbot.addWidget(p)
    p.show()
    p.set_checked(["expandable_segments:True"])
    with qtbot.waitSignal(p.finished, timeout=300000):
        p.run()
    assert "trace starts after 67 segments (1.34 GiB) already existed" in p.summary.text()
    assert "recorded, not a prediction" in p.summary.text()
    row = [p.table.item(1, c).text() for c in range(p.table.columnCount())]
    assert row[COL_PEAK] == "1.34 GiB*" and row[COL_VS] == "n/a*"
