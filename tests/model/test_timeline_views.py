"""Stacked timeline layout and the call tree of who holds memory."""

from __future__ import annotations

import numpy as np

from tests.conftest import DATA
from vramscope.viewer.model.analysis.calltree import call_tree
from vramscope.viewer.model.core.frames import frame_categories
from vramscope.viewer.model.replay.timeline import build_timeline, intervals, live_at
from vramscope.viewer.model.view.stacking import stacked_layout


def test_stacked_layout_tops_equal_active_and_bands_bounded(loaded_snapshots):
    snap = loaded_snapshots(DATA / "gpt2_oom.pickle")
    rep = build_timeline(snap).replay(0)
    iv = intervals(rep)
    lay = stacked_layout(iv, 0, len(rep) - 1, columns=800, max_bands=500)
    assert len(lay.band_interval) <= 500
    tops = np.maximum(lay.summary_height, 0)
    np.maximum.at(tops, lay.pair_column, lay.pair_top)
    assert np.array_equal(tops, rep.active[lay.samples])
    assert (lay.pair_bottom >= lay.summary_height[lay.pair_column]).all()
    # Bands never overlap within a column.
    order = np.lexsort((lay.pair_bottom, lay.pair_column))
    col, bot, top = lay.pair_column[order], lay.pair_bottom[order], lay.pair_top[order]
    same = col[1:] == col[:-1]
    assert (bot[1:][same] >= top[:-1][same]).all()
    # Hit-testing finds the band drawn there, and it is live at that column.
    j = len(lay.pair_band) // 2
    c, y = int(lay.pair_column[j]), (lay.pair_bottom[j] + lay.pair_top[j]) / 2
    hit = lay.hit(c, y)
    assert hit == lay.band_interval[lay.pair_band[j]]
    assert iv.start[hit] <= lay.samples[c] < iv.end[hit]


def test_stacked_layout_zoomed_in_shows_every_allocation(loaded_snapshots):
    snap = loaded_snapshots(DATA / "resnet50_train.pickle")
    rep = build_timeline(snap).replay(0)
    iv = intervals(rep)
    k0, k1 = 4000, 4100
    lay = stacked_layout(iv, k0, k1, columns=2000, max_bands=100_000)
    assert (lay.summary_height == 0).all()
    live = set()
    for k in range(k0, k1 + 1):
        live.update(live_at(iv, k).tolist())
    assert set(lay.band_interval.tolist()) == live


def test_call_tree_at_peak_names_the_model_code(loaded_snapshots):
    snap = loaded_snapshots(DATA / "gpt2_oom.pickle")
    tl = build_timeline(snap)
    k = tl.replay(0).peak("allocated")[1]
    at = tl.snapshot_at(0, k)
    live = (at.blocks.state == 0) | (at.blocks.state == 1)
    cats = frame_categories(snap.frames)
    root = call_tree(snap, at.blocks.stack[live], at.blocks.size[live], cats)
    assert root.bytes == int(at.blocks.size[live].sum()) == tl.replay(0).active[k]
    for node in root.walk():
        assert sum(c.bytes for c in node.children.values()) <= node.bytes
    labels = [n.label for n in root.walk()]
    assert any("modeling_gpt2.py" in label for label in labels)
    assert not any("/torch/" in label or label.startswith("module.py") for label in labels)
    unfolded = call_tree(snap, at.blocks.stack[live], at.blocks.size[live], cats, fold=False)
    assert unfolded.bytes == root.bytes
    assert len(list(unfolded.walk())) > len(list(root.walk()))
