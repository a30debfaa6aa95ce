"""The main window's labels, units and hit tests on real recordings: row labels that
follow the cursor, axes in the header's unit, legends and titles that name what they show,
labels that never overlap, and what a window opened at one device's OOM shows."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DATA
from PySide6.QtGui import QColor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from tests import shared_data
from vramscope.viewer.model.analysis.figures import Selection

GPT2 = DATA / "gpt2_oom.pickle"
GRAPH = DATA / "cuda_graph_pool.pickle"


@pytest.fixture
def axis_texts(monkeypatch):
    """What every segment-map axis paint writes (pyqtgraph caches the axis as a
    picture: a paint that replays it shows the texts of the last real draw)."""
    from vramscope.viewer._qt.segment_map import SegmentAxis

    drawn: dict[int, list[str]] = {}
    original = SegmentAxis.drawPicture

    def record(self, p, axisSpec, tickSpecs, textSpecs):
        drawn[id(self)] = [t for _, _, t in textSpecs if t]
        original(self, p, axisSpec, tickSpecs, textSpecs)

    monkeypatch.setattr(SegmentAxis, "drawPicture", record)

    def painted(window) -> list[str]:
        # What the screen shows: the repaints Qt schedules, not a grab (which paints
        # everything; pyqtgraph's setWidth drops the picture without asking for one).
        for _ in range(3):
            QApplication.processEvents()
            QTest.qWait(30)
        return drawn.get(id(window.map.y_axis), [])

    return painted


def test_row_labels_follow_the_time_cursor(loaded, axis_texts):
    """The bars redraw for the new moment, and so must the labels."""
    window = loaded(GPT2)
    seen = []
    for k in (17700, 10100):
        window.set_cursor(k)
        drawn = axis_texts(window)
        labels = window.map.y_axis.labels
        # the painted labels are this moment's rows, from the top of the view
        (_, _), (ya, _yb) = window.map.vb.viewRange()
        first = max(0, int(np.floor(ya)))
        assert drawn and drawn == labels[first : first + len(drawn)], (k, drawn[:3], labels[:3])
        seen.append(tuple(drawn))
    assert seen[0] != seen[1]  # the two moments have different segments on top


def test_pool_filter_hit_test_returns_interval_ids(loaded):
    """With a pool selected and all streams, hovering or clicking a band
    names that band's allocation, not its index among the pool's allocations."""
    window = loaded(GRAPH)
    doc = window.vs.doc
    pools = sorted(set(doc.intervals(window.vs.cursor_device).pool.tolist()))
    assert len(pools) > 1
    checked = 0
    for pool in pools:
        window.set_selection(Selection(pool=pool))
        tl = window.timeline
        assert tl.pool == pool and tl.stream is None
        tl.refresh_stack()
        lay = tl.layout
        px_y = tl.vb.viewPixelSize()[1]
        for band in range(len(lay.band_interval))[:60]:
            pairs = np.flatnonzero(lay.pair_band == band)
            tall = pairs[(lay.pair_top[pairs] - lay.pair_bottom[pairs]) >= 3 * px_y]
            if not len(tall):
                continue
            j = tall[len(tall) // 2]
            x = float(tl.xs_cols[lay.pair_column[j]])
            y = (float(lay.pair_bottom[j]) + float(lay.pair_top[j])) / 2
            i = int(tl.layout_ids[band])
            assert tl.interval_at(x, y) == i
            assert doc.intervals(window.vs.cursor_device).pool[i] == pool
            checked += 1
    assert checked >= 10


def _pixel(widget, pos) -> QColor:
    return widget.grab().toImage().pixelColor(pos)


def test_search_highlight_has_its_own_style(qtbot, loaded):
    """Search matches were outlined in the legend's "pending free"
    orange.  They now have a colour of their own, named in both legends."""
    from vramscope.viewer._qt.segment_map import block_rect
    from vramscope.viewer._qt.widgets import theme

    window = loaded(GPT2)
    window.set_cursor(20000)
    qtbot.keyClicks(window.search, "sdpa_attention")
    qtbot.waitUntil(lambda: window.vs.search_mask is not None, timeout=3000)
    hl = theme.search_color()
    legend_colors = [QColor(c) for c in theme.STATE_COLORS.values()] + [
        QColor(theme.OOM_RED),
        theme.gap_outline(),
    ]

    def dist(a: QColor, b: QColor) -> int:
        return abs(a.red() - b.red()) + abs(a.green() - b.green()) + abs(a.blue() - b.blue())

    assert min(dist(hl, c) for c in legend_colors) > 150
    assert theme.SEARCH_LABEL in window.map.legend.text()
    assert theme.SEARCH_LABEL in window.timeline.legend.text()
    # the map paints a highlighted block in that colour
    blocks = window.map.item.highlighted_blocks()
    sizes = window.vs.view_doc.snap.blocks.size[blocks]
    b = int(blocks[np.argmax(sizes)])
    window.map.select_block(-1, ensure_visible=False)
    r = block_rect(window.map.layout_data, b)
    window.map.vb.setRange(
        xRange=(r.left(), r.right()), yRange=(r.top() - 1, r.bottom() + 1), padding=0
    )
    QApplication.processEvents()
    pos = window.map.block_viewport_pos(b)
    assert dist(_pixel(window.map.plot.viewport(), pos), hl) < 40
    # the timeline draws matching allocations in it too
    window.timeline.refresh_stack()
    argb = np.unique(window.timeline.stacked._pixels)
    assert hl.rgba() in set(argb.tolist())
    # cleared: the legends drop the entry
    window.search.clear()
    window.table.apply_filter()
    assert theme.SEARCH_LABEL not in window.map.legend.text()
    assert theme.SEARCH_LABEL not in window.timeline.legend.text()


def _disjoint(named: list[tuple[str, object]]) -> None:
    for i, (a, ra) in enumerate(named):
        for b, rb in named[i + 1 :]:
            assert not ra.intersects(rb), f"{a!r} overlaps {b!r}"


def map_labels(window) -> list[tuple[str, object]]:
    from vramscope.viewer._qt.widgets.plotting import text_scene_rect

    m = window.map
    view = m.vb.sceneBoundingRect()
    out = []
    for t in m.label_items():
        if t.isVisible():
            r = text_scene_rect(t, m.vb)
            assert view.adjusted(-1, -1, 1, 1).contains(r), f"{t.toPlainText()!r} cut at the edge"
            out.append((t.toPlainText(), r))
    return out


def timeline_labels(window) -> list[tuple[str, object]]:
    from vramscope.viewer._qt.widgets.plotting import text_scene_rect

    tl = window.timeline
    QApplication.processEvents()
    tl.plot.grab()  # a paint places the band and marker labels
    out = [
        (t.textItem.toPlainText(), text_scene_rect(t, tl.vb))
        for t in tl.peak_labels
        if t.isVisible()
    ]
    view = tl.vb.sceneBoundingRect()
    for text, r in out:
        assert view.adjusted(-1, -1, 1, 1).contains(r), f"{text!r} cut at the edge"
    return out + list(tl.bands_item.placed)


@pytest.mark.parametrize(
    "name",
    [
        "gpt2_oom.pickle",
        "resnet50_train.pickle",
        "whatif_default.pickle",
        "transformer_long_python_1000k.pickle.xz",
    ],
)
def test_labels_never_overlap(loaded, name):
    """Peak labels, record_function names, marker labels and the
    segment map's captions are placed so none covers another (the less important one
    is dropped), and none is cut at the plot's edge."""
    window = loaded(DATA / name)
    tl_labels = timeline_labels(window)
    assert any(text.startswith("peak") for text, _ in tl_labels)
    _disjoint(tl_labels)
    _disjoint(map_labels(window))
    window.map.fit()
    QApplication.processEvents()
    shown = map_labels(window)
    _disjoint(shown)
    if window.vs.doc.oom is not None:
        texts = [t for t, _ in shown]
        assert any("requested" in t for t in texts)  # Fit all keeps the request's caption
        window.map.vb.translateBy(y=2.0)  # scrolled: the caption is not cut at the top
        QApplication.processEvents()
        _disjoint(map_labels(window))


