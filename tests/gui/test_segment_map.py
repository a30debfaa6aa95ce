"""The segment map's numpy core: layout, level of detail, hit-testing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DATA, FRAG

from vramscope.viewer._qt.segment_map import (
    SORT_ADDRESS,
    SORT_FREE,
    SORT_SIZE,
    MapLayout,
    block_rect,
    lod_rects,
    rects_path,
)
from vramscope.viewer._qt.widgets import theme
from vramscope.viewer.model.analysis.figures import Selection
from vramscope.viewer.model.core.snapshot import BlockState
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.view.document import Document


@pytest.fixture(scope="module")
def gpt2_doc():
    return Document.build(load_snapshot(DATA / "gpt2_oom.pickle"))


def synthetic(n_blocks: int, block: float = 1.0, states=None) -> MapLayout:
    """One row of ``n_blocks`` adjacent blocks of ``block`` bytes."""
    x0 = np.arange(n_blocks, dtype=np.float64) * block
    x1 = x0 + block
    states = np.zeros(n_blocks, np.int8) if states is None else np.asarray(states, np.int8)
    return MapLayout(
        seg_rows=np.array([0]),
        row_size=np.array([n_blocks * block]),
        row_ptr=np.array([0, n_blocks]),
        blocks=np.arange(n_blocks),
        row=np.zeros(n_blocks, np.int64),
        x0=x0,
        x1=x1,
        req_end=x1.copy(),
        state=states,
        pos_of_block=np.arange(n_blocks),
    )


def test_layout_covers_every_block_of_the_selection(gpt2_doc):
    snap = gpt2_doc.snap
    layout = MapLayout.build(gpt2_doc, Selection())
    assert sorted(layout.blocks.tolist()) == list(range(len(snap.blocks)))
    assert layout.n_rows == len(snap.segments)
    # Rows are segments drawn to scale: blocks tile [0, segment size).
    for r in range(layout.n_rows):
        lo, hi = layout.row_ptr[r], layout.row_ptr[r + 1]
        assert np.all(np.diff(layout.x0[lo:hi]) > 0)
        assert layout.x1[hi - 1] <= layout.row_size[r]
    assert np.all(layout.pos_of_block[layout.blocks] == np.arange(len(layout)))


def test_layout_sort_orders(gpt2_doc):
    segs = gpt2_doc.snap.segments
    by_addr = MapLayout.build(gpt2_doc, Selection(), SORT_ADDRESS)
    assert np.all(np.diff(segs.address[by_addr.seg_rows]) > 0)
    by_size = MapLayout.build(gpt2_doc, Selection(), SORT_SIZE)
    assert np.all(np.diff(by_size.row_size) <= 0)
    by_free = MapLayout.build(gpt2_doc, Selection(), SORT_FREE)
    top = by_free.seg_rows[0]
    blocks = gpt2_doc.snap.blocks
    free = blocks.state == BlockState.FREE
    assert blocks.segment[free][np.argmax(blocks.size[free])] == top


def test_hit_test_finds_every_block(gpt2_doc):
    layout = MapLayout.build(gpt2_doc, Selection())
    for p in range(0, len(layout), 7):
        x = (layout.x0[p] + layout.x1[p]) / 2
        assert layout.block_at(x, layout.row[p] + 0.5) == layout.blocks[p]
    assert layout.block_at(-5.0, 0.5) == -1
    assert layout.block_at(layout.row_size[0] + 1, 0.5) == -1
    assert layout.block_at(10.0, -1.0) == -1
    assert layout.block_at(10.0, 0.02) == -1  # the gap between rows


def test_lod_keeps_wide_blocks_exactly(gpt2_doc):
    layout = MapLayout.build(gpt2_doc, Selection())
    lod = lod_rects(layout, bytes_per_px=1.0)
    exact = lod.cat != theme.CAT_WASTE
    assert exact.sum() == len(layout)
    assert np.array_equal(np.sort(lod.x0[exact]), np.sort(layout.x0))


def test_lod_merges_sub_pixel_blocks():
    # 10,000 one-byte blocks, three allocated for each free one, 100 bytes a pixel.
    states = np.tile([0, 0, 0, 2], 2500)
    layout = synthetic(10_000, states=states)
    lod = lod_rects(layout, bytes_per_px=100.0)
    assert len(lod) == 100 < len(layout)
    assert np.all(lod.cat == BlockState.ALLOCATED)  # dominant state by bytes
    assert lod.x0[0] == 0 and lod.x1[-1] == 10_000
    # Zoomed in, the same blocks are drawn one by one.
    assert len(lod_rects(layout, bytes_per_px=0.1)) == 10_000


def test_lod_never_loses_a_lone_sub_pixel_block():
    layout = synthetic(3, block=1.0, states=[2, 0, 2])
    lod = lod_rects(layout, bytes_per_px=1000.0)
    assert len(lod) == 1
    assert lod.x1[0] - lod.x0[0] >= 1000.0  # widened to a pixel


def test_lod_culls_to_the_view():
    layout = synthetic(1000, block=10.0)
    lod = lod_rects(layout, 1.0, x_range=(100.0, 200.0), y_range=(0.0, 1.0))
    assert 10 <= len(lod) <= 12
    assert len(lod_rects(layout, 1.0, y_range=(5.0, 9.0))) == 0


def test_lod_in_the_zoomed_out_view_has_fewer_rects_than_blocks(qtbot, loaded):
    window = loaded(DATA / "resnet50_train.pickle")
    window.map.fit()
    qtbot.wait(20)
    layout = window.map.layout_data
    px = window.map.item.bytes_per_px()
    widths = layout.x1 - layout.x0
    assert np.count_nonzero(widths < px) > 10  # sub-pixel blocks exist at this zoom
    lod = window.map.item.rebuild_lod()
    assert 0 < len(lod) < len(layout)


def test_rects_path_is_one_path_for_many_rects():
    n = 20_000
    x0 = np.arange(n, dtype=float)
    path = rects_path(x0, x0 + 0.5, np.zeros(n), np.ones(n))
    assert path.elementCount() == 5 * n
    r = path.boundingRect()
    assert (r.left(), r.right(), r.top(), r.bottom()) == (0.0, n - 0.5, 0.0, 1.0)


def test_map_paints_many_blocks_as_fewer_items(qtbot, window):
    """50k blocks are painted from a level of detail of fewer than 5000 rectangles (how fast the
    window repaints is measured by `make bench`, tests/bench/gui_bench.py, not asserted)."""
    from PySide6.QtGui import QImage, QPainter

    states = np.tile([0, 2, 0, 1], 12_500)
    layout = synthetic(50_000, block=4096.0, states=states)
    item = window.map.item
    window.map.layout_data = layout
    item.set_layout(layout)
    window.map.vb.setRange(xRange=(0, layout.max_size), yRange=(-0.5, 1.5), padding=0)
    img = QImage(1200, 400, QImage.Format.Format_ARGB32)
    for _ in range(5):
        item.invalidate()
        p = QPainter(img)
        window.map.plot.render(p)
        p.end()
    assert 0 < len(item.lod) < 5000


def test_frag_layout_rect_for_every_block():
    doc = Document.build(load_snapshot(FRAG))
    layout = MapLayout.build(doc, Selection())
    for b in range(0, len(doc.snap.blocks), 11):
        r = block_rect(layout, b)
        assert r is not None and r.width() == doc.snap.blocks.size[b]
