"""The main window against real snapshots, through the real loader thread."""

from __future__ import annotations

import argparse
import os

import numpy as np
import pytest
from conftest import BIG_XZ, DATA, FRAG, synthetic_snapshot
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QGuiApplication, QImage

from vramscope.viewer.model.analysis.figures import Selection, memory_stats
from vramscope.viewer.model.analysis.oom import last_oom
from vramscope.viewer.model.core import frames as fr
from vramscope.viewer.model.core.snapshot import BlockState
from vramscope.viewer.model.io.load import load_snapshot


def figures_match(window, stats) -> None:
    from vramscope.viewer._qt.main_window.header import FIGURES, figure_text

    assert window.header.stats == stats
    for key in FIGURES:
        assert window.header.values[key].text() == figure_text(stats, key), key


# --------------------------------------------------------------------------- open, header, banner


def test_empty_window_shows_placeholder(window):
    assert window.pages.currentIndex() == 0
    assert window.vs.doc is None
    assert not window.export_png_action.isEnabled()
    texts = [w.text() for w in window.placeholder.findChildren(type(window.file_label))]
    assert any("Open a snapshot (Ctrl+O) or drop a file here" in t for t in texts)


def test_open_fragmentation_header_and_banner(loaded):
    window = loaded(FRAG)
    snap = load_snapshot(FRAG)
    assert window.pages.currentIndex() == 1
    figures_match(window, memory_stats(snap))
    # The figures equal the allocator's own counters captured at the same instant.
    counters = snap.sidecar["memory_stats"]
    assert window.header.stats.reserved_bytes == counters["reserved_bytes.all.current"]
    assert window.header.stats.allocated_bytes == counters["allocated_bytes.all.current"]
    verdict = last_oom(snap).verdict
    assert verdict.startswith("fragmentation:")
    assert verdict in window.header.oom_text()
    assert window.header.banner.isVisible()
    assert snap.sidecar["oom_message"] in window.header.banner.toolTip()
    assert "NVIDIA H200" in window.header.facts.text()
    assert window.file_label.text() == "fragmentation_oom.pickle"
    assert window.format_label.text() == "pickle"
    assert window.settings_label.text() == "default allocator settings"
    assert window.header.values["reserved_bytes"].toolTip().count("reserved_bytes.all.current") == 1


def test_no_banner_without_oom(loaded):
    window = loaded(DATA / "resnet50_train.pickle")
    assert window.header.oom_text() == ""
    assert not window.header.banner.isVisible()
    figures_match(window, memory_stats(load_snapshot(DATA / "resnet50_train.pickle")))
    assert window.map.item.request_bytes == 0


def test_allocator_settings_in_status_bar(loaded):
    window = loaded(DATA / "whatif_expandable.pickle")
    assert window.settings_label.text() == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


# ---------------------------------------------------------------------- map <-> stack <-> table


def _visible_wide_block(window, state=BlockState.ALLOCATED) -> int:
    """An allocated block with a stack whose bar is wide on screen and not under a label."""
    layout = window.map.layout_data
    snap = window.vs.doc.snap
    (_, _), (ya, yb) = window.map.vb.viewRange()
    cand = np.flatnonzero(
        (layout.state == state) & (layout.row >= max(ya, 0) + 1) & (layout.row < yb - 1)
    )
    cand = cand[snap.blocks.stack[layout.blocks[cand]] >= 0]
    assert len(cand)
    best = cand[np.argmax(layout.x1[cand] - layout.x0[cand])]
    return int(layout.blocks[best])


