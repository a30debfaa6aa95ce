"""Timeline and time travel: curves, the cursor driving the window, peaks, OOMs,
the stacked allocations, the call tree and the search, through the real loader."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import BIG_XZ, DATA, FRAG
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QColor

from vramscope.viewer.model.analysis.figures import Selection, memory_stats
from vramscope.viewer.model.core import frames as fr
from vramscope.viewer.model.core.snapshot import Action, BlockState
from vramscope.viewer.model.core.units import format_bytes

GPT2 = DATA / "gpt2_oom.pickle"
MiB = 1 << 20


def figures_match(window, stats) -> None:
    from vramscope.viewer._qt.main_window.header import FIGURES, figure_text

    assert window.header.stats == stats
    for key in FIGURES:
        assert window.header.values[key].text() == figure_text(stats, key), key


def at(window, k: int):
    """The snapshot after event k, straight from the model."""
    return window.vs.doc.timeline.snapshot_at(window.vs.cursor_device, k)


def map_matches(window, snap) -> None:
    """The segment map shows exactly the blocks of ``snap``."""
    layout = window.map.layout_data
    assert layout.n_rows == len(snap.segments)
    assert len(layout) == len(snap.blocks)
    assert (
        window.map.doc.snap.blocks.address[layout.blocks].tolist()
        == snap.blocks.address[layout.blocks].tolist()
    )
    assert sorted(window.map.doc.snap.segments.address.tolist()) == sorted(
        snap.segments.address.tolist()
    )


def plot_point(tl, x: float, y: float) -> QPoint:
    return tl.plot.mapFromScene(tl.vb.mapViewToScene(QPointF(x, y)))


# --------------------------------------------------------------------------- build, curves


def test_timeline_built_on_load_and_curves_end_at_the_header(loaded):
    window = loaded(GPT2)
    doc = window.vs.doc
    assert doc.timeline is not None and doc.oom is not None
    rep = doc.timeline.replay(0)
    tl = window.timeline
    assert tl.n == len(rep) == 25903
    assert window.vs.cursor_k == tl.k == len(rep) - 1  # the snapshot as recorded
    assert window.vs.view_doc is doc
    stats = window.header.stats
    assert stats == memory_stats(doc.snap)
    for curve, figure in (
        ("reserved", stats.reserved_bytes),
        ("allocated", stats.allocated_bytes),
        ("active", stats.active_bytes),
        ("requested", stats.requested_bytes),
    ):
        assert int(tl.curves[curve][-1]) == figure, curve
        # the curve item is drawn up to that same final value
        assert tl.curve_items[curve].yData[-1] == figure
    assert "event 25,902 of 25,903" in tl.cursor_text()
    assert "latest (as recorded)" in tl.cursor_text()
    # peaks marked and labelled
    texts = " ".join(tl.peak_label_texts())
    assert f"reserved {format_bytes(int(rep.reserved.max()))}" in texts
    assert f"allocated {format_bytes(int(rep.allocated.max()))}" in texts
    assert len(tl.peak_scatter.data) == 4
    # the OOM marked in red at its event
    ooms = [xs for xs, _c, text, _s in tl.bands_item.lines if text == "OOM"]
    assert len(ooms) == 1 and ooms[0].tolist() == [25902.0]


def test_annotation_bands_and_x_axis_toggle(qtbot, loaded):
    window = loaded(GPT2)
    tl = window.timeline
    names = [b[2] for b in tl.bands_item.bands]
    assert names.count("Optimizer.step") == 8 and names.count("Optimizer.zero_grad") == 8
    x0, x1 = next((b[0], b[1]) for b in tl.bands_item.bands if b[2] == "Optimizer.step")
    assert 0 < x0 < x1 < tl.n
    # x axis: time since the first event
    rep = window.vs.doc.timeline.replay(0)
    qtbot.mouseClick(tl.time_button, Qt.MouseButton.LeftButton)
    assert tl.mode == "time" and tl.x_axis.mode == "time"
    t_end = (rep.time_us[-1] - rep.time_us[0]) / 1e6
    assert tl.cursor.value() == pytest.approx(t_end)
    assert tl.curve_items["reserved"].xData[-1] == pytest.approx(t_end)
    t0 = next((b[0], b[1]) for b in tl.bands_item.bands if b[2] == "Optimizer.step")
    assert 0 < t0[0] < t0[1] < t_end
    assert f"+{t_end * 1e3:.1f} ms" in tl.cursor_text()
    assert tl.x_axis.tickStrings([0.5], 1, 0.1) == ["0.5 s"]
    assert tl.x_axis.tickStrings([0.25], 1, 0.05) == ["250 ms"]
    # the cursor stays on its event in either mode
    window.set_cursor(1000)
    assert tl.cursor.value() == pytest.approx((rep.time_us[1000] - rep.time_us[0]) / 1e6)
    window.xaxis_action.trigger()  # Ctrl+T
    assert tl.mode == "events" and tl.cursor.value() == 1000.0
    assert window.vs.cursor_k == 1000


def test_per_stream_curves(loaded):
    window = loaded(DATA / "cuda_graph_pool.pickle")
    streams = sorted(set(window.vs.doc.timeline.replay(0).stream.tolist()))
    assert len(streams) == 3
    for s in streams:
        window.set_selection(Selection(stream=s))
        assert window.timeline.stream == s
        st = memory_stats(window.vs.doc.snap, Selection(stream=s))
        assert int(window.timeline.curves["reserved"][-1]) == st.reserved_bytes
        assert int(window.timeline.curves["allocated"][-1]) == st.allocated_bytes
        assert int(window.timeline.curves["active"][-1]) == st.active_bytes
        figures_match(window, st)
    window.set_selection(Selection())
    assert window.timeline.stream is None


# --------------------------------------------------------------------------- the cursor


def test_cursor_api_click_and_keys_drive_the_window(qtbot, loaded):
    window = loaded(GPT2)
    tl = window.timeline
    n = tl.n
    # API
    window.set_cursor(12345)
    assert window.vs.cursor_k == tl.k == 12345
    snap = at(window, 12345)
    figures_match(window, memory_stats(snap))
    map_matches(window, snap)
    assert len(window.table.model.rows) == len(snap.blocks)
    assert "event 12,345 of 25,903" in tl.cursor_text()
    assert tl.latest_button.isEnabled()
    # a real click on the timeline, above the curves (no allocation there)
    (xa, xb), (_ya, yb) = tl.vb.viewRange()
    pos = plot_point(tl, xa + (xb - xa) * 0.3, yb * 0.97)
    k = tl.k_of(tl.vb.mapSceneToView(tl.plot.mapToScene(pos)).x())
    assert k != 12345
    qtbot.mouseClick(tl.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    qtbot.waitUntil(lambda: window.vs.cursor_k == k, timeout=3000)
    snap = at(window, k)
    figures_match(window, memory_stats(snap))
    map_matches(window, snap)
    # keys (the click gave the plot the focus)
    tl.plot.setFocus()

    def key(k, expect, mods=Qt.KeyboardModifier.NoModifier):
        qtbot.keyClick(tl.plot, k, mods)
        qtbot.waitUntil(lambda: window.vs.cursor_k == expect, timeout=3000)  # coalesced seek

    key(Qt.Key.Key_Right, k + 1)
    figures_match(window, memory_stats(at(window, k + 1)))
    key(Qt.Key.Key_Left, k + 1 - 100, Qt.KeyboardModifier.ShiftModifier)
    map_matches(window, at(window, k - 99))
    key(Qt.Key.Key_Home, 0)
    figures_match(window, memory_stats(at(window, 0)))
    key(Qt.Key.Key_End, n - 1)
    assert window.vs.view_doc is window.vs.doc
    figures_match(window, memory_stats(window.vs.doc.snap))
    assert not tl.latest_button.isEnabled()
    # dragging the cursor line: the window follows (coalesced per event-loop turn)
    tl.cursor.setValue(5000.0)
    tl.cursor.sigDragged.emit(tl.cursor)
    qtbot.waitUntil(lambda: window.vs.cursor_k == 5000, timeout=3000)
    figures_match(window, memory_stats(at(window, 5000)))
    window.latest_action.trigger()
    assert window.vs.cursor_k == n - 1


def test_selection_follows_the_allocation_across_moments(qtbot, loaded):
    window = loaded(GPT2)
    window.set_cursor(20000)
    blocks = window.vs.view_doc.snap.blocks
    b = int(np.flatnonzero(blocks.state == BlockState.ALLOCATED)[0])
    addr = int(blocks.address[b])
    window.select_block(b, origin="table")
    window.step_cursor(+1)
    b2 = window.vs.selected_block
    if b2 >= 0:  # still live: the same allocation, selected in the map
        assert int(window.vs.view_doc.snap.blocks.address[b2]) == addr
        assert window.map.item.selected == b2


def test_jump_to_peak(qtbot, loaded):
    window = loaded(GPT2)
    rep = window.vs.doc.timeline.replay(0)
    qtbot.mouseClick(window.timeline.peak_button, Qt.MouseButton.LeftButton)
    value, k = rep.peak("allocated")
    assert window.vs.cursor_k == k
    assert window.header.stats.allocated_bytes == value == int(rep.allocated.max())
    assert window.header.values["allocated_bytes"].text() == format_bytes(value)
    figures_match(window, memory_stats(at(window, k)))
    window.peak_reserved_action.trigger()
    value, k = rep.peak("reserved")
    assert window.vs.cursor_k == k
    assert window.header.stats.reserved_bytes == value


def test_jump_between_ooms_of_fragmentation_oom(qtbot, loaded):
    window = loaded(FRAG)
    tl = window.timeline
    rep = window.vs.doc.timeline.replay(0)
    ooms = np.flatnonzero(rep.action == Action.OOM).tolist()
    assert len(ooms) == 2 and tl.oom_button.text() == "OOM (2)"
    window.set_cursor(10)
    qtbot.mouseClick(tl.oom_button, Qt.MouseButton.LeftButton)  # the last one
    assert window.vs.cursor_k == ooms[1]
    last = window.header.stats
    assert last.largest_free_block_bytes == 4 * MiB and last.free_bytes > 4 * MiB
    assert "OOM 2 of 2" in window.header.oom_text() and "fragmentation" in window.header.oom_text()
    assert window.map.item.request_bytes == window.vs.doc.ooms[1].requested_bytes
    qtbot.mouseClick(tl.prev_oom_button, Qt.MouseButton.LeftButton)
    assert window.vs.cursor_k == ooms[0]
    first = window.header.stats
    # the first OOM: every segment full (capacity), judged on the replayed layout
    assert first.free_bytes == 0 and first.largest_free_block_bytes == 0
    assert first.reserved_bytes == first.allocated_bytes
    figures_match(window, memory_stats(at(window, ooms[0])))
    assert "OOM 1 of 2" in window.header.oom_text() and "capacity" in window.header.oom_text()
    assert window.map.item.request_bytes == window.vs.doc.ooms[0].requested_bytes
    assert not tl.prev_oom_button.isEnabled() and tl.next_oom_button.isEnabled()
    # the stack panel names the request that failed at that moment
    oom_stack = int(window.vs.doc.snap.trace.stack[window.vs.doc.ooms[0].event_index])
    views = fr.stack_views(window.vs.doc.snap, oom_stack, window.vs.doc.categories)
    assert window.stack.frame_texts() == [v.short for v in views]
    window.next_oom_action.trigger()
    assert window.vs.cursor_k == ooms[1]
    # away from any OOM the banner still says how the trace ended
    window.set_cursor(100)
    assert window.map.item.request_bytes == 0
    assert "CUDA out of memory at event 1,959" in window.header.oom_text()
    assert window.vs.doc.oom.verdict in window.header.oom_text()


# --------------------------------------------------------------------------- stacked allocations


def test_click_stacked_band_shows_its_stack_and_block(qtbot, loaded):
    window = loaded(GPT2)
    tl = window.timeline
    doc = window.vs.doc
    tl.vb.setXRange(15000, 20000, padding=0)
    tl.refresh_stack()
    lay = tl.layout
    assert 0 < tl.band_count() <= 3000
    iv = doc.intervals(0)
    # a big allocation with a stack, drawn individually
    cands = [int(i) for i in lay.band_interval if iv.stack[i] >= 0 and iv.size[i] >= 16 * MiB]
    i = max(cands, key=lambda c: iv.size[c])
    pos = tl.interval_viewport_pos(i)
    assert pos is not None
    scene = tl.plot.mapToScene(pos)
    p = tl.vb.mapSceneToView(scene)
    assert tl.interval_at(p.x(), p.y()) == i
    tip = tl.interval_tooltip(i)
    assert "allocation" in tip and format_bytes(int(iv.size[i])) in tip
    qtbot.mouseClick(tl.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    qtbot.waitUntil(lambda: window.vs.selected_interval == i, timeout=3000)
    k = window.vs.cursor_k
    assert iv.start[i] <= k < iv.end[i]  # the click moved the cursor onto the allocation
    views = fr.stack_views(doc.snap, int(iv.stack[i]), doc.categories)
    assert window.stack.frame_texts() == [v.short for v in views] and views
    # live at the cursor: its block is selected in the map
    b = window.map.item.selected
    assert b >= 0 and int(window.vs.view_doc.snap.blocks.address[b]) == int(iv.addr[i])
    assert tl.selected_interval == i and not tl.stacked.selected_path.isEmpty()
    # moving on while it lives keeps it selected; after its free, the map lets go
    if iv.end[i] < tl.n:
        window.set_cursor(int(iv.end[i]))
        assert window.map.item.selected == -1
        assert window.stack.frame_texts() == [v.short for v in views]


def test_stacked_layout_is_batched(loaded):
    window = loaded(GPT2)
    tl = window.timeline
    tl.refresh_stack()
    # one image at the view's pixel size, never an item per allocation
    pixels = tl.stacked._pixels
    assert pixels is not None and pixels.shape == (int(tl.vb.height()), int(tl.vb.width()))
    items = tl.plot.getPlotItem().items
    assert len(items) < 20
    assert tl.layout.samples[-1] == tl.n - 1 and len(tl.layout.samples) <= tl.columns()
    # each pixel column is painted up to the active bytes of its sample (+-1 pixel)
    (_, _), (ya, yb) = tl.vb.viewRange()
    h, w = pixels.shape
    active = window.vs.doc.timeline.replay(0).active
    for px in range(0, w, 37):
        x = float(tl.stacked.image_rect.left() + (px + 0.5) * tl.stacked.image_rect.width() / w)
        k = int(tl.layout.samples[tl._column_at(x)])
        filled = int(np.count_nonzero(pixels[:, px] >> 24))
        assert abs(filled - (active[k] - ya) * h / (yb - ya)) <= 1.01, (px, k)


# --------------------------------------------------------------------------- who holds memory


def test_call_tree_at_the_peak_names_the_model(qtbot, loaded):
    window = loaded(GPT2)
    window.jump_to_peak("allocated")
    window.tabs.setCurrentWidget(window.calltree)
    ct = window.calltree
    assert ct.moment() == "cursor"  # an OOM snapshot: the tree follows the cursor
    k = window.vs.cursor_k
    rep = window.vs.doc.timeline.replay(0)
    assert ct.root.bytes == window.header.stats.active_bytes == int(rep.active[k])
    assert "at the cursor" in ct.caption.text()
    assert any("modeling_gpt2.py" in label for label in ct.labels())
    assert any("modeling_gpt2.py" in t for t in ct.visible_labels())  # expanded by default
    assert not any("torch/nn/modules" in label for label in ct.labels())
    # folding off shows torch's frames too, same total
    ct.fold.setChecked(False)
    assert ct.root.bytes == int(rep.active[k])
    assert len(ct.labels()) > 0
    ct.fold.setChecked(True)
    # clicking a node: its blocks highlighted in the map and the timeline, its stack shown
    item = ct.find_item("modeling_gpt2.py")
    assert item is not None
    node = item.data(0, Qt.ItemDataRole.UserRole + 1)
    rect = ct.tree.visualItemRect(item)
    qtbot.mouseClick(ct.tree.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert ct.tree.currentItem() is item
    hl = window.map.item.highlighted_blocks()
    assert len(hl) > 0
    blocks = window.vs.view_doc.snap.blocks
    assert set(blocks.stack[hl].tolist()) <= set(node.stacks)
    assert int(blocks.size[hl].sum()) == node.bytes
    assert window.timeline.stack_mask is not None
    assert any("modeling_gpt2.py" in t for t in window.stack.frame_texts())
    # moving the cursor rebuilds the tree at the new moment
    window.set_cursor(k - 3000)
    assert ct.root.bytes == int(rep.active[k - 3000])


def test_call_tree_defaults_to_the_peak_without_oom(loaded):
    window = loaded(DATA / "resnet50_train.pickle")
    assert window.vs.doc.oom is None
    window.tabs.setCurrentWidget(window.calltree)
    ct = window.calltree
    assert ct.moment() == "peak"
    rep = window.vs.doc.timeline.replay(window.vs.cursor_device)
    _value, k = rep.peak("allocated")
    assert "peak" in ct.caption.text()
    live = window.vs.doc.at(window.vs.cursor_device, k).snap.blocks
    active = (live.state == BlockState.ALLOCATED) | (live.state == BlockState.PENDING_FREE)
    assert ct.root.bytes == int(live.size[active].sum()) == int(rep.active[k])
    assert window.vs.cursor_k == rep.__len__() - 1  # the cursor itself stays at the end


# --------------------------------------------------------------------------- search


def test_search_highlights_map_timeline_and_filters_table(qtbot, loaded):
    window = loaded(GPT2)
    window.set_cursor(20000)
    window.focus_filter()
    assert window.search.hasFocus() or True  # offscreen focus is best effort
    qtbot.keyClicks(window.search, "sdpa_attention")
    qtbot.waitUntil(lambda: window.vs.search_mask is not None, timeout=3000)
    snap = window.vs.view_doc.snap
    match = fr.stacks_matching(snap, "sdpa_attention")
    assert window.vs.search_mask.tolist() == match.tolist()
    hl = window.map.item.highlighted_blocks()
    live = (snap.blocks.state == BlockState.ALLOCATED) | (
        snap.blocks.state == BlockState.PENDING_FREE
    )
    expect = np.flatnonzero(
        live & (snap.blocks.stack >= 0) & match[np.maximum(snap.blocks.stack, 0)]
    )
    assert len(expect) > 0 and sorted(hl.tolist()) == expect.tolist()
    # the table keeps only matching rows
    rows = window.table.model.rows
    assert 0 < len(rows) < len(snap.blocks)
    assert all(match[snap.blocks.stack[r]] for r in rows.tolist())
    # the timeline dims the others: grey pixels plus coloured ones, matches outlined
    window.timeline.refresh_stack()
    argb = np.unique(window.timeline.stacked._pixels)
    colors = {QColor.fromRgba(int(c)).name() for c in argb.tolist() if c >> 24}
    assert "#e0e0e0" in colors and len(colors - {"#e0e0e0", "#bdbdbd"}) >= 1
    assert not window.timeline.stacked.highlight_path.isEmpty()
    # still highlighted at another moment
    window.step_cursor(-50)
    assert len(window.map.item.highlighted_blocks()) > 0
    window.search.clear()
    window.table.apply_filter()
    assert window.vs.search_mask is None and window.map.item.highlight is None


# --------------------------------------------------------------------------- loading, big files


def test_cancel_during_replay(qtbot, window):
    from vramscope.viewer._qt.widgets.loader import LoadThread

    t = LoadThread(os.fspath(GPT2))
    stages = []

    def on_progress(stage, _f):
        stages.append(stage)
        if stage == "replay":
            t.cancel()

    t.progressed.connect(on_progress, Qt.ConnectionType.DirectConnection)
    with qtbot.waitSignal(t.cancelled, timeout=30000):
        t.start()
    t.wait(10000)
    assert "replay" in stages and t.result is None


def test_million_events_stay_fast(qtbot, window, load):
    assert load(window, BIG_XZ, timeout=90000) == "loaded"
    tl = window.timeline
    assert tl.n == 1_000_000
    tl.refresh_stack()
    assert tl.band_count() <= 3000
    assert tl.last_refresh_s < 1.0
    # zoom in: a new level-of-detail layout for the visible range, about a column per pixel
    tl.vb.setXRange(400_000, 420_000, padding=0)
    tl.refresh_stack()
    lo, hi = tl.layout_range
    assert lo <= 400_000 and hi >= 419_999 and hi - lo < 21_000
    assert tl.band_count() <= 3000
    assert len(tl.layout.samples) <= tl.columns()
    assert tl.last_refresh_s < 1.0  # measured ~0.03 s
    # curves decimated to about a point per pixel
    assert len(tl.curve_items["active"].xData) <= 2 * tl.columns() + 2
    # the global peak survives decimation at full view
    tl.fit()
    assert tl.curve_items["allocated"].yData.max() == tl.curves["allocated"].max()
    # seeking into the middle gives the replayed layout there
    window.set_cursor(500_000)
    figures_match(window, memory_stats(at(window, 500_000)))
