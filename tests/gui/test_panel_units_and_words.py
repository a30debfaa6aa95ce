"""What users saw in the Diagnosis, What-if and Diff windows, with a real event loop
(offscreen): byte axes in the right unit, the GUI's own words (no command-line flags),
one memory limit named alike in both panels, tables that fit a 1300 px window, the Diff
window's highlight named for what it is, and the recorded batch asked for, remembered
and used to answer in samples."""

from __future__ import annotations

import re

import pytest

from tests.gui.conftest import DATA

GPT2_LEAK = DATA / "truth" / "gpt2_leak.pickle.xz"  # 812 MiB peak, no limit, H100: 79.18 GiB
SMALL = DATA / "small_pool_mixed.pickle"  # 22 MiB peak, no limit and no GPU size recorded
FRAG = DATA / "fragmentation_oom.pickle"  # OOM under an inferred 3.49 GiB: 83 % of the batch
GPT2_OOM = DATA / "gpt2_oom.pickle"  # OOM under 10.49 GiB: five remedies, long changes
RESNET = DATA / "resnet50_train.pickle"
CLI_FLAG = re.compile(r"--[a-z]")


def _need(path):
    if not path.exists():
        pytest.skip(f"{path.name} is not here")


@pytest.fixture
def open_panel(qtbot):
    """``open_panel(kind, path, width=1200)``: a Diagnosis or What-if panel, shown."""
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.diagnosis.panel import DiagnosisPanel
    from vramscope.viewer._qt.whatif.panel import WhatIfPanel
    from vramscope.viewer.model import load_snapshot

    application()

    def make(kind: str, path, width: int = 1200):
        _need(path)
        cls = DiagnosisPanel if kind == "diagnosis" else WhatIfPanel
        p = cls(load_snapshot(path))
        qtbot.addWidget(p)
        p.resize(width, 760)
        p.show()
        qtbot.waitExposed(p)
        return p

    return make


def _run(panel, qtbot) -> None:
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    qtbot.wait(30)


def _left_label(plot) -> str:
    return re.sub(r"<[^>]+>", "", plot.getPlotItem().getAxis("left").labelString())


# -- byte axes ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["diagnosis", "whatif"])
def test_a_peak_under_one_gib_is_charted_in_mib(open_panel, qtbot, kind):
    """The charts read "reserved (mGiB)" for an 812 MiB run: pyqtgraph's SI prefix on a
    unit that is already binary.  Now the axis says MiB and the curve is in MiB."""
    p = open_panel(kind, GPT2_LEAK)
    _run(p, qtbot)
    label = _left_label(p.plot)
    assert label.strip() == "reserved (MiB)", label
    peak = p.case.recorded_run().reserved.max()
    ys = [
        float(c.yData.max())
        for c in p.plot.listDataItems()
        if c.yData is not None and len(c.yData) > 1
    ]
    assert max(ys) == pytest.approx(peak / (1 << 20))
    # The ticks are MiB too (hundreds, not fractions or thousands).
    axis = p.plot.getPlotItem().getAxis("left")
    assert axis.autoSIPrefixScale == 1.0 and axis.labelUnitPrefix == ""
    _lo, hi = p.plot.getPlotItem().vb.viewRange()[1]
    assert 800 < hi < 1000


def test_a_run_over_one_gib_stays_in_gib(open_panel, qtbot):
    p = open_panel("diagnosis", FRAG)
    _run(p, qtbot)
    assert _left_label(p.plot).strip() == "reserved (GiB)"
    _lo, hi = p.plot.getPlotItem().vb.viewRange()[1]
    assert 3 < hi < 4


def test_byte_unit_picks_the_unit_the_largest_value_reads_in():
    from vramscope.viewer._qt.widgets.plotting import byte_unit

    assert byte_unit(812 << 20) == ("MiB", 1 << 20)
    assert byte_unit(3 << 30) == ("GiB", 1 << 30)
    assert byte_unit(1 << 30) == ("GiB", 1 << 30)
    assert byte_unit(5000) == ("KiB", 1 << 10)
    assert byte_unit(0) == ("B", 1)


