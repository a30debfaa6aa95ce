"""Keys, legends and contrast in a real window (offscreen), on real recordings: no key
bound twice, a second file never shows the first one's leaks, chart ticks and legends
that can be read, captions with contrast, long names elided, leaks coloured as leaks."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QColor, QPalette, QShortcut
from PySide6.QtWidgets import QApplication

from tests import shared_data
from vramscope.viewer.model.categories import CATEGORY_LABELS, MemoryBreakdown

DATA = Path(__file__).resolve().parents[1] / "data"
LEAK = DATA / "truth" / "gpt2_leak.pickle.xz"
BIG = DATA / "transformer_long_python_1000k.pickle.xz"
FRAG = DATA / "fragmentation_oom.pickle"
EXTERNAL = shared_data.EXTERNAL
NO_TRACE = EXTERNAL / "volcengine_verl-mem.pickle.xz"  # segments only, no trace
ONE_EVENT = EXTERNAL / "LfieLike_SketchKV2-my_snapshot.pickle.xz"  # a trace of one event


def opened(qtbot, window, load, path):
    """``window`` with ``path`` open and its breakdown (if it has a trace) built."""
    assert load(window, path, timeout=120000) == "loaded"
    # (the build starts after the window's first paint of the file: settled once shown)
    qtbot.waitUntil(window.categories_wiring.settled, timeout=120000)
    return window


def settle(qtbot):
    for _ in range(3):
        QApplication.processEvents()
    qtbot.wait(20)


# --------------------------------------------------------------------------- 1. shortcuts
def _context_key(obj, window):
    """Where a shortcut is heard: the window for window-wide ones, else its widget."""
    ctx = obj.shortcutContext() if isinstance(obj, QAction) else obj.context()
    if ctx in (Qt.ShortcutContext.WindowShortcut, Qt.ShortcutContext.ApplicationShortcut):
        return ("window", ctx)
    return ("widget", id(obj.parent()), ctx)


def test_no_two_actions_share_a_key_sequence(window):
    seen: dict = {}
    objects = [*window.findChildren(QAction), *window.findChildren(QShortcut)]
    assert len(objects) > 30
    clashes = []
    for obj in objects:
        keys = obj.shortcuts() if isinstance(obj, QAction) else [obj.key()]
        name = obj.text() if isinstance(obj, QAction) else obj.objectName() or repr(obj)
        for key in keys:
            if key.isEmpty():
                continue
            slot = (_context_key(obj, window), key.toString())
            if slot in seen and seen[slot] is not obj:
                clashes.append((key.toString(), seen[slot], name))
            seen.setdefault(slot, obj)
    named = [(k, a.text() if isinstance(a, QAction) else a, b) for k, a, b in clashes]
    assert not named, f"shortcuts bound twice: {named}"


def test_what_the_memory_is_and_what_if_have_their_own_keys(qtbot, window, load):
    wiring = window.categories_wiring
    assert window.whatif_action.shortcut().toString() == "Ctrl+Shift+W"
    assert wiring.tab_action.shortcut().toString() == "Ctrl+Shift+M"
    opened(qtbot, window, load, FRAG)
    window.activateWindow()
    window.tabs.setCurrentIndex(0)
    qtbot.keyClick(
        window,
        Qt.Key.Key_M,
        Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
    )
    assert window.tabs.currentWidget() is wiring.panel


def test_jump_to_peak_reserved_has_a_key(qtbot, window, load):
    opened(qtbot, window, load, FRAG)
    assert window.peak_reserved_action.shortcut().toString() == "Ctrl+Shift+R"
    rep = window.vs.doc.timeline.replay(window.vs.cursor_device)
    _, k = rep.peak("reserved")
    window.set_cursor(0)
    window.activateWindow()
    qtbot.keyClick(
        window,
        Qt.Key.Key_R,
        Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
    )
    qtbot.waitUntil(lambda: window.vs.cursor_k == k)


# --------------------------------------------------------------------------- 2. stale state
@shared_data.needs(NO_TRACE)
def test_a_file_without_trace_resets_what_it_is(qtbot, window, load):
    opened(qtbot, window, load, LEAK)
    wiring = window.categories_wiring
    assert "leak" in window.tabs.tabText(wiring.tab_index)
    opened(qtbot, window, load, NO_TRACE)
    window.tabs.setCurrentWidget(wiring.panel)
    settle(qtbot)
    panel = wiring.panel
    assert window.tabs.tabText(wiring.tab_index) == "What it is"
    assert window.categories.bd is None and panel.bd is None
    assert "no allocation history" in panel.status.text()
    assert not panel.leaks.caption.text().startswith("No leak")
    assert "allocation history" in panel.leaks.caption.text()
    (x0, x1), (y0, _y1) = panel.timeline.plot.getViewBox().viewRange()
    assert x0 >= -0.01 and x1 <= 1.01, "the old file's events stay on the x axis"
    assert y0 >= -0.01, "negative bytes on an empty chart"
    assert not panel.timeline.curves and not panel.timeline.bands
    assert wiring.header_split.split == {} and wiring.header_split.text.text() == ""


# --------------------------------------------------------------------------- 3. charts
def _tick_labels(axis, lo, hi, size):
    out = []
    for spacing, values in axis.tickValues(lo, hi, size):
        out += list(zip(values, axis.tickStrings(values, 1.0, spacing)))
    return sorted(out)


def _labels_overlap(axis, lo, hi, size) -> list:
    from PySide6.QtGui import QFontMetrics

    fm = QFontMetrics(axis.style.get("tickFont") or QApplication.font())
    ticks = [(v, s) for v, s in _tick_labels(axis, lo, hi, size) if lo <= v <= hi and s]
    bad = []
    for (v0, s0), (v1, s1) in itertools.pairwise(ticks):
        gap = (v1 - v0) / (hi - lo) * size
        if gap < (fm.horizontalAdvance(s0) + fm.horizontalAdvance(s1)) / 2 + 4:
            bad.append((s0, s1))
    return bad


def test_category_chart_ticks_do_not_run_together(qtbot, window, load):
    opened(qtbot, window, load, BIG)
    wiring = window.categories_wiring
    window.tabs.setCurrentWidget(wiring.panel)
    settle(qtbot)
    plot = wiring.panel.timeline.plot
    axis = plot.getAxis("bottom")
    (lo, hi), _ = plot.getViewBox().viewRange()
    width = axis.width() or plot.width()
    assert width < 400  # (the real, narrow chart of the tab)
    labels = [s for v, s in _tick_labels(axis, lo, hi, width) if lo <= v <= hi]
    assert labels and all(s.replace(",", "").isdigit() for s in labels), labels
    assert not _labels_overlap(axis, lo, hi, width)


def test_category_chart_keeps_every_columns_min_and_max(qtbot, window, load):
    opened(qtbot, window, load, BIG)
    wiring = window.categories_wiring
    window.tabs.setCurrentWidget(wiring.panel)
    settle(qtbot)
    ct = wiring.panel.timeline
    bd = window.categories.bd
    ct._resample()
    samples = ct.samples
    req = bd.requested
    lo, hi = int(samples[0]), int(samples[-1])
    width = max(200, int(ct.plot.width()))
    n = hi - lo + 1
    starts = (np.arange(width) * n) // width
    # every pixel column's highest and lowest requested bytes are drawn
    sampled = np.zeros(n, bool)
    sampled[samples - lo] = True
    for a, b in zip(starts, np.append(starts[1:], n)):
        seg = req[lo + a : lo + b]
        got = req[lo + a : lo + b][sampled[a:b]]
        assert len(got) and got.max() == seg.max() and got.min() == seg.min()
    # the top of the stack reaches the trace's peak (1,237 MiB at every iteration)
    top = ct.stacked[-1].max() * ct.unit[0]
    assert abs(top - req.max()) < 1


@shared_data.needs(ONE_EVENT)
def test_one_event_trace_has_a_proper_axis(qtbot, window, load):
    opened(qtbot, window, load, ONE_EVENT)
    wiring = window.categories_wiring
    window.tabs.setCurrentWidget(wiring.panel)
    settle(qtbot)
    for plot in (wiring.panel.timeline.plot, window.timeline.plot):
        axis = plot.getAxis("bottom")
        (lo, hi), _ = plot.getViewBox().viewRange()
        labels = [
            s for v, s in _tick_labels(axis, lo, hi, axis.width() or 300) if lo <= v <= hi and s
        ]
        assert labels == ["0"], labels
    assert "x0.001" not in wiring.panel.timeline.plot.getAxis("bottom").labelString()
    # The one state's column fills the main timeline (it was a sliver in an empty plot).
    (lo, hi), _ = window.timeline.plot.getViewBox().viewRange()
    assert (lo, hi) == pytest.approx((-0.5, 0.5))


def _legend_fits(label) -> bool:
    if label.wordWrap():
        return label.heightForWidth(label.width()) <= label.height() + 1
    return label.sizeHint().width() <= label.width() + 1


def test_category_legends_name_every_colour_painted(qtbot, window, load):
    opened(qtbot, window, load, LEAK)
    wiring = window.categories_wiring
    wiring.color_action.setChecked(True)
    settle(qtbot)
    painted = {int(c) for c in np.unique(wiring.colored_categories()) if c >= 0}
    labels = {c: (CATEGORY_LABELS[c] if c < len(CATEGORY_LABELS) else "leak") for c in painted}
    assert "leak" in labels.values()
    for legend in (window.timeline.legend, window.map.legend):
        text = legend.text()
        for label in labels.values():
            assert f"&nbsp;{label}<" in text, (label, text)
        assert _legend_fits(legend), "the legend is cut"
        right = legend.mapTo(window, legend.rect().topRight()).x()
        assert right <= window.width()


# --------------------------------------------------------------------------- 4. readable
def _drawn_text_color(label) -> QColor:
    label.ensurePolished()
    group = QPalette.ColorGroup.Active if label.isEnabled() else QPalette.ColorGroup.Disabled
    return label.palette().color(group, label.foregroundRole())


def _luminance(c: QColor) -> float:
    def channel(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())


def contrast_ratio(a: QColor, b: QColor) -> float:
    """WCAG 2 contrast ratio (computed here, not by the code under test)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _captions(window):
    header = window.header
    split = window.categories_wiring.header_split
    title = next(w for w in split.findChildren(type(header.source)) if w.text() == "What it is:")
    return [*header.titles.values(), header.source, title]


