"""The Diff window's Over-time view on real pairs of recordings, through the real loader
threads and the alignment job: curves of both on one aligned axis, one cursor moving
both maps, the categories at the cursor, the sites table and its highlight, advise's
prediction, Cancel, and a recording without history.

The pairs: a leak removed (``gpt2_leak`` vs ``pair_gpt2_noleak``, 8 iterations each)
and checkpointing turned on (``gpt2_adamw_fp32`` vs ``pair_gpt2_ckpt``, 6 iterations).
Each pair's window is grabbed at 1440x900 (``/tmp/compare_*.png``, or under
``VRAMSCOPE_SHOTS``) with the cursor on the iteration that changed most.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import BIG_XZ, DATA
from PySide6.QtCore import QPointF, Qt

from tests.snapshot_forms import raw_object
from vramscope.viewer.model.categories import CATEGORY_LABELS, CATEGORY_NAMES, MemoryBreakdown
from vramscope.viewer.model.core.units import format_bytes
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports import aligned
from vramscope.viewer.model.reports.diff import signed_bytes

TRUTH = DATA / "truth"
LEAK = (TRUTH / "gpt2_leak.pickle.xz", TRUTH / "pair_gpt2_noleak.pickle.xz")
CKPT = (TRUTH / "gpt2_adamw_fp32.pickle.xz", TRUTH / "pair_gpt2_ckpt.pickle.xz")


def shot_path(name: str) -> Path:
    out = Path(os.environ.get("VRAMSCOPE_SHOTS", "/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    return out / name


def grab(window, path: Path) -> None:
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    window.resize(1440, 900)
    QApplication.processEvents()
    assert (window.width(), window.height()) == (1440, 900)
    assert window.grab().save(os.fspath(path), "PNG")
    assert path.stat().st_size > 10_000


@pytest.fixture
def over_time(qtbot):
    """``over_time(a, b)``: a Diff window on ``a`` and ``b`` (loaded by its threads), its
    Over-time view shown and aligned."""
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.compare.diff_window import DiffWindow
    from vramscope.viewer._qt.widgets.stack_panel import StackPanel

    application()
    StackPanel.open_externally = False
    windows = []

    def make(a, b, expect: str = "done"):
        w = DiffWindow()
        qtbot.addWidget(w)
        w.resize(1440, 900)
        w.show()
        qtbot.waitExposed(w)
        windows.append(w)
        with qtbot.waitSignal(w.loadFinished, timeout=60000) as blocker:
            w.open(a, b)
        assert blocker.args == ["loaded"], w.last_error
        with qtbot.waitSignal(w.over_time.finished, timeout=60000) as blocker:
            w.show_over_time()
        assert blocker.args == [expect], w.over_time.message.text()
        return w

    yield make
    for w in windows:
        w.close()


def model_alignment(a: Path, b: Path):
    """The model's own answer on the same files (what the view must show)."""
    sa, sb = load_snapshot(a), load_snapshot(b)
    ta, tb = build_timeline(sa), build_timeline(sb)
    return aligned.align(sa, sb, ta, tb)


def check_axis(pane, al) -> None:
    """Both sides' curves on one axis: span i of either side at [i, i + 1]."""
    r = pane.result
    chart = pane.chart
    assert r.axis.n_spans == len(al.spans) == len(r.alignment.spans)
    assert chart.x_axis.labels == [s.label for s in al.spans]
    for side in ("a", "b"):
        d = r.side(side)
        for s in r.alignment.spans:
            f = getattr(s, side)
            assert d.x[f.start] == pytest.approx(s.index)
            assert s.index <= d.x[f.end] < s.index + 1
        assert np.all(np.diff(d.x) >= 0)
        for curve in ("reserved", "allocated"):
            n = chart.drawn_points(side, curve)
            # decimated to the pixel columns: min and max per column, never every event
            assert 0 < n <= 2 * max(chart.vb.width(), 200) + 4 < len(d.x)
            _xs, ys = chart.curves[(side, curve)].getData()
            assert ys.max() == d.curves[curve].max()  # the peak survives decimation
    legend = chart.legend.text()
    assert f"A: {r.a.doc.name}" in legend and f"B: {r.b.doc.name}" in legend


