"""What a new user saw in the window: "All devices" showing one device, another device's
OOM in the stack panel, the OOM ruler cut at the map's edge, a screenshot taken before the
header's "What it is" line was drawn, every other map row unlabelled and an empty Leaks
chart.  Real windows (offscreen), real files, a real event loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from tests import shared_data
from vramscope.viewer.model.analysis.figures import Selection, memory_stats
from vramscope.viewer.model.core.snapshot import BlockState

DATA = Path(__file__).resolve().parents[1] / "data"
GPT2 = DATA / "gpt2_oom.pickle"
EXTERNAL = shared_data.EXTERNAL
SUN = EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"  # 3 devices
NESTA = EXTERNAL / "Nesta-gitU_discrete_diffusion-memory_snapshot.json.xz"  # 384 MiB request


def settle(qtbot) -> None:
    for _ in range(3):
        QApplication.processEvents()
    qtbot.wait(20)


@pytest.fixture
def build_ends_first(monkeypatch):
    """The worst scheduling of a loaded machine: the breakdown's thread runs to its end
    before the GUI thread gets the CPU back from starting it."""
    from vramscope.viewer._qt.categories.panel import CategoriesPanel

    start = CategoriesPanel.start

    def start_then_wait(self, doc, device):
        start(self, doc, device)
        if self.thread is not None:
            self.thread.wait()

    monkeypatch.setattr(CategoriesPanel, "start", start_then_wait)


# --------------------------------------------------------------- the header's What it is
def test_header_split_shows_a_build_that_ended_before_anyone_listened(
    qtbot, window, load, build_ends_first
):
    assert load(window, GPT2) == "loaded"
    panel = window.categories_wiring.panel
    qtbot.waitUntil(lambda: panel.bd is not None, timeout=60000)
    settle(qtbot)
    split = window.categories_wiring.header_split
    k = window.vs.cursor_k
    assert split.split == panel.bd.split_at(k) and sum(split.split.values()) > 0
    assert split.text.text().startswith(f"{sum(panel.bd.split_at(k).values()) / 2**30:.2f} GiB")


def test_screenshot_waits_for_the_header_split(qtbot, tmp_path, monkeypatch, build_ends_first):
    """``--screenshot``'s own path (app.screenshot): the PNG is grabbed once the header's
    "What it is" line shows the breakdown at the cursor."""
    from vramscope.viewer._qt import app as qtapp

    seen = {}
    save = qtapp._save

    def spy(window, out, pixmap=None):
        wiring = window.categories_wiring
        seen.update(
            split=dict(wiring.header_split.split),
            bd=wiring.panel.bd,
            k=window.vs.cursor_k,
            text=wiring.header_split.text.text(),
        )
        return save(window, out, pixmap)

    monkeypatch.setattr(qtapp, "_save", spy)
    out = tmp_path / "shot.png"
    assert qtapp.screenshot(str(GPT2), str(out)) == (0, "")
    assert out.stat().st_size > 0
    assert seen["bd"] is not None
    assert seen["split"] == seen["bd"].split_at(seen["k"]) and seen["text"]


# --------------------------------------------------------------- devices
@pytest.fixture
def sun(loaded):
    window = loaded(shared_data.require(SUN))
    assert window.vs.doc.oom.device == 1 and window.vs.cursor_device == 1  # opens at the OOM
    assert window.vs.cursor_k == window.vs.doc.oom_events(1)[-1] < window.vs.doc.n_events(1) - 1
    return window


@shared_data.needs(SUN)
def test_all_devices_shows_every_device_as_recorded(qtbot, sun):
    """ "All devices" (the selector, or --device all) while the cursor is at device 1's
    OOM: the figures, the segment count and the map are every device's, as recorded -
    the only instant at which each device's layout is known."""
    window = sun
    file_snap = window.vs.doc.snap
    window.set_selection(Selection())
    settle(qtbot)
    assert window.selectors.device_combo.currentText() == "All devices"
    assert window.vs.view_doc.snap is file_snap  # not device 1's replayed layout
    assert window.header.stats == memory_stats(file_snap, Selection())
    devices = sorted(set(file_snap.segments.device.tolist()))
    assert len(devices) == 3
    n = len(file_snap.segments)
    assert window.map.layout_data.n_rows == n
    assert window.map.caption.text().startswith(f"{n} segments")
    assert set(window.map.doc.snap.segments.device.tolist()) == set(devices)
    scope = window.header.scope.text()
    assert "3 devices summed (0, 1, 2)" in scope and "as recorded" in scope
    assert "event" not in scope  # (no one device's event number for a sum)
    window.tabs.setCurrentWidget(window.calltree)  # (built while shown)
    settle(qtbot)
    assert window.calltree.caption.text().startswith("every device, as recorded: ")
    # the What it is line is one device's breakdown: it says whose
    split = window.categories_wiring.header_split
    qtbot.waitUntil(window.categories_wiring.settled, timeout=60000)
    settle(qtbot)
    assert split.text.text().startswith(f"device {window.categories.bd.device} only: ")


