"""Live updates keep the user's view: zoom, scroll, sort, selection, expanded nodes.

A real agent in a fake training process (only its allocator is fake), a real
socket, the real poller thread and a real event loop (pytest-qt, offscreen).
The user's actions are real Qt events where pyqtgraph takes them (wheel
events on the plots) and the widgets' own API elsewhere.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("pytestqt")
# Every test gets its own settings file; real user settings are never touched.
pytestmark = pytest.mark.usefixtures("isolated_qt_settings")

MiB = 1 << 20


@pytest.fixture
def attached(qtbot, start_target, tmp_path, monkeypatch):
    """A live window on a fake process that has made some allocations."""
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.live.controller import LiveController

    monkeypatch.chdir(tmp_path)  # where the process would dump an OOM snapshot
    application()
    t = start_target()
    for i in range(24):
        t.cmd(f"alloc {(i % 5 + 1) * MiB}")
        if i % 3 == 2:
            t.cmd("free")
    live = LiveController(str(t.pid), stats_interval=0.1, trace_interval=0.3)
    w = live.window  # a plain main window; w.live is its controller
    qtbot.addWidget(w)
    w.resize(1440, 900)
    w.show()
    qtbot.waitUntil(
        lambda: w.live.trace_updates >= 1 and w.vs.doc is not None and w.vs.doc.n_events(0) == 32,
        timeout=10000,
    )
    yield w, t
    live.worker.close()


def two_updates(qtbot, w, t) -> None:
    """The process allocates twice; wait until both trace updates are shown."""
    for size in (2 * MiB, 3 * MiB):
        n, u = w.vs.doc.n_events(0), w.live.trace_updates
        t.cmd(f"alloc {size}")
        qtbot.waitUntil(
            lambda n=n, u=u: w.live.trace_updates > u and w.vs.doc.n_events(0) > n, timeout=10000
        )


def wheel(qtbot, plot, steps: int, x_frac: float = 0.5, ctrl: bool = False) -> None:
    """A real mouse-wheel event over a pyqtgraph plot."""
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    vp = plot.viewport()
    pos = QPointF(vp.width() * x_frac, vp.height() * 0.5)
    mods = Qt.KeyboardModifier.ControlModifier if ctrl else Qt.KeyboardModifier.NoModifier
    ev = QWheelEvent(
        pos,
        QPointF(vp.mapToGlobal(pos.toPoint())),
        QPoint(0, 0),
        QPoint(0, 120 * steps),
        Qt.MouseButton.NoButton,
        mods,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(vp, ev)
    qtbot.wait(20)


def x_range(w):
    return tuple(w.timeline.vb.viewRange()[0])


def test_zoom_scroll_sort_and_selection_survive_updates(qtbot, attached):
    from PySide6.QtCore import Qt

    from vramscope.viewer._qt.main_window.table import COL_SIZE
    from vramscope.viewer._qt.segment_map import SORT_SIZE
    from vramscope.viewer.model.core.snapshot import BlockState

    w, t = attached
    # Timeline: zoom in around the middle (not at the latest event).
    wheel(qtbot, w.timeline.plot, 6, x_frac=0.4)
    xa, xb = x_range(w)
    assert xb < w.vs.doc.n_events(0) - 1 and xb - xa < 25
    # Segment map: rows by size, zoom the bytes, scroll down some rows.
    w.map.set_sort(SORT_SIZE)
    wheel(qtbot, w.map.plot, 3, ctrl=True)
    wheel(qtbot, w.map.plot, -1)
    map_range = w.map.vb.viewRange()
    top_row = int(np.floor(map_range[1][0]))
    segs = w.vs.doc.snap.segments
    top_segment = int(segs.address[w.map.layout_data.seg_rows[top_row]])
    # Table: sorted by size, largest first; an allocated block selected; scrolled.
    w.table.view.sortByColumn(COL_SIZE, Qt.SortOrder.DescendingOrder)
    blocks = w.vs.doc.snap.blocks
    live = np.flatnonzero(blocks.state == BlockState.ALLOCATED)
    pick = int(live[np.argmin(blocks.address[live])])  # the oldest live allocation
    w.table.view.selectRow(w.table.model.row_of(pick))
    picked = int(blocks.address[pick])
    assert w.vs.selected_addr == picked
    w.table.view.verticalScrollBar().setValue(3)
    top_addr = w.table.top_block_address()

    # A bigger block than any: a new row at the top of the map sorted by size.
    n, u = w.vs.doc.n_events(0), w.live.trace_updates
    t.cmd(f"alloc {8 * MiB}")
    qtbot.waitUntil(lambda: w.live.trace_updates > u and w.vs.doc.n_events(0) > n, timeout=10000)
    two_updates(qtbot, w, t)

    assert x_range(w) == pytest.approx((xa, xb))
    (mxa, mxb), (mya, myb) = w.map.vb.viewRange()
    assert (mxa, mxb) == pytest.approx(tuple(map_range[0]))
    assert w.map.sort == SORT_SIZE and w.map.by_size.isChecked()
    # The same segment is at the top of the view: one row further down now.
    assert (mya, myb) == pytest.approx((map_range[1][0] + 1, map_range[1][1] + 1))
    segs = w.vs.doc.snap.segments
    assert int(segs.address[w.map.layout_data.seg_rows[int(np.floor(mya))]]) == top_segment
    header = w.table.view.horizontalHeader()
    assert (header.sortIndicatorSection(), header.sortIndicatorOrder()) == (
        COL_SIZE,
        Qt.SortOrder.DescendingOrder,
    )
    sizes = w.vs.doc.snap.blocks.size[w.table.model.rows]
    assert (np.diff(sizes) <= 0).all()
    assert w.table.top_block_address() == top_addr
    # The selection is the same allocation, everywhere.
    blocks = w.vs.doc.snap.blocks
    assert w.vs.selected_addr == picked
    assert blocks.address[w.vs.selected_block] == picked
    assert blocks.address[w.table.current_block()] == picked
    assert w.map.item.selected == w.vs.selected_block
    assert w.stack.block == w.vs.selected_block


def test_following_the_latest_still_follows(qtbot, attached):
    w, t = attached
    # Zoomed in at the right edge: the newest events stay in view, at the same zoom.
    n = w.vs.doc.n_events(0)
    w.timeline.vb.setXRange(n - 11.0, n - 0.5, padding=0)
    two_updates(qtbot, w, t)
    n2 = w.vs.doc.n_events(0)
    assert n2 > n
    xa, xb = x_range(w)
    assert xb == pytest.approx(n2 - 0.5) and xb - xa == pytest.approx(10.5)
    assert w.vs.cursor_k == n2 - 1 == w.timeline.k  # the cursor line is at the latest too
    assert "latest" in w.timeline.cursor_text()
    # The whole trace in view (as at attach): it stays whole as it grows.
    w.timeline.fit()
    two_updates(qtbot, w, t)
    n3 = w.vs.doc.n_events(0)
    xa, xb = x_range(w)
    assert xa <= 0 and xb >= n3 - 1
    # An untouched map keeps its automatic view, laid out again for the new rows.
    assert w.map.view_auto
    shown = w.map.vb.viewRange()
    w.map.home()
    assert w.map.vb.viewRange() == shown


def test_selectors_and_call_tree_survive_updates(qtbot, attached):
    from vramscope.viewer.model.analysis.figures import Selection
    from vramscope.viewer.model.core.snapshot import BlockState

    w, t = attached
    stream = w.selectors.choices[w.stream_combo][1][1]
    w.set_selection(Selection(stream=stream, is_small=False))
    w.tabs.setCurrentWidget(w.calltree)
    root = w.calltree.tree.topLevelItem(0)
    child = root.child(0)
    assert child is not None
    child.setExpanded(False)  # the user folds the default path
    w.calltree.tree.setCurrentItem(child)
    name = child.text(0)
    before = w.calltree.visible_labels()
    # A free gap selected in the map: still free after the updates, so still selected.
    blocks = w.vs.doc.snap.blocks
    gap = int(np.flatnonzero(blocks.state == BlockState.FREE)[0])
    w.select_block(gap, origin="map")
    gap_addr = int(blocks.address[gap])
    two_updates(qtbot, w, t)
    assert (
        w.vs.selected_block >= 0 and w.vs.doc.snap.blocks.address[w.vs.selected_block] == gap_addr
    )
    assert w.map.item.selected == w.vs.selected_block and w.stack.block == w.vs.selected_block
    assert w.vs.selection == Selection(stream=stream, is_small=False)
    assert w.stream_combo.currentIndex() == 1 and w.kind_combo.currentIndex() == 1
    # The folded node stays folded (new nodes may appear beside it: new allocations).
    after = w.calltree.visible_labels()
    assert set(before) <= set(after) and after[0] == before[0]
    item = w.calltree.find_item(name)
    assert item is not None and not item.isExpanded() and item.parent().isExpanded()
    assert w.calltree.tree.currentItem().text(0) == name
    # The node's blocks are still highlighted (a mask of the new document's stacks).
    assert w.vs.node_mask is not None and len(w.vs.node_mask) == len(w.vs.doc.snap.stacks)


def test_header_and_timeline_say_which_instant_they_show(qtbot, attached):
    w, _t = attached
    qtbot.waitUntil(lambda: w.header.source.text().startswith("figures: live"), timeout=5000)
    assert "s ago" in w.header.source.text()
    assert "memory_stats" in w.header.source.toolTip()
    label = w.timeline.plot.getPlotItem().getAxis("bottom").labelText
    assert f"up to event {w.vs.doc.n_events(0) - 1:,}" in label
    # Looking back: the figures are those of the cursor, and the header says so.
    w.set_cursor(3)
    assert w.header.source.text() == "figures: at the cursor, event 3"


def test_live_updates_land_where_a_full_rebuild_would(qtbot, attached):
    """Regression: every trace update goes into one live model (extended, or rebuilt when
    an extension would disagree with the recording) and shows what a full rebuild of
    the same ring shows: events, curves, lifetimes, the layout at a moment."""
    from vramscope.viewer.model.view.document import Document

    w, t = attached
    source = w.live.source
    assert source.builds == 1
    two_updates(qtbot, w, t)
    for _ in range(3):
        t.cmd("step 2")
        n, u = w.vs.doc.n_events(0), w.live.trace_updates
        qtbot.waitUntil(
            lambda n=n, u=u: w.live.trace_updates > u and w.vs.doc.n_events(0) > n, timeout=10000
        )
    assert source.builds + source.extends >= 5
    live_doc = w.vs.doc
    fresh = Document.build(live_doc.snap)
    n = fresh.n_events(0)
    assert live_doc.n_events(0) == n
    rep_live, rep_fresh = live_doc.timeline.replay(0), fresh.timeline.replay(0)
    # The fake allocator records no segment events: its new segments cannot come
    # from the new rows, so the source rebuilds rather than show a drifted extension.
    assert rep_live.inconsistencies == rep_fresh.inconsistencies
    for name in ("action", "addr", "size", "rows"):
        assert np.array_equal(
            np.asarray(getattr(rep_live, name)), np.asarray(getattr(rep_fresh, name))
        )
    for curve in ("reserved", "allocated", "active", "requested"):
        assert np.array_equal(
            np.asarray(live_doc.curves(0)[curve][:n]), np.asarray(fresh.curves(0)[curve][:n])
        ), curve
    iv_live, iv_fresh = live_doc.intervals(0), fresh.intervals(0)
    assert len(iv_live) == len(iv_fresh)
    assert np.array_equal(np.sort(iv_live.addr), np.sort(iv_fresh.addr))
    k = n // 2
    a, b = live_doc.at(0, k).snap.blocks, fresh.at(0, k).snap.blocks
    assert sorted(zip(a.address.tolist(), a.size.tolist(), a.state.tolist())) == sorted(
        zip(b.address.tolist(), b.size.tolist(), b.state.tolist())
    )