def check_cursor_at(pane, i: int) -> None:
    """Both maps show an event inside span ``i`` of their side, and say which."""
    r = pane.result
    s = r.alignment.spans[i]
    ka, kb = pane.mapped_events()
    assert s.a.start <= ka <= s.a.end and s.b.start <= kb <= s.b.end
    assert pane.caption_a.text() == f"<b>A</b> after event {ka:,} ({s.label})"
    assert pane.caption_b.text() == f"<b>B</b> after event {kb:,} ({s.label})"
    for m, k, d in ((pane.map_a, ka, r.a), (pane.map_b, kb, r.b)):
        assert m.doc is d.doc.at(d.device, k)
        assert m.doc.event in (k, -1)  # (-1: the last event, the snapshot as recorded)
    assert f"<b>{s.label}</b>: peak reserved" in pane.peak_line.text()
    assert signed_bytes(s.delta("peak_reserved")) in pane.peak_line.text()


def check_categories(pane) -> None:
    """The table at the cursor is each side's ``breakdown.split_at`` (computed here): every
    category with bytes on either side, none empty on both, the changed ones first."""
    r = pane.result
    ka, kb = pane.mapped_events()
    split = []
    for side, k in (("a", ka), ("b", kb)):
        d = r.side(side)
        bd = MemoryBreakdown.build(d.doc.snap, d.doc.timeline, d.device)
        split.append(bd.split_at(k))
    a, b = split
    want = {n: (a.get(n, 0), b.get(n, 0)) for n in CATEGORY_NAMES if a.get(n) or b.get(n)}
    got = pane.category_values()
    assert got == want
    names = list(got)
    changed = [n for n in names if got[n][0] != got[n][1]]
    assert names[: len(changed)] == changed
    t = pane.categories
    assert t.rowCount() == len(want) + 1 and t.item(t.rowCount() - 1, 0).text() == "total"


