"""The Leaks view and the category split bar in a real Qt event loop."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from vramscope.viewer.model import load_bytes, load_snapshot
from vramscope.viewer.model.categories import MemoryBreakdown
from vramscope.viewer.model.replay.timeline import build_timeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic_training as syn

DATA = Path(__file__).resolve().parents[1] / "data"


def leaky_breakdown() -> MemoryBreakdown:
    data, _ = syn.training_run(iterations=7, layers=3, leak=True, leak_bytes=5 * syn.MIB)
    snap = load_bytes(data)
    return MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)


def test_leaks_view_lists_the_leak_and_highlights_its_blocks(qtbot):
    from vramscope.viewer._qt.categories.leaks_view import LeaksView

    bd = leaky_breakdown()
    view = LeaksView()
    qtbot.addWidget(view)
    view.resize(700, 400)
    view.show()
    with qtbot.waitSignal(view.allocationsSelected) as got:
        view.set_leaks(bd.leaks, len(bd.iterations))
    assert view.table.rowCount() == 1
    assert view.table.item(0, 0).text() == f"train.py:{syn.LEAK_LINE}"
    assert view.table.item(0, 2).text() == "5.00 MiB"
    ids = got.args[0]
    assert len(ids) == 7 and (bd.intervals.requested[ids] == 5 * syn.MIB).all()
    # The chart: one bar per complete iteration; the line runs after each optimizer step,
    # so what it keeps lands in the next iteration (the first keeps nothing yet).
    assert view.bars is not None
    heights = list(view.bars.opts["height"])
    assert heights == [0.0] + [5.0] * (len(heights) - 1) and len(heights) == 7  # MiB
    view.copy()
    from PySide6.QtGui import QGuiApplication

    assert "keeps 5.00 MiB per iteration" in QGuiApplication.clipboard().text()


def test_leaks_view_says_no_leak_on_a_healthy_run(qtbot):
    from vramscope.viewer._qt.categories.leaks_view import LeaksView

    snap = load_snapshot(DATA / "whatif_default.pickle", use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
    view = LeaksView()
    qtbot.addWidget(view)
    view.set_leaks(bd.leaks, len(bd.iterations))
    assert view.table.rowCount() == 0
    assert view.caption.text().startswith("No leak in 6 iterations")


def test_split_bar_parts_follow_the_bytes(qtbot):
    from vramscope.viewer._qt.categories.split_bar import CategorySplitBar

    snap = load_snapshot(DATA / "gpt2_oom.pickle", use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
    k = int(np.argmax(bd.requested))
    bar = CategorySplitBar()
    qtbot.addWidget(bar)
    bar.resize(1000, 20)
    bar.show()
    qtbot.waitExposed(bar)
    split = bd.split_at(k)
    bar.set_split(split, bd.guessed_bytes_at(k), f"after event {k}")
    parts = dict((name, x1 - x0) for name, x0, x1 in bar.parts())
    total = sum(split.values())
    for name, width in parts.items():
        assert abs(width - 1000 * split[name] / total) < 1e-6
    assert "parameters 474.70 MiB" in bar.toolTip()
    img = bar.grab().toImage()
    assert not img.isNull() and img.width() >= 1000


def test_category_timeline_stacks_up_to_the_requested_curve(qtbot):
    from vramscope.viewer._qt.categories.category_timeline import CategoryTimeline

    snap = load_snapshot(DATA / "resnet50_train.pickle", use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
    view = CategoryTimeline()
    qtbot.addWidget(view)
    view.resize(900, 360)
    view.show()
    qtbot.waitExposed(view)
    view.set_breakdown(bd)
    assert len(view.bands) == len(bd.iterations) == 4
    ev = view.samples
    assert 200 <= len(ev) <= bd.n_events
    # The top of the stack is the requested curve, and every iteration's peak is sampled.
    assert np.allclose(view.stacked[-1] * view.unit[0], bd.requested[ev])
    assert {it.peak_event for it in bd.iterations} <= set(ev.tolist())
    # Zooming resamples the visible range only.
    view.plot.setXRange(3000, 3400, padding=0)
    qtbot.waitUntil(lambda: view.samples.min() >= 2999 and view.samples.max() <= 3401)
    k = int(np.argmax(bd.requested))
    view.set_cursor(k)
    assert "activations" in view.cursor.toolTip() and f"after event {k}" in view.cursor.toolTip()


def test_categories_panel_builds_off_the_gui_thread_and_follows_the_cursor(qtbot):
    from vramscope.viewer._qt.categories.panel import CategoriesPanel
    from vramscope.viewer.model.view.document import Document

    data, _ = syn.training_run(iterations=7, layers=3, leak=True, leak_bytes=5 * syn.MIB)
    doc = Document.build(load_bytes(data))
    panel = CategoriesPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 700)
    panel.show()
    with qtbot.waitSignal(panel.leaks.allocationsSelected, timeout=20000):
        panel.start(doc, 0)
    bd = panel.bd
    assert bd is not None and len(bd.iterations) == 7
    assert "7 iterations, 1 leak" in panel.status.text()
    assert panel.split.caption == "at the peak"
    # The cursor moves the split; a leak row highlights the stacks of what it keeps.
    panel.set_cursor(10)
    assert panel.split.caption == "after event 10"
    assert sum(panel.split.split.values()) == bd.requested[10]
    with qtbot.waitSignal(panel.highlightStacks) as got:
        panel.leaks.table.clearSelection()
        panel.leaks.table.selectRow(0)
    mask = got.args[0]
    assert mask.sum() == 1 and mask[bd.leaks[0].stack]
    with qtbot.waitSignal(panel.cursorRequested) as clicked:
        panel.timeline.eventClicked.emit(42)
    assert clicked.args == [42]
    panel.stop()


def test_a_generation_run_is_counted_in_requests(qtbot):
    """A generation recording's panel counts requests, not per-token iterations."""
    from pathlib import Path

    from vramscope.viewer._qt.categories.panel import CategoriesPanel
    from vramscope.viewer.model.categories import MemoryBreakdown
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.replay.timeline import build_timeline

    path = Path(__file__).resolve().parents[1] / "data" / "truth" / "generate_gpt2_fp32.pickle.xz"
    snap = load_snapshot(path, use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False))
    panel = CategoriesPanel()
    qtbot.addWidget(panel)
    panel.set_breakdown(bd)
    assert "3 generation requests (prefill + " in panel.status.text()
    assert "No leak in 3 generation requests" in panel.leaks.caption.text()


def test_an_empty_leaks_chart_shows_no_ticks(qtbot):
    """Nothing leaked: the chart has no 0..1 scale to read; a leak brings its scale back."""
    from vramscope.viewer._qt.categories.leaks_view import LeaksView

    view = LeaksView()
    qtbot.addWidget(view)
    view.set_leaks([])
    assert not view.chart.getAxis("left").style["showValues"]
    assert not view.chart.getAxis("bottom").style["showValues"]
    bd = leaky_breakdown()
    assert bd.leaks
    view.set_leaks(bd.leaks, len(bd.iterations))
    assert view.chart.getAxis("left").style["showValues"]