def test_click_block_in_map_shows_its_stack(qtbot, loaded):
    window = loaded(DATA / "gpt2_oom.pickle")
    qtbot.wait(50)
    b = _visible_wide_block(window)
    pos = window.map.block_viewport_pos(b)
    assert window.map.plot.viewport().rect().contains(pos)
    with qtbot.waitSignal(window.map.blockClicked, timeout=3000) as blocker:
        qtbot.mouseClick(window.map.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert blocker.args == [b]
    assert window.vs.selected_block == b
    assert window.map.item.selected == b
    snap = window.vs.doc.snap
    expected = fr.stack_views(snap, int(snap.blocks.stack[b]), window.vs.doc.categories)
    assert expected
    assert window.stack.frame_texts() == [v.short for v in expected]
    assert window.stack.text() == fr.format_stack(expected)
    assert f"0x{int(snap.blocks.address[b]):x}" in window.stack.facts.text()
    # ... and the table follows.
    assert window.table.current_block() == b


def test_click_empty_space_keeps_selection(qtbot, loaded):
    window = loaded(FRAG)
    window.select_block(3)
    pos = window.map.plot.mapFromScene(window.map.vb.mapViewToScene(QPointF(0, -3)))
    qtbot.mouseClick(window.map.plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert window.vs.selected_block == 3


def test_hover_tooltip_text(loaded):
    window = loaded(DATA / "cuda_graph_pool.pickle")
    snap = window.vs.doc.snap
    b = int(np.flatnonzero(snap.blocks.state == BlockState.ALLOCATED)[0])
    tip = window.map.block_tooltip(b)
    assert f"0x{int(snap.blocks.address[b]):x}" in tip
    assert "allocated" in tip and "segment" in tip and "stream" in tip and "pool" in tip


def test_table_row_selects_block_in_map_and_stack(qtbot, loaded):
    from vramscope.viewer._qt.segment_map import block_rect

    window = loaded(DATA / "gpt2_oom.pickle")
    view = window.table.view
    view.selectRow(7)
    b = window.table.model.block_at(7)
    assert window.vs.selected_block == b
    assert window.map.item.selected == b
    snap = window.vs.doc.snap
    expected = fr.stack_views(snap, int(snap.blocks.stack[b]), window.vs.doc.categories)
    assert window.stack.frame_texts() == [v.short for v in expected]
    # The map scrolled so that the block is in view.
    rect = block_rect(window.map.layout_data, b)
    (xa, xb), (ya, yb) = window.map.vb.viewRange()
    assert xa <= rect.center().x() <= xb and ya <= rect.center().y() <= yb


def test_map_selection_selects_table_row(loaded):
    window = loaded(FRAG)
    rows = window.table.model.rows
    b = int(rows[len(rows) // 2])
    window.map.blockClicked.emit(b)
    assert window.table.current_block() == b
    idx = window.table.view.selectionModel().selectedRows()
    assert [window.table.model.block_at(i.row()) for i in idx] == [b]


# --------------------------------------------------------------------------- table


def test_table_sort_by_size_largest_first(qtbot, loaded):
    from vramscope.viewer._qt.main_window.table import COL_SIZE

    window = loaded(DATA / "gpt2_oom.pickle")
    model = window.table.model
    snap = window.vs.doc.snap
    header = window.table.view.horizontalHeader()
    # Click the header (ascending), then again (descending).
    x = header.sectionViewportPosition(COL_SIZE) + header.sectionSize(COL_SIZE) // 2
    pos = QPoint(x, header.height() // 2)
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    sizes = snap.blocks.size[model.rows]
    first_order = header.sortIndicatorOrder()
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    if header.sortIndicatorOrder() != Qt.SortOrder.DescendingOrder:
        assert first_order == Qt.SortOrder.DescendingOrder
        qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert model.sort_column == COL_SIZE
    sizes = snap.blocks.size[model.rows]
    assert sizes[0] == snap.blocks.size.max()
    assert np.all(np.diff(sizes) <= 0)
    assert model.index(0, COL_SIZE).data() == fr_bytes(int(sizes[0]))
    # Numeric, not string order: "96.00 MiB" after "128.00 MiB" would be wrong.
    window.table.view.sortByColumn(COL_SIZE, Qt.SortOrder.AscendingOrder)
    assert np.all(np.diff(snap.blocks.size[model.rows]) >= 0)


def fr_bytes(n: int) -> str:
    from vramscope.viewer.model.core.units import format_bytes

    return format_bytes(n)


def test_table_filter_by_stack_text(qtbot, loaded):
    window = loaded(DATA / "gpt2_oom.pickle")
    doc = window.vs.doc
    snap = doc.snap
    total = window.table.model.rowCount()
    assert total == len(snap.blocks)
    # A function name of some, not all, stacks.
    needle = None
    for fid in np.unique(doc.top_frame[doc.top_frame >= 0]).tolist():
        name = snap.frames.name_of(fid)
        m = fr.stacks_matching(snap, name)
        stacks = snap.blocks.stack
        n = int(np.count_nonzero((stacks >= 0) & m[np.maximum(stacks, 0)]))
        if 0 < n < total:
            needle, expected_n = name, n
            break
    assert needle
    qtbot.keyClicks(window.table.filter, needle)
    qtbot.waitUntil(lambda: window.table.model.rowCount() == expected_n, timeout=3000)
    match = fr.stacks_matching(snap, needle)
    rows = window.table.model.rows
    assert np.all(match[snap.blocks.stack[rows]])
    assert window.table.count.text().startswith(f"{expected_n:,} / {total:,} blocks")
    window.table.filter.clear()
    qtbot.waitUntil(lambda: window.table.model.rowCount() == total, timeout=3000)


def test_table_model_is_lazy_over_arrays(loaded):
    window = loaded(FRAG)
    model = window.table.model
    assert isinstance(model.rows, np.ndarray)
    assert model.rowCount() == len(model.rows)


# --------------------------------------------------------------------------- selectors


def test_selectors_filter_header_map_and_table(qtbot, loaded):
    window = loaded(DATA / "cuda_graph_pool.pickle")
    snap = window.vs.doc.snap
    private = snap.pools.index((1, 0))
    combo = window.pool_combo
    labels = [combo.itemText(i) for i in range(combo.count())]
    assert labels[0] == "All pools"
    assert "private pool (1, 0)" in labels and "pool (0, 0)" in labels
    combo.setCurrentIndex(window.combo_index(combo, private))
    sel = Selection(pool=private)
    figures_match(window, memory_stats(snap, sel))
    n_segs = int(sel.segment_mask(snap).sum())
    assert window.map.layout_data.n_rows == n_segs
    assert window.table.model.rowCount() == int(sel.segment_mask(snap)[snap.blocks.segment].sum())
    # Streams: hex labels, and the header follows.
    streams = window.stream_combo
    assert streams.itemText(0) == "All streams"
    assert any(streams.itemText(i).startswith("stream 0x") for i in range(streams.count()))
    combo.setCurrentIndex(0)
    s = int(max(set(snap.segments.stream.tolist())))
    streams.setCurrentIndex(window.combo_index(streams, s))
    figures_match(window, memory_stats(snap, Selection(stream=s)))
    assert window.device_combo.itemText(1) == "Device 0"


def test_small_large_selector(loaded):
    window = loaded(DATA / "small_pool_mixed.pickle")
    window.set_selection(Selection(is_small=True))
    snap = window.vs.doc.snap
    figures_match(window, memory_stats(snap, Selection(is_small=True)))
    assert window.kind_combo.currentText() == "Small segments"


# --------------------------------------------------------------------------- loading


def wait_for_progress(qtbot, window) -> None:
    """Until the window shows the load's first progress (a stage's words in its bar).

    The window's own handler is watched, not the loader's ``progressed``: a blocker made
    for a signal that a worker thread emits many times can be freed while more of its
    queued calls are pending, and PySide then calls into the freed object (a crash).
    """
    qtbot.waitUntil(lambda: not window.progress.format().startswith("Opening"), timeout=10000)


def test_cancel_big_load_keeps_previous_snapshot(qtbot, loaded, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_NO_CACHE", "1")  # cancel during the real parse
    window = loaded(FRAG)
    before = window.vs.doc
    with qtbot.waitSignal(window.loadFinished, timeout=30000) as blocker:
        thread = window.open_file(BIG_XZ)
        wait_for_progress(qtbot, window)
        assert window.progress.isVisible() and window.cancel_button.isVisible()
        qtbot.mouseClick(window.cancel_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["cancelled"]
    assert window.statusBar().currentMessage() == "Load cancelled"
    assert window.vs.doc is before
    assert window.header.oom_text()
    assert not window.progress.isVisible()
    from shiboken6 import isValid

    # (a finished, superseded loader is deleted later by the window: either is fine)
    qtbot.waitUntil(lambda: not isValid(thread) or thread.isFinished(), timeout=10000)
    assert thread.result is None


def test_cancel_first_load_leaves_empty_state(qtbot, window, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_NO_CACHE", "1")
    with qtbot.waitSignal(window.loadFinished, timeout=30000) as blocker:
        window.open_file(BIG_XZ)
        wait_for_progress(qtbot, window)
        window.cancel_load()
    assert blocker.args == ["cancelled"]
    assert window.vs.doc is None and window.pages.currentIndex() == 0


def test_a_replaced_document_is_collected_the_first_load_is_not(window, load, qtbot, monkeypatch):
    """gc.collect() (~30 ms) runs when a finished load may leave garbage behind (here: the
    document it replaced), not on the way to the first window."""
    import gc

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    assert load(window, FRAG) == "loaded"
    qtbot.waitUntil(lambda: not window.loading.old_loaders)  # the thread has finished
    assert calls == []
    assert load(window, DATA / "side_stream_pending.pickle") == "loaded"
    qtbot.waitUntil(lambda: not window.loading.old_loaders)
    assert len(calls) == 1


def test_bad_file_shows_error(tmp_path, window, load):
    bad = tmp_path / "garbage.pickle"
    bad.write_bytes(b"this is not a snapshot at all")
    assert load(window, bad) == "failed"
    assert window.last_error.startswith(os.fspath(bad) + ": ")
    assert "\n" not in window.last_error
    assert window.error_box is not None and window.error_box.isVisible()
    assert window.error_box.text() in window.last_error
    window.error_box.close()
    assert window.vs.doc is None


def test_progress_reaches_the_end(qtbot, window):
    values = []
    with qtbot.waitSignal(window.loadFinished, timeout=30000):
        t = window.open_file(DATA / "gpt2_oom.pickle")
        t.progressed.connect(
            lambda stage, f: values.append((stage, f)), Qt.ConnectionType.DirectConnection
        )
    assert values and values[-1][1] == pytest.approx(1.0)
    assert {s for s, _ in values} <= {"read", "parse", "columns", "replay"}
    assert "replay" in {s for s, _ in values}
    fractions = [f for _, f in values]
    assert fractions == sorted(fractions)  # the replay continues the bar, never restarts it


def test_drop_file_opens_it(qtbot, window):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(os.fspath(FRAG))])
    ev = QDropEvent(
        QPointF(300, 300),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    with qtbot.waitSignal(window.loadFinished, timeout=30000) as blocker:
        window.dropEvent(ev)
    assert blocker.args == ["loaded"]
    assert window.vs.doc.snap.path == os.fspath(FRAG)


# --------------------------------------------------------------------------- screenshot command


def test_screenshot_writes_1440x900_png(tmp_path, qapp):
    from vramscope.viewer.commands import gui

    out = tmp_path / "shot.png"
    code = gui.main(argparse.Namespace(file=os.fspath(FRAG), screenshot=os.fspath(out)))
    assert code == 0
    img = QImage(os.fspath(out))
    assert not img.isNull()
    assert (img.width(), img.height()) == (1440, 900)


def test_screenshot_shows_the_stacked_allocations(tmp_path, qapp, monkeypatch):
    """The PNG is the complete window: the timeline's stacked allocations too, not only
    its curves.  They are built for the final size before the one grab, whatever the
    debounce of view changes (here a minute: a screenshot that waited for the timer, or
    raced it, would have none)."""
    from PySide6.QtGui import QColor

    from vramscope.viewer._qt.timeline import constants, panel
    from vramscope.viewer.commands import gui

    monkeypatch.setattr(panel, "DEBOUNCE_MS", 60_000)
    out = tmp_path / "shot.png"
    code = gui.main(
        argparse.Namespace(
            file=os.fspath(DATA / "side_stream_pending.pickle"), screenshot=os.fspath(out)
        )
    )
    assert code == 0
    img = QImage(os.fspath(out)).convertToFormat(QImage.Format.Format_RGB32)
    rgb = np.frombuffer(img.constBits(), np.uint32, img.width() * img.height()) & 0xFFFFFF
    bands = np.array([QColor(c).rgb() & 0xFFFFFF for c in constants.BAND_COLORS], np.uint32)
    # Band colours appear nowhere else in the window; a stacked timeline fills ~10 % of it.
    assert np.isin(rgb, bands).sum() > 0.02 * rgb.size


def test_screenshot_leaves_the_garbage_collector_as_it_found_it(tmp_path, qapp):
    """The GUI command starts with the cyclic GC off (start-up garbage is negligible);
    it is back on once the window is up, and stays off for a caller that had it off."""
    import gc

    from vramscope.viewer.commands import gui

    seen = []
    for enabled in (True, False):
        gc.enable() if enabled else gc.disable()
        try:
            args = argparse.Namespace(
                file=os.fspath(FRAG), screenshot=os.fspath(tmp_path / "s.png")
            )
            assert gui.main(args) == 0
            seen.append(gc.isenabled())
        finally:
            gc.enable()
    assert seen == [True, False]


def test_screenshot_bad_file_exit_2(tmp_path, qapp, capsys):
    from vramscope.viewer.commands import gui

    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04garbage")
    out = tmp_path / "shot.png"
    code = gui.main(argparse.Namespace(file=os.fspath(bad), screenshot=os.fspath(out)))
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vramscope: error: {bad}: ")
    assert len(err.splitlines()) == 1
    assert not out.exists()


def test_screenshot_missing_file_exit_2(tmp_path, qapp, capsys):
    from vramscope.viewer.commands import gui

    code = gui.main(
        argparse.Namespace(
            file=os.fspath(tmp_path / "nope.pickle"), screenshot=os.fspath(tmp_path / "o.png")
        )
    )
    assert code == 2
    assert capsys.readouterr().err.startswith("vramscope: error: ")


# --------------------------------------------------------------------------- settings, export


def test_recent_files_remembered_across_windows(make_window, load, isolated_settings):
    first = make_window()
    assert load(first, FRAG) == "loaded"
    assert load(first, DATA / "resnet50_train.pickle") == "loaded"
    first.close()
    second = make_window()
    second.loading.fill_recent_menu()
    data = [a.data() for a in second.recent_menu.actions() if a.data()]
    assert data == [
        os.fspath((DATA / "resnet50_train.pickle").resolve()),
        os.fspath(FRAG.resolve()),
    ]
    assert isolated_settings.exists()
    clear = next(a for a in second.recent_menu.actions() if a.text() == "Clear")
    clear.trigger()
    assert [a.data() for a in second.recent_menu.actions() if a.data()] == []


def test_window_geometry_restored(make_window):
    first = make_window()
    first.main_split.setSizes([200, 300, 300])
    sizes = first.main_split.sizes()
    first.close()
    second = make_window()
    # (three panes rescaled to the same height: rounding may move a pixel)
    assert len(second.main_split.sizes()) == 3
    assert all(abs(a - b) <= 2 for a, b in zip(second.main_split.sizes(), sizes))


def test_screenshot_mode_does_not_touch_settings(make_window, load, isolated_settings):
    w = make_window(persist=False)
    assert load(w, FRAG) == "loaded"
    w.close()
    assert not isolated_settings.exists()


def test_export_png_and_svg(tmp_path, loaded):
    window = loaded(FRAG)
    png, svg = tmp_path / "map.png", tmp_path / "map.svg"
    assert window.export_map(os.fspath(png))
    assert window.export_map(os.fspath(svg))
    img = QImage(os.fspath(png))
    assert not img.isNull() and img.width() > 100
    text = svg.read_text()
    assert "<svg" in text and len(text) > 1000
    window.map.copy_image()
    assert not QGuiApplication.clipboard().image().isNull()


def test_about_mentions_versions():
    from vramscope.viewer._qt.main_window import about_text

    text = about_text()
    for name in ("vramscope", "Qt", "PySide6", "pyqtgraph", "numpy"):
        assert name in text


# --------------------------------------------------------------------------- stack panel


def test_stack_toggles_and_copy(loaded):
    window = loaded(DATA / "gpt2_oom.pickle")
    snap, doc = window.vs.doc.snap, window.vs.doc
    b = int(
        np.flatnonzero((snap.blocks.state == BlockState.ALLOCATED) & (snap.blocks.stack >= 0))[0]
    )
    window.select_block(b)
    stack = int(snap.blocks.stack[b])
    user_only = fr.stack_views(snap, stack, doc.categories)
    window.stack.show_torch.setChecked(True)
    window.stack.show_cpp.setChecked(True)
    both = fr.stack_views(snap, stack, doc.categories, show_torch=True, show_cpp=True)
    assert window.stack.frame_texts() == [v.short for v in both]
    assert len(both) >= len(user_only)
    window.copy_stack_action.trigger()
    assert QGuiApplication.clipboard().text() == fr.format_stack(both)
    window.stack.show_torch.setChecked(False)
    window.stack.show_cpp.setChecked(False)
    assert window.stack.frame_texts() == [v.short for v in user_only]


def test_stack_source_preview(loaded):
    window = loaded(FRAG)
    here = fr.FrameView(
        frame_id=0, filename=os.path.abspath(__file__), line=5, name="x", category=fr.CAT_USER
    )
    assert window.stack.show_source(here)
    text = window.stack.preview.toPlainText()
    assert "➤    5" in text and "from __future__ import annotations" in text
    gone = fr.FrameView(0, "/nonexistent/train.py", 3, "f", fr.CAT_USER)
    assert not window.stack.show_source(gone)


# --------------------------------------------------------------------------- scale


def test_100k_blocks_stay_responsive(qtbot, window):
    """100k blocks: shown, sorted, zoomed (the map from a coarser level of detail),
    filtered and selected through the real widgets (how fast: `make bench`)."""
    from vramscope.viewer._qt.main_window.table import COL_SIZE
    from vramscope.viewer.model.view.document import Document

    snap = synthetic_snapshot()
    assert len(snap.blocks) == 100_000
    window.show_document(Document.build(snap))
    qtbot.wait(10)
    figures_match(window, memory_stats(snap))
    assert window.table.model.rowCount() == 100_000
    window.table.view.sortByColumn(COL_SIZE, Qt.SortOrder.DescendingOrder)
    window.table.view.scrollToBottom()
    qtbot.wait(10)
    assert snap.blocks.size[window.table.model.rows[0]] == snap.blocks.size.max()
    window.map.fit()
    for _ in range(5):
        window.map.vb.scaleBy((0.7, 1.0))
        window.map.plot.viewport().repaint()
    assert len(window.map.item.lod) < len(snap.blocks)
    window.table.filter.setText("model.py")
    window.table.apply_filter()
    stacks = snap.blocks.stack
    assert window.table.model.rowCount() == int(np.count_nonzero(stacks == 1))
    window.table.view.selectRow(3)
    b = window.table.model.block_at(3)
    assert window.map.item.selected == b and window.stack.block == b


def test_hover_shows_block_under_cursor(qtbot, loaded):
    window = loaded(DATA / "gpt2_oom.pickle")
    qtbot.wait(50)
    b = _visible_wide_block(window)
    pos = window.map.block_viewport_pos(b)
    qtbot.mouseMove(window.map.plot.viewport(), pos)
    qtbot.waitUntil(lambda: window.map._hover == b, timeout=3000)


def test_follows_application_palette(qtbot, qapp, loaded):
    from PySide6.QtGui import QColor, QPalette

    window = loaded(FRAG)
    old = qapp.palette()
    dark = QPalette(old)
    dark.setColor(QPalette.ColorRole.Window, QColor("#202124"))
    dark.setColor(QPalette.ColorRole.Base, QColor("#17181a"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e8eaed"))
    try:
        qapp.setPalette(dark)
        qtbot.waitUntil(
            lambda: window.map.plot.backgroundBrush().color() == QColor("#17181a"), timeout=3000
        )
    finally:
        qapp.setPalette(old)
    base = old.color(QPalette.ColorRole.Base)
    qtbot.waitUntil(lambda: window.map.plot.backgroundBrush().color() == base, timeout=3000)


def test_fits_a_1366x768_screen(loaded):
    window = loaded(DATA / "gpt2_oom.pickle")
    hint = window.minimumSizeHint()
    assert hint.width() <= 1366 and hint.height() <= 768


def test_stack_panel_starts_on_the_failed_request(loaded):
    """With nothing selected, an OOM snapshot shows where the failing request came from."""
    window = loaded(FRAG)
    snap, doc = window.vs.doc.snap, window.vs.doc
    oom = last_oom(snap)
    stack = int(snap.trace.stack[oom.event_index])
    expected = [v.short for v in fr.stack_views(snap, stack, doc.categories)]
    assert expected and window.stack.frame_texts() == expected
    assert "ran out of memory" in window.stack.facts.text()
    window.select_block(0)
    assert "ran out of memory" not in window.stack.facts.text()


def test_stack_panel_empty_without_oom(loaded):
    window = loaded(DATA / "resnet50_train.pickle")
    assert window.stack.frame_texts() == []
    assert window.stack.facts.text().startswith("Click a block")
