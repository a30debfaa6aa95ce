"""What the memory is, in the main window: the header's split at the cursor,
the timeline coloured by category, iteration/phase bands, the Blocks table and the
segment map by category, and the Leaks view that highlights the blocks - on real
recordings whose program wrote the truth beside them (tests/data/truth)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from vramscope.viewer.model.categories import CATEGORY_NAMES, MemoryBreakdown

TRUTH = Path(__file__).resolve().parents[1] / "data" / "truth"
BF16 = TRUTH / "gpt2_adamw_bf16.pickle.xz"
LEAK = TRUTH / "gpt2_leak.pickle.xz"
CUDA_GRAPHS = TRUTH.parent / "zoo" / "cmp_ro_encoder_adamw_fp32_b8.pickle.xz"


def truth(path: Path) -> dict:
    return json.loads(path.with_name(path.name.replace(".pickle.xz", ".truth.json")).read_text())


def opened(qtbot, loaded, path):
    """The window with ``path`` open and its breakdown built (the worker thread)."""
    w = loaded(path)
    qtbot.waitUntil(lambda: w.categories.bd is not None, timeout=30000)
    return w


def own_breakdown(w) -> MemoryBreakdown:
    """The test's own breakdown of the window's document (not the window's object)."""
    doc = w.vs.doc
    return MemoryBreakdown.build(doc.snap, doc.timeline, w.vs.cursor_device)


def test_header_shows_the_split_at_the_cursor(qtbot, loaded):
    w = opened(qtbot, loaded, BF16)
    bd = own_breakdown(w)
    hs = w.categories_wiring.header_split
    assert hs.isVisible()
    for k in (int(np.argmax(bd.requested)), bd.n_events // 3, bd.n_events - 1):
        w.set_cursor(k)
        split = bd.split_at(k)
        assert hs.split == split
        assert sum(hs.split.values()) == bd.requested[k]
        total = sum(split.values())
        name = max(split, key=split.get)  # the largest part, in bytes and %
        assert f"{split[name] / total:.0%}" in hs.text.text()
    assert hs.bar.caption == f"after event {bd.n_events - 1}"


def test_header_names_what_cuda_graphs_hold_beside_the_split(qtbot, loaded):
    """reduce-overhead: at the end the backward graph's replays hold the gradients where
    the allocator counts free; the header names them beside the split (the split itself
    still adds up to the allocated bytes), in the words summary uses."""
    from vramscope.viewer.model.categories.wording import held_words

    w = opened(qtbot, loaded, CUDA_GRAPHS)
    bd = own_breakdown(w)
    hs = w.categories_wiring.header_split
    end = bd.n_events - 1
    w.set_cursor(end)
    held = bd.graph_held_at(end)
    assert set(held) == {"gradient"}
    assert sum(hs.split.values()) == bd.requested[end]
    assert held_words(held) in hs.text.text()
    assert "CUDA graph pools" in hs.text.toolTip()
    k = int(np.argmax(bd.requested))  # inside the recording iteration: nothing beside
    w.set_cursor(k)
    assert not bd.graph_held_at(k) and "CUDA graph" not in hs.text.text()


def test_colour_by_category_recolours_the_stacked_bands(qtbot, loaded, make_window, load):
    w = opened(qtbot, loaded, BF16)
    tl = w.timeline
    tl.flush()
    site = tl.band_rgba.copy()
    assert len(site) == tl.band_count() > 0
    action = w.categories_wiring.color_action
    assert action.shortcut().toString() == "Ctrl+Shift+K"
    action.trigger()  # View > Colour by category
    assert w.categories.color_mode == "category"
    bd = w.categories.bd
    want = np.array(
        [
            QColor(c).rgba()
            for c in ("#1f77b4", "#9467bd", "#2ca02c", "#ff7f0e", "#bcbd22", "#17becf", "#9e9e9e")
        ],
        np.uint32,
    )
    ids = tl.layout_ids
    assert (tl.band_rgba == want[bd.category[ids]]).all()
    assert not (tl.band_rgba == site).all()
    assert "optimizer state" in tl.legend.text()
    # The segment map too: one path per category of the live blocks.
    drawn = w.categories_wiring.overlay.drawn_categories()
    assert CATEGORY_NAMES.index("parameter") in drawn and len(drawn) >= 3
    # Remembered: a new window starts coloured by category.
    action.trigger()
    assert w.categories.color_mode == "site"
    assert (tl.band_rgba == site).all()
    action.trigger()
    w.close()
    w2 = make_window()
    assert w2.categories.color_mode == "category"
    assert w2.categories_wiring.color_action.isChecked()


def test_category_filter_keeps_only_that_category_in_the_table(qtbot, loaded):
    w = opened(qtbot, loaded, BF16)
    bd = w.categories.bd
    w.set_cursor(int(np.argmax(bd.requested)))
    before = w.table.model.rowCount()
    c = CATEGORY_NAMES.index("parameter")
    w.categories_wiring.filter_actions[c].trigger()
    rows = w.table.model.rows
    addrs = w.vs.view_doc.snap.blocks.address
    cats = bd.categories_of_addresses(w.vs.cursor_k, addrs[rows])
    assert 0 < len(rows) < before
    assert (cats == c).all()
    # Every parameter block of the moment is there.
    all_cats = bd.categories_of_addresses(w.vs.cursor_k, addrs[w.table.all_rows])
    assert len(rows) == int((all_cats == c).sum())
    # The map veils the others; their stacks are highlighted.
    assert w.categories_wiring.overlay.keep is not None
    assert w.vs.highlight_mask() is not None
    w.categories_wiring.filter_actions[None].trigger()
    assert w.table.model.rowCount() == before
    assert w.vs.highlight_mask() is None


def test_phase_bands_are_iterations_times_phases(qtbot, loaded):
    w = opened(qtbot, loaded, BF16)
    bd = w.categories.bd
    n_iter = truth(BF16)["iterations"]
    assert len(bd.iterations) == n_iter
    bands = w.categories_wiring.phases.bands
    assert len(bands) == n_iter * 3
    # Each band is inside its iteration, in forward, backward, optimizer order.
    spans = w.categories.spans
    for it in bd.iterations:
        mine = [s for s in spans if s.iteration == it.index]
        assert [s.phase for s in mine] == ["forward", "backward", "optimizer"]
        assert all(it.start <= s.start <= s.end <= it.end for s in mine)
        assert mine[0].end < mine[1].start and mine[1].end < mine[2].start
    w.categories_wiring.phases_action.trigger()  # View > Iteration phases: off
    assert not w.categories_wiring.phases.item.isVisible()


def test_leaks_view_names_the_planted_line_and_highlights_its_blocks(qtbot, loaded):
    w = opened(qtbot, loaded, LEAK)
    t = truth(LEAK)["leak"]
    leaks = w.categories_wiring.panel.leaks
    assert w.tabs.tabText(w.categories_wiring.tab_index) == "What it is (1 leak)"
    w.categories_wiring.tab_action.trigger()  # View > What the memory is
    assert leaks.isVisible()
    assert leaks.table.rowCount() >= 1
    assert leaks.table.item(0, 0).text() == f"{Path(t['file']).name}:{t['line']}"
    assert w.vs.highlight_mask() is None  # opening highlights nothing by itself
    leaks.table.clearSelection()
    rect = leaks.table.visualItemRect(leaks.table.item(0, 1))
    qtbot.mouseClick(leaks.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: w.vs.highlight_mask() is not None)
    # The map highlights the blocks the program itself says it kept (cursor at the end).
    kept = {int(a) for a, _ in t["kept_blocks"]}
    blocks = w.map.item.highlighted_blocks()
    addrs = set(w.vs.view_doc.snap.blocks.address[blocks].tolist())
    assert kept <= addrs
    assert "keeps" in w.stack.custom[0] if w.stack.custom else False


@pytest.mark.parametrize("path", [BF16])
def test_opening_another_file_drops_the_old_breakdown(qtbot, loaded, load, path):
    w = opened(qtbot, loaded, LEAK)
    old = w.categories.bd
    assert load(w, path) == "loaded"
    qtbot.waitUntil(
        lambda: w.categories.bd is not None and w.categories.bd is not old, timeout=30000
    )
    assert w.categories.bd.n_events == w.vs.doc.n_events(w.vs.cursor_device)


def test_clicking_a_part_of_the_header_split_highlights_that_category(qtbot, loaded):
    w = opened(qtbot, loaded, BF16)
    bd = w.categories.bd
    w.set_cursor(int(np.argmax(bd.requested)))
    bar = w.categories_wiring.header_split.bar
    qtbot.waitUntil(lambda: bar.isVisible() and bar.width() > 0)
    c = CATEGORY_NAMES.index("optimizer_state")
    x0, x1 = next((a, b) for name, a, b in bar.parts() if name == "optimizer_state")
    from PySide6.QtCore import QPoint

    qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=QPoint(int((x0 + x1) / 2), 5))
    mask = w.vs.highlight_mask()
    assert mask is not None
    blocks = w.map.item.highlighted_blocks()
    cats = bd.categories_of_addresses(w.vs.cursor_k, w.vs.view_doc.snap.blocks.address[blocks])
    assert len(blocks) and (cats == c).mean() > 0.9  # (a stack may make two categories)
    qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=QPoint(int((x0 + x1) / 2), 5))
    assert w.vs.highlight_mask() is None


def test_a_blocks_tooltip_says_what_it_is(qtbot, loaded):
    w = opened(qtbot, loaded, BF16)
    bd = w.categories.bd
    w.set_cursor(int(np.argmax(bd.requested)))
    blocks = w.vs.view_doc.snap.blocks
    cats = bd.categories_of_addresses(w.vs.cursor_k, blocks.address)
    b = int(np.flatnonzero(cats == CATEGORY_NAMES.index("parameter"))[0])
    tip = w.map.block_tooltip(b)
    assert "parameter: " in tip
    assert tip.split("<br>")[-1] == bd.explain(w.vs.interval_of_block(b)).replace(
        "&", "&amp;"
    ).replace("<", "&lt;").replace(">", "&gt;")