@shared_data.needs(SUN)
def test_moving_the_cursor_under_all_devices_names_the_device(qtbot, sun):
    window = sun
    window.set_selection(Selection())
    k = window.vs.doc.oom_events(1)[-1]
    window.set_cursor(k)
    settle(qtbot)
    # one device's layout at that event: the selector and every figure say device 1
    assert window.vs.selection.device == 1
    assert window.selectors.device_combo.currentText() == "Device 1"
    assert window.header.stats == memory_stats(window.vs.view_doc.snap, Selection(device=1))
    assert "device 1" in window.header.scope.text()
    assert f"after event {k:,} " in window.header.scope.text()
    window.tabs.setCurrentWidget(window.calltree)
    settle(qtbot)
    assert window.calltree.caption.text().startswith(f"device 1, at the cursor (event {k:,})")


@shared_data.needs(SUN)
def test_stack_panel_names_the_device_and_event_of_its_oom(qtbot, sun):
    """With device 0 chosen, device 1's OOM is not the stack panel's subject; with device
    1 it is, named as device 1's with its event; the banner names device 1's OOM as
    elsewhere, without a Ctrl+J that would not go there."""
    window = sun
    k = window.vs.doc.oom_events(1)[-1]
    assert "device 1, event" in window.stack.facts.text()  # at the OOM
    assert f"event {k:,}; at the cursor" in window.stack.facts.text()
    window.set_selection(Selection(device=0))
    settle(qtbot)
    assert window.vs.cursor_device == 0
    assert "ran out of memory" not in window.stack.facts.text()
    assert window.stack.facts.text().startswith("Click a block")
    banner = window.header.oom_text()
    assert "device 1" in banner and "select device 1" in banner and "Ctrl+J" not in banner
    window.set_selection(Selection(device=1))  # its trace's end, as recorded
    settle(qtbot)
    facts = window.stack.facts.text()
    assert f"the request that ran out of memory</b> (device 1, event {k:,}; Ctrl+J" in facts
    # a block picked: its device and instant
    snap = window.vs.view_doc.snap
    on_1 = snap.segments.device[snap.blocks.segment] == 1
    b = int(np.flatnonzero(on_1 & (snap.blocks.state == BlockState.ALLOCATED))[0])
    window.select_block(b, origin="table")
    settle(qtbot)
    assert "device 1 · after event" in window.stack.facts.text()


# --------------------------------------------------------------- the OOM ruler
def _inside_view(window, label) -> bool:
    from vramscope.viewer._qt.widgets.plotting import text_scene_rect

    view = window.map.vb.sceneBoundingRect()
    r = text_scene_rect(label, window.map.vb)
    return view.left() <= r.left() and r.right() <= view.right()


@shared_data.MARK
def test_oom_ruler_wider_than_the_segments_stays_in_view(qtbot, loaded):
    """Nesta's OOM asks for 384 MiB beside 20 MiB segments: its caption stays readable
    in the view, and its ghost over the largest gap is drawn whole (the automatic view
    makes room for it) or, zoomed in, up to the view's edge with a mark that it goes on."""
    window = loaded(shared_data.require(NESTA))
    m = window.map
    req = m.item.request_bytes
    assert req == 384 * 2**20  # (it opens at its OOM)
    gap_row = int(m.layout_data.row[m.layout_data.pos_of_block[m.item.gap_blocks[0]]])
    assert m.layout_data.row_size[gap_row] < req  # wider than the gap's own segment
    m.plot.grab()  # (painted: what the item drew is recorded)
    settle(qtbot)
    m.plot.grab()
    (xa, xb), _ = m.vb.viewRange()
    assert m._request_label.isVisible() and _inside_view(window, m._request_label)
    assert "384.00 MiB requested" in m._request_label.textItem.toPlainText()
    assert m._largest_label.isVisible() and _inside_view(window, m._largest_label)
    ghost = m.item.ghost_drawn
    assert ghost is not None and not m.item.ghost_continues
    assert ghost.width() == pytest.approx(req) and ghost.right() <= xb  # to scale, whole
    # zoomed in on the segments: the ghost and the bracket stop at the view's edge
    m.vb.setXRange(0, 64 * 2**20, padding=0)
    settle(qtbot)
    m.plot.grab()
    (xa, xb), _ = m.vb.viewRange()
    ghost = m.item.ghost_drawn
    assert m.item.ghost_continues and m.item.request_continues
    assert ghost is not None and xa < ghost.right() <= xb and ghost.width() < req
    assert m._request_label.isVisible() and _inside_view(window, m._request_label)