# -- the GUI's words ---------------------------------------------------------------------
def _texts(table):
    for r in range(table.rowCount()):
        for c in range(table.columnCount()):
            item = table.item(r, c)
            yield item.text()
            yield item.toolTip()


def test_no_limit_known_points_at_the_limit_box_not_a_flag(open_panel, qtbot):
    """ "no memory limit known (give --memory-limit)" in a window with no such flag."""
    p = open_panel("diagnosis", SMALL)
    _run(p, qtbot)
    assert p.advice.memory_limit_bytes is None
    verdict = p.verdict.text()
    assert not CLI_FLAG.search(verdict), verdict
    assert "no memory limit known" in verdict and "Memory limit box" in verdict
    assert p.limit_label.text() == "Memory limit: none known"
    assert "none known" in p.limit_edit.placeholderText()
    # Typing one in answers against it.
    p.limit_edit.setText("16MiB")
    _run(p, qtbot)
    assert p.limit_label.text() == "Memory limit: 16.00 MiB (given)"


def test_the_smaller_batch_never_names_a_flag(open_panel, qtbot):
    """The change read "... (pass --batch N for the exact size)"."""
    p = open_panel("diagnosis", FRAG)
    _run(p, qtbot)
    assert p.advice.largest_scale_that_fits < 1
    for text in _texts(p.table):
        assert not CLI_FLAG.search(text), text
    assert not CLI_FLAG.search(p.table_text())
    assert "type the recorded batch size above" in p.table.item(0, 6).text()


def test_a_capped_search_says_or_more(open_panel, qtbot):
    """ "64× the recorded batch" where the search stopped at 64×: it is 64× or more."""
    p = open_panel("diagnosis", GPT2_LEAK)
    _run(p, qtbot)
    assert p.advice.search_capped and p.advice.largest_scale_that_fits == 64
    text = p.fit_label.text()
    assert "64× the recorded batch or more" in text, text


def test_both_panels_name_the_same_limit(open_panel, qtbot):
    """What-if said "memory limit none" where Diagnosis said "79.18 GiB (GPU total
    memory)" for the same recording."""
    d = open_panel("diagnosis", GPT2_LEAK)
    _run(d, qtbot)
    w = open_panel("whatif", GPT2_LEAK)
    _run(w, qtbot)
    words = "79.18 GiB (GPU total memory)"
    assert d.limit_label.text() == f"Memory limit: {words}"
    assert f"memory limit {words}." in w.summary.text()
    assert w.preds[0].limit == d.advice.memory_limit_bytes
    labels = [label.text for _, label in w.legend.items]
    assert "memory limit 79.18 GiB (above the chart)" in labels
    # A recording's own limit is named alike too.
    d2 = open_panel("diagnosis", FRAG)
    _run(d2, qtbot)
    w2 = open_panel("whatif", FRAG)
    _run(w2, qtbot)
    words = d2.limit_label.text().removeprefix("Memory limit: ")
    assert words.endswith("(inferred)") and f"memory limit {words}." in w2.summary.text()


# -- tables at 1300 px --------------------------------------------------------------------
def _assert_columns_inside_and_text_reachable(table):
    vp = table.viewport().width()
    assert table.horizontalScrollBar().maximum() == 0  # nothing to scroll to
    for c in range(table.columnCount()):
        right = table.columnViewportPosition(c) + table.columnWidth(c)
        assert table.columnViewportPosition(c) >= 0 and right <= vp, (c, right, vp)
    for r in range(table.rowCount()):
        for c in range(table.columnCount()):
            item = table.item(r, c)
            assert item.text() in item.toolTip(), (r, c, item.text(), item.toolTip())


def test_diagnosis_table_fits_a_1300_px_window(open_panel, qtbot):
    """The change text was cut and the location column pushed off-screen."""
    p = open_panel("diagnosis", GPT2_OOM, width=1300)
    _run(p, qtbot)
    assert p.table.rowCount() >= 4
    _assert_columns_inside_and_text_reachable(p.table)
    # The change wraps: a long one takes more than one line, whole.
    fm = p.table.fontMetrics()
    r = max(
        range(p.table.rowCount()), key=lambda i: fm.horizontalAdvance(p.table.item(i, 6).text())
    )
    if fm.horizontalAdvance(p.table.item(r, 6).text()) > p.table.columnWidth(6):
        assert p.table.rowHeight(r) >= 2 * fm.height()