SUN = shared_data.EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"


@shared_data.needs(SUN)
def test_three_devices_open_at_the_oom_of_one_device(loaded):
    """Three devices with an OOM on device 1.  The window shows device 1 at
    its OOM: header, map and ruler of one device and one instant, and says so; the
    ruler is drawn only while the map shows the OOM's moment."""
    from vramscope.viewer.model.analysis.figures import memory_stats

    window = loaded(SUN)
    doc = window.vs.doc
    assert doc.oom.device == 1
    assert window.vs.selection.device == 1 and window.vs.cursor_device == 1
    k_oom = doc.oom_events(1)[-1]
    assert window.vs.cursor_k == k_oom < doc.n_events(1) - 1
    scope = window.header.scope.text()
    assert "device 1" in scope and "the OOM" in scope
    assert f"event {k_oom:,} of {doc.n_events(1):,}" in scope
    stats = memory_stats(window.vs.view_doc.snap, Selection(device=1))
    assert window.header.stats == stats
    assert window.map.item.request_bytes == doc.oom.requested_bytes
    assert "device 1" in window.header.oom_text()
    # the end of the recording: no ruler (the 4.94 GiB request is not about this layout)
    window.go_latest()
    assert window.map.item.request_bytes == 0
    assert not window.map._request_label.isVisible()
    assert "latest" in window.header.scope.text()
    # every device, as recorded: the header says it sums three
    window.set_selection(Selection())
    assert "3 devices summed" in window.header.scope.text()