# --------------------------------------------------------------- the What it is screenshot
@pytest.fixture
def categories_shot(qtbot, window, load):
    """gpt2_oom in the window as ``--screenshot --view categories`` lays it out (the map
    low, the What it is tab open), settled and grabbed by the screenshot's own code."""
    from vramscope.viewer._qt import app as qtapp

    assert load(window, GPT2) == "loaded"
    qtapp.show_view(window, qtapp.ShotOptions(view="categories"))
    qtapp.grab_main_window(window)
    settle(qtbot)
    return window


def drawn_row_labels(m) -> list[str]:
    """The row labels the segment map's axis draws for its current view."""
    from PySide6.QtGui import QImage, QPainter

    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    p = QPainter(image)
    try:
        specs = m.y_axis.generateDrawSpecs(p)
    finally:
        p.end()
    return [text for _rect, _flags, text in specs[2]] if specs else []


def test_every_row_of_a_low_map_is_labelled(categories_shot):
    m = categories_shot.map
    (_, _), (ya, yb) = m.vb.viewRange()
    layout = m.layout_data
    whole = [r for r in range(layout.n_rows) if r >= ya and r + 1 <= yb]
    assert len(whole) >= 3  # (the low map still shows several rows)
    drawn = drawn_row_labels(m)
    assert [m.y_axis.labels[r] for r in whole if m.y_axis.labels[r] not in drawn] == []


def test_no_leak_says_so_where_the_chart_would_be(qtbot, categories_shot):
    leaks = categories_shot.categories_wiring.panel.leaks
    assert categories_shot.categories.bd is not None and not categories_shot.categories.bd.leaks
    assert leaks.empty_text().startswith("No line leaks")
    assert leaks.empty.isVisible()
    assert not leaks.chart.isVisible() and not leaks.table.isVisible()


def test_a_leak_shows_its_table_and_chart(qtbot, window, load):
    assert load(window, DATA / "truth" / "gpt2_leak.pickle.xz", timeout=120000) == "loaded"
    window.categories_wiring.tab_action.trigger()
    qtbot.waitUntil(window.categories_wiring.settled, timeout=120000)
    settle(qtbot)
    leaks = window.categories_wiring.panel.leaks
    assert leaks.leaks and leaks.empty_text() == ""
    assert leaks.chart.isVisible() and leaks.table.isVisible() and leaks.bars is not None
    heights = np.asarray(leaks.bars.opts["height"]) * 2**20
    assert np.allclose(heights, leaks.leaks[0].per_iteration)


@shared_data.MARK
def test_screenshot_all_devices_at_the_oom_labels_every_row(qtbot, tmp_path, monkeypatch):
    """``--device all --at oom`` through the screenshot's own path: the OOM's moment is
    device 1's (the selector says so), and the map, its OOM ruler above eight short
    rows, names every row it shows."""
    from vramscope.viewer._qt import app as qtapp

    seen = {}
    save = qtapp._save

    def spy(window, out, pixmap=None):
        m = window.map
        (_, _), (ya, yb) = m.vb.viewRange()
        whole = [m.y_axis.labels[r] for r in range(m.layout_data.n_rows) if r >= ya and r + 1 <= yb]
        seen.update(
            device=window.selectors.device_combo.currentText(),
            whole=whole,
            drawn=drawn_row_labels(m),
            scope=window.header.scope.text(),
            ruler=m.item.request_bytes,
        )
        return save(window, out, pixmap)

    monkeypatch.setattr(qtapp, "_save", spy)
    opts = qtapp.ShotOptions(device="all", at="oom")
    assert qtapp.screenshot(str(shared_data.require(SUN)), str(tmp_path / "x.png"), opts) == (0, "")
    assert seen["device"] == "Device 1" and "device 1" in seen["scope"]
    assert seen["ruler"] > 0 and len(seen["whole"]) >= 5
    assert [t for t in seen["whole"] if t not in seen["drawn"]] == []