def test_header_captions_have_contrast_in_light_and_dark(qtbot, window, load):
    opened(qtbot, window, load, FRAG)
    app = QApplication.instance()
    old = app.palette()
    dark = QPalette(old)
    for role, c in (
        (QPalette.ColorRole.Window, "#2b2b2b"),
        (QPalette.ColorRole.WindowText, "#e6e6e6"),
        (QPalette.ColorRole.Base, "#1e1e1e"),
        (QPalette.ColorRole.Text, "#e6e6e6"),
    ):
        dark.setColor(role, QColor(c))
    try:
        for pal in (old, dark):
            app.setPalette(pal)
            settle(qtbot)
            bg = window.header.palette().color(QPalette.ColorRole.Window)
            for label in _captions(window):
                if label.isHidden() and label is not window.header.source:
                    continue
                ratio = contrast_ratio(_drawn_text_color(label), bg)
                assert ratio >= 4.5, (label.text(), round(ratio, 2), bg.name())
    finally:
        app.setPalette(old)


def test_status_bar_elides_a_long_file_name(qtbot, window, load, tmp_path):
    name = "a_very_long_experiment_name_" * 6 + "rank0_snapshot.pickle"
    path = tmp_path / name
    shutil.copy(FRAG, path)
    opened(qtbot, window, load, path)
    settle(qtbot)
    fl, fmt = window.file_label, window.format_label
    assert fl.width() <= window.width() // 3
    assert fl.text() != name and "…" in fl.text() and fl.text().endswith(".pickle")
    assert name in fl.toolTip()
    assert fl.geometry().right() < fmt.geometry().left()
    assert window.settings_label.geometry().left() > fmt.geometry().right()