def test_numbers_say_what_they_count(loaded):
    """The banner names the pool its free figure counts; the table's
    count says blocks (free gaps included) and how many are allocations; the header
    says which device and instant its figures are of."""
    from vramscope.viewer.model.core.snapshot import BlockState

    window = loaded(GPT2)
    banner = window.header.oom_text()
    assert "large pool" in banner and "device 0" in banner
    scope = window.header.scope.text()
    assert "device 0" in scope and "the OOM" in scope
    snap = window.vs.view_doc.snap
    n = len(snap.blocks)
    n_alloc = int(np.count_nonzero(snap.blocks.state == BlockState.ALLOCATED))
    n_free = int(np.count_nonzero(snap.blocks.state == BlockState.FREE))
    text = window.table.count.text()
    assert text.startswith(f"{n:,} / {n:,} blocks")
    assert f"{n_alloc:,} allocated" in text and f"{n_free:,} free" in text
    assert window.tabs.tabText(0) == "Blocks"


def test_timeline_axis_in_the_headers_unit(loaded):
    """The 1M-event timeline's axis said "1500 MiB" beside a header
    in GiB; past 1 GiB the ticks are in GiB."""
    window = loaded(DATA / "transformer_long_python_1000k.pickle.xz")
    assert window.header.values["reserved_bytes"].text().endswith("GiB")
    ax = window.timeline.y_axis
    (_, _), (ya, yb) = window.timeline.vb.viewRange()
    for height in (ax.size().height(), 100, 150, 250, 400):  # any window height
        levels = ax.tickValues(ya, yb, height)
        texts = [t for spacing, values in levels for t in ax.tickStrings(values, 1, spacing)]
        assert texts and all(t == "0" or t.endswith("GiB") for t in texts), (height, texts)


def test_private_pool_suffix_in_the_legend_and_titles_name_the_app_once(loaded):
    """The "P" row suffix is explained in the legend; window titles end
    with the application's name (Qt appends it to any title that does not), once."""
    window = loaded(GRAPH)
    assert any(label.endswith("  P") for label in window.map.y_axis.labels)
    assert "private pool" in window.map.legend.text()
    assert window.windowTitle() == "cuda_graph_pool.pickle — vramscope"
    diff = window.compare_with(str(DATA / "gpt2_oom.pickle"))
    for title in (diff.windowTitle(),):
        assert title.endswith(" — vramscope") and title.count("vramscope") == 1, title
    diff.close()
    ranks = window.open_ranks(str(DATA / "ddp_2ranks"))
    assert ranks.windowTitle().endswith(" — vramscope")
    assert ranks.windowTitle().count("vramscope") == 1
    ranks.close()
    plain = loaded(GPT2)
    assert "private pool" not in plain.map.legend.text()


def test_a_trace_that_starts_mid_run_says_what_it_cannot_show(loaded):
    """The 1M-event ring started after every segment existed; the
    timeline says so (how many segments, that their creation is not recorded) and
    calls its peaks the window's; a trace recorded from the start says nothing."""
    window = loaded(DATA / "transformer_long_python_1000k.pickle.xz")
    rep = window.vs.doc.timeline.replay(window.vs.cursor_device)
    n_seg = len(rep.initial.seg_addr)
    assert n_seg > 0
    note = window.timeline.window_note
    assert note.isVisible()
    assert f"{n_seg:,} segments" in note.text() and "not recorded" in note.text()
    assert all("in this window" in t for t in window.timeline.peak_label_texts())
    fresh = loaded(GPT2)
    assert not fresh.timeline.window_note.isVisible()
    assert not any("in this window" in t for t in fresh.timeline.peak_label_texts())


def test_two_flagged_ranks_say_why_each(qtbot, loaded):
    """In the 2-rank run both ranks are outliers, for different
    reasons (rank 0 ran out of memory, rank 1 holds 1 GiB more); the caption says
    which is which instead of two unexplained flags."""
    window = loaded(GPT2)
    ranks = window.open_ranks(str(DATA / "ddp_2ranks"))
    qtbot.waitUntil(lambda: ranks.overview is not None, timeout=30000)
    caption = ranks.caption.text()
    assert "rank 0: ran out of memory" in caption
    assert "rank 1: reserved" in caption and "above the other ranks" in caption
    ranks.close()