def test_whatif_table_fits_a_1300_px_window(open_panel, qtbot):
    from vramscope.viewer._qt.whatif.panel import COL_OOM

    p = open_panel("whatif", GPT2_OOM, width=1300)
    p.set_checked(
        [
            "expandable_segments:True,garbage_collection_threshold:0.6",
            "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        ]
    )
    _run(p, qtbot)
    _assert_columns_inside_and_text_reachable(p.table)
    # The figures are never cut (the OOM's event whole).
    fm = p.table.fontMetrics()
    assert fm.horizontalAdvance(p.table.item(0, COL_OOM).text()) < p.table.columnWidth(COL_OOM)


# -- the Diff window's highlight -------------------------------------------------------------
def test_diff_highlight_is_named_for_the_selected_row(qtbot):
    """Its maps' legends called a selected row's blocks "search match"."""
    from PySide6.QtCore import Qt

    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.compare.diff_window import DiffWindow
    from vramscope.viewer._qt.widgets.stack_panel import StackPanel
    from vramscope.viewer.model.view.view_state import HIGHLIGHT_DIFF_ROW, HIGHLIGHT_SEARCH

    application()
    StackPanel.open_externally = False
    w = DiffWindow()
    qtbot.addWidget(w)
    w.resize(1440, 900)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.loadFinished, timeout=30000):
        w.open(RESNET, GPT2_OOM)
    items = w.row_items()
    w.stacks.setCurrentItem(items[0])
    qtbot.wait(30)
    top = w.diff.stacks[items[0].data(0, Qt.ItemDataRole.UserRole + 1)]
    want = f"{HIGHLIGHT_DIFF_ROW}: {top.label}"
    assert w.map_b.highlight_label == want
    legend = w.map_b.legend.text()
    assert HIGHLIGHT_DIFF_ROW in legend and HIGHLIGHT_SEARCH not in legend
    # A call-tree node: its path's name.
    w.tabs.setCurrentIndex(1)
    w.tree.setCurrentItem(w.tree.topLevelItem(0))
    qtbot.wait(30)
    assert w.map_a.highlight_label.startswith("selected call path: ")
    assert HIGHLIGHT_SEARCH not in w.map_a.legend.text()
    w.close()


# -- the recorded batch ----------------------------------------------------------------------
def test_recorded_batch_is_asked_remembered_and_answers_in_samples(open_panel, qtbot):
    """ "96 % of the batch" without asking the batch: without it the answer says "of the
    recorded batch"; typed, it is remembered for the file and the answer is in samples."""
    p = open_panel("diagnosis", FRAG)
    assert p.batch_spin.value() == 0  # nothing remembered yet
    _run(p, qtbot)
    title = p.table.item(0, 1).text()
    assert title == "Smaller batch: the largest that fits (83% of the recorded batch)"
    assert "of the recorded batch" in p.fit_label.text()
    assert "type the recorded batch size" in p.fit_label.text()
    # Typed and confirmed (Enter): answered again, in samples.
    p.batch_spin.setValue(24)
    with qtbot.waitSignal(p.finished, timeout=120000):
        p.batch_spin.editingFinished.emit()
    qtbot.wait(30)
    n = p.advice.largest_batch_that_fits
    assert p.advice.recorded_batch == 24 and 0 < n < 24
    assert p.table.item(0, 1).text() == (
        f"Smaller batch: the largest that fits (batch {n} of the recorded 24)"
    )
    assert p.table.item(0, 6).text() == f"reduce the batch size from 24 to {n}"
    assert f"batch {n} of the recorded 24" in p.fit_label.text()
    # The answer in samples, not a share of the batch (the margin to the limit may be a %).
    assert "of the batch" not in p.fit_label.text().split(";")[0]
    p.close()
    # Remembered for this file (not for another).
    again = open_panel("diagnosis", FRAG)
    assert again.batch_spin.value() == 24
    other = open_panel("diagnosis", SMALL)
    assert other.batch_spin.value() == 0