# --------------------------------------------------------------------------- 5. leaks
def test_leaked_memory_is_coloured_as_a_leak(qtbot, window, load):
    from vramscope.viewer._qt.widgets.category_colors import LEAK as LEAK_COLOR_INDEX

    opened(qtbot, window, load, LEAK)
    wiring = window.categories_wiring
    wiring.color_action.setChecked(True)
    settle(qtbot)
    bd = MemoryBreakdown.build(window.vs.doc.snap, window.vs.doc.timeline, window.vs.cursor_device)
    leaked = np.concatenate([lk.allocations for lk in bd.leaks])
    cats, palette = window.timeline.color_provider()
    assert (cats[leaked] == LEAK_COLOR_INDEX).all()
    assert len(palette) > LEAK_COLOR_INDEX
    # the segment map: the blocks of what the leak keeps at the cursor
    assert LEAK_COLOR_INDEX in wiring.overlay.drawn_categories()
    k = window.vs.cursor_k
    iv = bd.intervals
    live = leaked[(iv.start[leaked] <= k) & (iv.end[leaked] > k)]
    layout = window.map.item.layout
    addrs = window.vs.view_doc.snap.blocks.address[layout.blocks]
    at = np.isin(addrs, iv.addr[live])
    assert at.any() and (wiring.overlay.categories[at] == LEAK_COLOR_INDEX).all()
    # filtering by category still finds them under their category
    wiring.cv.set_category_filter([int(bd.category[live[0]])])
    settle(qtbot)
    assert wiring.overlay.keep is not None and wiring.overlay.keep[at].all()


def test_ctrl_c_copies_the_leaks_in_their_table_and_the_stack_elsewhere(qtbot, window, load):
    opened(qtbot, window, load, LEAK)
    wiring = window.categories_wiring
    window.tabs.setCurrentWidget(wiring.panel)
    settle(qtbot)
    table = wiring.panel.leaks.table
    window.activateWindow()
    table.setFocus()
    QApplication.clipboard().setText("")
    qtbot.keyClick(table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.clipboard().text() == wiring.panel.leaks.leaks[0].sentence()