def test_over_time_leak_pair(over_time, qtbot):
    from vramscope.viewer._qt.compare.diff_window import highlight_count

    w = over_time(*LEAK)
    pane = w.over_time
    al = model_alignment(*LEAK)
    assert al.by == "iteration" and len(al.spans) == 8
    check_axis(pane, al)
    # Opened on the span whose peak changed most: iteration 7 (the leak at its largest).
    assert al.largest_change().index == 7
    check_cursor_at(pane, 7)
    assert "iteration 7" in pane.message.text() and "-224.00 MiB" in pane.message.text()

    # Left / Right on the chart step one span; both maps follow.
    pane.chart.plot.setFocus()
    for _ in range(7):
        qtbot.keyClick(pane.chart.plot, Qt.Key.Key_Left)
    qtbot.waitUntil(lambda: pane.result.axis.span_of(pane.chart.cursor_x()) == 0)
    qtbot.waitUntil(
        lambda: (
            pane.result.alignment.spans[0].a.start
            <= pane.mapped_events()[0]
            <= pane.result.alignment.spans[0].a.end
        )
    )
    check_cursor_at(pane, 0)
    for _ in range(7):
        qtbot.keyClick(pane.chart.plot, Qt.Key.Key_Right)
    qtbot.waitUntil(
        lambda: (
            pane.result.alignment.spans[7].a.start
            <= pane.mapped_events()[0]
            <= pane.result.alignment.spans[7].a.end
        )
    )
    check_cursor_at(pane, 7)
    check_categories(pane)
    # The leak grew every iteration: at iteration 7 A holds what B does not.
    _ka, _kb = pane.mapped_events()
    assert pane.category_values()["unknown"][0] > pane.category_values()["unknown"][1]

    # A click on the chart puts the cursor there (iteration 3).
    vb = pane.chart.vb
    (_, _), (y0, y1) = vb.viewRange()
    pos = pane.chart.plot.mapFromScene(vb.mapViewToScene(QPointF(3.5, (y0 + y1) / 2)))
    qtbot.mouseClick(pane.chart.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    qtbot.waitUntil(lambda: pane.result.axis.span_of(pane.chart.cursor_x()) == 3)
    qtbot.waitUntil(
        lambda: (
            pane.result.alignment.spans[3].a.start
            <= pane.mapped_events()[0]
            <= pane.result.alignment.spans[3].a.end
        )
    )
    check_cursor_at(pane, 3)
    check_categories(pane)

    # Each band's tooltip names its peak phase on both sides.
    tip = pane.chart.band_tooltip(7)
    assert "iteration 7" in tip and tip.count("peak in backward") == 2

    # The sites: the leaking line leads; selecting it highlights its blocks on A only.
    items = pane.site_items()
    assert len(items) == len(al.sites)
    top = pane.site_of(items[0])
    assert top.frame.startswith("record_one.py:239") and top.status == "gone"
    for it in items:  # "changed" only where the bytes differ
        s = pane.site_of(it)
        assert (it.text(1) == "unchanged") == (s.a_bytes == s.b_bytes), it.text(0)
    assert items[0].text(4) == signed_bytes(al.sites[0].delta) == signed_bytes(top.delta)
    assert "record_one.py:239 in run" in items[0].toolTip(0)
    assert "/" in items[0].toolTip(0).split("\n")[0]  # the full path
    pane.set_span(7)
    pane.sites.setCurrentItem(items[0])
    assert highlight_count(pane.map_a) > 0 and highlight_count(pane.map_b) == 0
    assert f"selected site: {top.frame}" in pane.map_legend.text()
    # At iteration 7, 7 of the 8 leaked tensors are live (the 8th comes in its backward).
    n7 = highlight_count(pane.map_a)
    pane.set_span(1)
    assert 0 < highlight_count(pane.map_a) < n7 and highlight_count(pane.map_b) == 0
    # Sorting by a column and back keeps numbers as numbers.
    pane.sites.sortByColumn(2, Qt.SortOrder.DescendingOrder)
    a_bytes = [pane.site_of(it).a_bytes for it in pane.site_items()]
    assert a_bytes == sorted(a_bytes, reverse=True)
    pane.sites.sortByColumn(4, Qt.SortOrder.DescendingOrder)

    # advise's prediction for the change the files show (the leak gone), against B.
    if pane.prediction_job is not None:
        with qtbot.waitSignal(pane.predicted, timeout=60000):
            pass
    p = aligned.prediction_error(load_snapshot(LEAK[0]), al.b_peak_reserved, "free_kept")
    text = pane.prediction.text()
    assert pane.prediction.isVisible()
    assert text.startswith("advise predicted free_kept")
    assert f"at {format_bytes(p['predicted_peak_reserved_bytes'])}" in text
    assert f"B peaked at {format_bytes(al.b_peak_reserved)}" in text
    assert f"off by {signed_bytes(p['error_bytes'])}" in text

    big = al.largest_change().index
    pane.set_span(big)
    pane.sites.setCurrentItem(pane.site_items()[0])
    grab(w, shot_path("compare_leak.png"))


def test_over_time_checkpointing_pair(over_time, qtbot):
    w = over_time(*CKPT)
    pane = w.over_time
    al = model_alignment(*CKPT)
    assert len(al.spans) == 6
    check_axis(pane, al)
    big = al.largest_change()
    check_cursor_at(pane, big.index)
    check_categories(pane)
    pane.set_span(4)
    check_cursor_at(pane, 4)
    check_categories(pane)
    # Checkpointing keeps fewer activations at the peak of each iteration.
    s = pane.result.alignment.spans[4]
    assert s.category_delta()["activation"] < 0
    if pane.prediction_job is not None:
        with qtbot.waitSignal(pane.predicted, timeout=60000):
            pass
    assert pane.prediction.text().startswith("advise predicted gradient_checkpointing")
    # A moved line is one row; selecting it highlights on both maps at A's own line.
    moved = [it for it in pane.site_items() if "->" in pane.site_of(it).frame]
    assert moved
    pane.sites.setCurrentItem(moved[0])
    site = pane.site_of(moved[0])
    assert f"selected site: {site.frame}" in pane.map_legend.text()  # (in full)
    pane.set_span(big.index)
    pane.sites.setCurrentItem(pane.site_items()[0])
    grab(w, shot_path("compare_ckpt.png"))


def category_rows_shown(pane) -> list[tuple[int, str, int, int]]:
    """The category table's rows as (row, name, A, B), the total left out."""
    t = pane.categories
    name_of = dict(zip(CATEGORY_LABELS, CATEGORY_NAMES))
    out = []
    for r in range(t.rowCount()):
        name = name_of.get(t.item(r, 0).text())
        if name:
            out.append(
                (
                    r,
                    name,
                    int(t.item(r, 1).data(Qt.ItemDataRole.UserRole)),
                    int(t.item(r, 2).data(Qt.ItemDataRole.UserRole)),
                )
            )
    return out


def test_over_time_the_changed_category_is_in_view_at_1440x900(over_time, qtbot):
    """At the span the leak changed most, the category that changed is on screen without
    scrolling, and no category empty on both sides is listed."""
    w = over_time(*LEAK)
    pane = w.over_time
    al = model_alignment(*LEAK)
    pane.set_span(al.largest_change().index)
    grab(w, shot_path("compare_leak_categories.png"))  # (1440x900, laid out)
    shown = category_rows_shown(pane)
    changed = [(r, n) for r, n, va, vb in shown if va != vb]
    assert changed, "the leak pair changes a category at its largest change"
    t = pane.categories
    view = t.viewport().rect()
    assert t.verticalScrollBar().value() == 0
    for r, name in changed:
        rect = t.visualItemRect(t.item(r, 0))
        assert view.contains(rect), (name, rect, view)
    total = t.visualItemRect(t.item(t.rowCount() - 1, 0))
    assert t.item(t.rowCount() - 1, 0).text() == "total" and view.contains(total)
    # none empty on both sides; the changed ones first, the largest change first
    assert all(va or vb for _, _, va, vb in shown), shown
    ka, kb = pane.mapped_events()
    a, b = pane.result.a.breakdown.split_at(ka), pane.result.b.breakdown.split_at(kb)
    assert [n for _, n in changed] == sorted(
        (n for n in CATEGORY_NAMES if a.get(n, 0) != b.get(n, 0)),
        key=lambda n: -abs(b.get(n, 0) - a.get(n, 0)),
    )
    assert [r for r, _ in changed] == list(range(len(changed)))


def test_over_time_an_allocator_setting_changes_no_site(over_time, qtbot):
    """One program under two allocator settings: every site holds the same bytes, so
    none is "changed"; the title says none differs."""
    w = over_time(DATA / "whatif_default.pickle", DATA / "whatif_expandable.pickle")
    pane = w.over_time
    items = pane.site_items()
    assert items
    for it in items:
        s = pane.site_of(it)
        assert s.a_bytes == s.b_bytes
        assert it.text(1) == "unchanged" and it.text(4) == "0 B"
    assert (
        f"no site differs ({len(items)} sites hold the same bytes on both sides)"
        in pane.sites_title.text()
    )
    grab(w, shot_path("compare_whatif.png"))


def test_over_time_cancel_and_again(over_time, qtbot):
    from vramscope.viewer._qt.widgets.jobs import Job

    w = over_time(*LEAK)
    pane = w.over_time
    qtbot.waitUntil(lambda: not pane.is_running(), timeout=60000)
    with qtbot.waitSignal(pane.finished, timeout=30000) as blocker:
        pane.start()
        assert pane.cancel_button.isVisible() and pane.progress.isVisible()
        qtbot.mouseClick(pane.cancel_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["cancelled"]
    assert pane.result is None and not pane.body.isVisible()
    assert "cancelled" in pane.message.text() and pane.again_button.isVisible()
    assert not pane.cancel_button.isVisible()
    qtbot.waitUntil(lambda: not pane.findChildren(Job), timeout=30000)
    # Switching tabs does not start it again behind the user's back; the button does.
    w.views.setCurrentIndex(0)
    w.show_over_time()
    assert pane.result is None and not pane.is_running()
    with qtbot.waitSignal(pane.finished, timeout=60000) as blocker:
        qtbot.mouseClick(pane.again_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["done"] and pane.result is not None and pane.body.isVisible()


def test_over_time_without_history(over_time, tmp_path):
    obj = raw_object(DATA / "small_pool_mixed.pickle")
    obj["device_traces"] = [[] for _ in obj["device_traces"]]
    bare = tmp_path / "no_history.pickle"
    bare.write_bytes(pickle.dumps(obj))
    w = over_time(LEAK[0], bare, expect="failed")
    pane = w.over_time
    assert pane.message.text() == "B has no allocation history: nothing to align"
    assert pane.result is None and not pane.body.isVisible()
    # The end states still compare; showing the tab again does not run it again.
    assert w.diff is not None
    w.views.setCurrentIndex(0)
    w.show_over_time()
    assert not pane.is_running()


def test_main_window_compare_opens_over_time(loaded, qtbot):
    window = loaded(LEAK[0])
    dw = window.compare_with(os.fspath(LEAK[1]))
    qtbot.waitUntil(lambda: dw.diff is not None, timeout=30000)
    with qtbot.waitSignal(dw.over_time.finished, timeout=60000) as blocker:
        dw.show_over_time()
    assert blocker.args == ["done"]
    assert dw.over_time.result.a.doc is window.vs.doc.root
    assert len(dw.over_time.result.alignment.spans) == 8
    dw.close()


def test_over_time_relative_time(over_time, qtbot):
    """Neither recording has iterations: ten stretches of relative time, "% of the run"."""
    w = over_time(DATA / "fragmentation_oom.pickle", DATA / "capacity_oom.pickle")
    pane = w.over_time
    r = pane.result
    assert r.alignment.by == "relative time" and r.axis.n_spans == len(r.alignment.spans) == 10
    assert r.axis.lead == 0 and r.axis.tail == 0  # the stretches cover every event
    axis = pane.chart.x_axis
    assert pane.chart.plot.getPlotItem().getAxis("bottom").labelText == "% of the run"
    ((_spacing, values),) = axis.tickValues(0, 10, 1000)
    assert axis.tickStrings(values, 1, 1)[:3] == ["0 %", "10 %", "20 %"]
    pane.set_span(4)
    check_cursor_at(pane, 4)
    check_categories(pane)
    assert not pane.prediction.isVisible()  # no change detected: no prediction line


def test_over_time_unequal_iterations(over_time, qtbot):
    """A has 4 iterations, B 9: spans 4..8 are B's alone; A's map stays at its last
    event before them, and the line says only B has the span."""
    w = over_time(DATA / "resnet50_train.pickle", DATA / "gpt2_oom.pickle")
    pane = w.over_time
    r = pane.result
    assert len(r.alignment.spans) == 9 and r.alignment.spans[6].a is None
    assert "A has 4 iterations, B 9" in pane.message.text()
    pane.set_span(6)
    s = r.alignment.spans[6]
    ka, kb = pane.mapped_events()
    assert s.b.start <= kb <= s.b.end
    assert ka == r.alignment.spans[3].a.end  # A's last event of its last iteration
    assert "only B has it" in pane.peak_line.text()
    pane.set_span(2)
    check_cursor_at(pane, 2)


def test_minmax_decimation_by_x_keeps_peaks_and_dips():
    from vramscope.viewer.model.view.curve_lod import decimate

    def minmax_columns(x, y, lo, hi, columns):
        return decimate(x, y, 0, len(x) - 1, columns, minmax=True, x_range=(lo, hi))

    x = np.linspace(0, 10, 1_000_000)
    y = np.zeros_like(x)
    y[123_457] = 5.0  # one event's peak
    y[876_543] = -3.0  # one event's dip
    xs, ys = minmax_columns(x, y, 0.0, 10.0, 500)
    assert len(xs) <= 2 * 502 and ys.max() == 5.0 and ys.min() == -3.0
    assert np.all(np.diff(xs) >= 0)
    xs, ys = minmax_columns(x, y, 1.2345, 1.2346, 500)  # zoomed in: every point
    assert len(xs) < 1000 and ys.max() == 5.0


def test_over_time_million_events_cancel_then_align(qtbot):
    """A million events a side, 643 iterations: Cancel stops the worker at its next
    checkpoint; run again, the curves are drawn at the pixels and the ticks thin out."""
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.compare.diff_window import DiffWindow
    from vramscope.viewer._qt.widgets.jobs import Job

    application()
    w = DiffWindow()
    qtbot.addWidget(w)
    w.resize(1440, 900)
    w.show()
    with qtbot.waitSignal(w.loadFinished, timeout=60000):
        w.open(BIG_XZ, BIG_XZ)
    pane = w.over_time
    with qtbot.waitSignal(pane.finished, timeout=60000) as blocker:
        w.show_over_time()
        job = pane.job
        # (the pane's own words, not a blocker on the worker's many queued `progressed`)
        qtbot.waitUntil(
            lambda: pane.message.text() != "Aligning the two recordings…", timeout=30000
        )
        with qtbot.waitSignal(job.cancelled, timeout=30000):  # the worker itself stopped
            qtbot.mouseClick(pane.cancel_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["cancelled"] and pane.result is None
    qtbot.waitUntil(lambda: not pane.findChildren(Job), timeout=30000)
    with qtbot.waitSignal(pane.finished, timeout=60000) as blocker:
        qtbot.mouseClick(pane.again_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["done"]
    r = pane.result
    assert r.axis.n_spans == len(r.alignment.spans) > 600 and len(r.a.x) == 1_000_000
    chart = pane.chart
    for side in ("a", "b"):
        assert 0 < chart.drawn_points(side, "reserved") <= 2 * max(chart.vb.width(), 200) + 4
    ((_step, values),) = chart.x_axis.tickValues(*r.axis.x_range, chart.vb.width())
    assert 2 <= len(values) < 40  # labels that fit, not 643
    w.close()
