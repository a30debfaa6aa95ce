"""The Diff and Ranks windows on real snapshots, through the real loader threads.

Each test also grabs its window to a PNG under ``VRAMSCOPE_SHOTS`` (default:
pytest's tmp dir) so the result can be looked at.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from PySide6.QtCore import QPoint, QPointF, Qt

from tests.conftest import expected_for
from tests.model.test_ranks import make_rank_dir
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.view.document import Document


@pytest.fixture
def shots(tmp_path) -> Path:
    out = Path(os.environ.get("VRAMSCOPE_SHOTS", tmp_path / "shots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def grab(window, path: Path, size=(1440, 900)) -> None:
    """Lay the window out at ``size`` (the offscreen platform resizes windows on
    their first show, as app.render_window knows) and save it as a PNG."""
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    window.resize(*size)
    QApplication.processEvents()
    assert (window.width(), window.height()) == size
    assert window.grab().save(os.fspath(path), "PNG")
    assert path.stat().st_size > 10_000


@pytest.fixture
def diff_window(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.compare.diff_window import DiffWindow
    from vramscope.viewer._qt.widgets.stack_panel import StackPanel

    application()
    StackPanel.open_externally = False
    windows = []

    def make(a, b):
        w = DiffWindow()
        qtbot.addWidget(w)
        w.resize(1440, 900)
        w.show()
        qtbot.waitExposed(w)
        with qtbot.waitSignal(w.loadFinished, timeout=30000) as blocker:
            w.open(a, b)
        assert blocker.args == ["loaded"], w.last_error
        windows.append(w)
        return w

    yield make
    for w in windows:
        w.close()


def counters(name):
    return expected_for(DATA / f"{name}.pickle")["memory_stats"]


def test_diff_window_pair(diff_window, qtbot, shots):
    from vramscope.viewer._qt.compare.diff_window import GROWTH_RED, SHRINK_GREEN, highlight_count
    from vramscope.viewer.model.core.units import format_bytes

    w = diff_window(DATA / "resnet50_train.pickle", DATA / "gpt2_oom.pickle")
    d = w.diff
    ca, cb = counters("resnet50_train"), counters("gpt2_oom")
    key = "reserved_bytes.all.current"
    assert d.delta("reserved_bytes") == cb[key] - ca[key]
    assert w.header.delta_text("allocated_bytes") == "+" + format_bytes(
        cb["allocated_bytes.all.current"] - ca["allocated_bytes.all.current"]
    )
    assert "color: " + GROWTH_RED in w.header.cells["reserved_bytes"][2].styleSheet()
    assert "peak reserved" in w.header.peaks.text()
    # The table: every stack row, largest growth first, growth red and shrink green.
    items = w.row_items()
    assert len(items) == len(d.stacks)
    deltas = [d.stacks[it.data(0, Qt.ItemDataRole.UserRole + 1)].delta for it in items]
    assert deltas == sorted(deltas, reverse=True)
    assert items[0].foreground(0).color().name() == GROWTH_RED
    assert items[-1].foreground(0).color().name() == SHRINK_GREEN
    assert items[0].text(1) == "added" and items[-1].text(1) == "removed"
    # Clicking the top row highlights its blocks in B only (it is new) and shows its stack.
    w.stacks.setCurrentItem(items[0])
    top = d.stacks[items[0].data(0, Qt.ItemDataRole.UserRole + 1)]
    assert highlight_count(w.map_b) == top.count_b > 0
    assert highlight_count(w.map_a) == 0
    assert top.label in w.stack_panel.frame_texts()
    # A removed row lights up in A.
    w.stacks.setCurrentItem(items[-1])
    gone = d.stacks[items[-1].data(0, Qt.ItemDataRole.UserRole + 1)]
    assert highlight_count(w.map_a) == (
        gone.count_a if gone.key[0][0] != "<no stack recorded>" else 0
    )
    # The call tree holds the same bytes.
    root = w.tree.topLevelItem(0)
    assert root.text(1) == "+" + format_bytes(d.delta("active_bytes"))
    assert w.tree.topLevelItem(0).childCount() > 0
    w.tabs.setCurrentIndex(0)
    w.stacks.setCurrentItem(items[0])
    grab(w, shots / "diff_resnet50_vs_gpt2.png")


def test_diff_maps_zoom_and_scroll_together(diff_window, qtbot):
    w = diff_window(DATA / "fragmentation_oom.pickle", DATA / "capacity_oom.pickle")
    (xa, ya), (xb, yb) = w.view_ranges()
    assert np.allclose(xa, xb) and np.allclose(ya, yb)
    # Ctrl+wheel on A zooms bytes; the wheel scrolls rows: B follows both.
    w.map_a.vb.scaleBy((0.25, 1.0))
    w.map_a.vb.translateBy(y=12)
    qtbot.wait(10)
    (xa, ya), (xb, yb) = w.view_ranges()
    assert np.allclose(xa, xb) and np.allclose(ya, yb)
    assert xa[1] - xa[0] < 0.5 * 3.6e9
    # And the other way round.
    w.map_b.vb.translateBy(x=1 << 20, y=-3)
    qtbot.wait(10)
    (xa2, ya2), (xb2, yb2) = w.view_ranges()
    assert np.allclose(xa2, xb2) and np.allclose(ya2, yb2) and not np.allclose(ya2, ya)


def test_diff_match_modes_and_documents(diff_window, qtbot, shots):
    a = Document.build(load_snapshot(DATA / "whatif_default.pickle"))
    w = diff_window(a, DATA / "whatif_expandable.pickle")
    assert w.doc_a is a
    assert "added" in w.counts.text() and w.diff.by_status("added")
    w.set_match_mode("line")
    assert not w.diff.by_status("added") and len(w.diff.by_status("changed")) == 2
    assert "0 added" in w.counts.text() and "2 changed" in w.counts.text()
    ca, cb = counters("whatif_default"), counters("whatif_expandable")
    assert w.diff.delta("segment_count") == cb["segment.all.current"] - ca["segment.all.current"]
    grab(w, shots / "diff_whatif_by_line.png")


def test_diff_window_load_failure(qtbot, tmp_path):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.compare.diff_window import DiffWindow

    application()
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"nope")
    w = DiffWindow()
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.loadFinished, timeout=30000) as blocker:
        w.open(DATA / "capacity_oom.pickle", bad)
    assert blocker.args == ["failed"] and str(bad) in w.last_error
    qtbot.waitUntil(lambda: not w.is_loading())
    w.close()


# --------------------------------------------------------------------------- ranks


@pytest.fixture
def ranks_window(qtbot, tmp_path):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.ranks.window import RanksWindow

    application()
    w = RanksWindow()
    qtbot.addWidget(w)
    w.resize(1280, 820)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def test_ranks_window_overview(ranks_window, qtbot, tmp_path, shots):
    from vramscope.viewer._qt.ranks.window import BAR_BLUE, OUTLIER_RED

    d = make_rank_dir(tmp_path / "run")
    w = ranks_window
    with qtbot.waitSignal(w.loadFinished, timeout=30000) as blocker:
        w.open_directory(d)
    assert blocker.args == ["loaded"]
    assert w.table.topLevelItemCount() == 4
    ranks = [w.table.topLevelItem(i) for i in range(4)]
    assert [r.text(0) for r in ranks] == ["0", "1", "2", "3"]
    oom = counters("fragmentation_oom")
    from vramscope.viewer.model.core.units import format_bytes

    assert ranks[3].text(1) == format_bytes(oom["reserved_bytes.all.current"])
    assert ranks[3].text(6) == "yes" and ranks[3].text(7) == "yes"
    assert ranks[3].foreground(0).color().name() == OUTLIER_RED
    assert ranks[0].text(7) == "" and ranks[0].text(6) == "no"
    # Every file of a rank is listed under it; the OOM one is shown.
    assert ranks[3].childCount() == 2 and ranks[3].child(0).text(7) == "(shown)"
    assert "_oom_" in ranks[3].child(0).text(8)
    # The outlier is selected at once, its reasons below the table.
    assert w.table.currentItem() is ranks[3]
    assert "ran out of memory while other ranks did not" in w.reasons.text()
    assert "outlier rank: 3" in w.caption.text()
    # Small multiples: one chart per metric, rank 3 red, the others blue.
    assert set(w.chart.plots) == {
        "reserved_bytes",
        "allocated_bytes",
        "peak_reserved_bytes",
        "peak_allocated_bytes",
        "fragmentation",
    }
    assert w.chart.brushes["reserved_bytes"] == [BAR_BLUE] * 3 + [OUTLIER_RED]
    grab(w, shots / "ranks_overview.png", (1280, 820))
    # Clicking a bar selects its rank.
    w.chart.rankClicked.emit(1)
    assert w.table.currentItem() is ranks[1]
    # Double-click asks to open the rank's preferred file.
    with qtbot.waitSignal(w.openRequested) as opened:
        w._on_double_click(ranks[3], 0)
    assert opened.args[0].endswith("_rank3_cuda1_oom_20250301-142501-318.pickle")


def test_ranks_window_bar_click(ranks_window, qtbot, tmp_path):
    d = make_rank_dir(tmp_path / "run")
    w = ranks_window
    with qtbot.waitSignal(w.loadFinished, timeout=30000):
        w.open_directory(d)
    plot = w.chart.plots["reserved_bytes"]
    # A real click on the bar of rank 2 (x = 2), a quarter of the way up the plot.
    (_x0, _x1), (y0, y1) = plot.vb.viewRange()
    scene = plot.vb.mapViewToScene(QPointF(2.0, (y0 + y1) / 4))
    pos = w.chart.mapFromScene(scene)
    qtbot.mouseClick(w.chart.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(pos.x(), pos.y()))
    qtbot.waitUntil(
        lambda: w.table.currentItem() is not None and w.table.currentItem().text(0) == "2",
        timeout=3000,
    )


def test_ranks_window_failure(ranks_window, qtbot, tmp_path):
    with qtbot.waitSignal(ranks_window.loadFinished, timeout=30000) as blocker:
        ranks_window.open_directory(tmp_path)
    assert blocker.args == ["failed"]
    assert "no snapshot files with a rank" in ranks_window.caption.text()


# --------------------------------------------------------------------------- main window hooks


def test_main_window_compare_and_ranks(loaded, qtbot, tmp_path):
    window = loaded(DATA / "fragmentation_oom.pickle")
    assert window.compare_action.isEnabled()
    texts = [a.text() for a in window.menuBar().actions()[0].menu().actions()]
    assert "&Compare with…" in texts and "Open &directory of ranks…" in texts
    dw = window.compare_with(os.fspath(DATA / "capacity_oom.pickle"))
    qtbot.waitUntil(lambda: dw.diff is not None, timeout=30000)
    assert dw.doc_a is window.vs.doc
    assert (
        dw.diff.delta("allocated_bytes")
        == counters("capacity_oom")["allocated_bytes.all.current"]
        - counters("fragmentation_oom")["allocated_bytes.all.current"]
    )
    dw.close()

    rw = window.open_ranks(os.fspath(make_rank_dir(tmp_path / "run")))
    qtbot.waitUntil(lambda: rw.overview is not None, timeout=30000)
    # Double-clicking rank 0 opens its snapshot in the main window.
    with qtbot.waitSignal(window.loadFinished, timeout=30000):
        rw._on_double_click(rw.rank_item(0), 0)
    qtbot.waitUntil(lambda: not window.is_loading())
    assert "_rank0_" in window.vs.doc.snap.path
    assert (
        window.header.stats.reserved_bytes
        == counters("resnet50_train")["reserved_bytes.all.current"]
    )
    rw.close()


REAL_DDP = DATA / "ddp_2ranks"  # recorded with torchrun on 2 x H200 (tests/workloads/ddp_train.py)


def test_ranks_window_opens_a_real_torchrun_directory(ranks_window, qtbot, shots):
    """Rank 1 kept an extra 1 GiB; rank 0 caught one OOM: both are flagged."""
    w = ranks_window
    with qtbot.waitSignal(w.loadFinished, timeout=30000) as blocker:
        w.open_directory(REAL_DDP)
    assert blocker.args == ["loaded"]
    assert w.table.topLevelItemCount() == 2
    rank0, rank1 = (w.table.topLevelItem(i) for i in range(2))
    sidecar1 = json.loads(next(REAL_DDP.glob("*_rank1_*_exit_*.json")).read_text())
    from vramscope.viewer.model.core.units import format_bytes

    assert rank1.text(1) == format_bytes(sidecar1["memory_stats"]["reserved_bytes.all.current"])
    assert rank1.text(7) == "yes" and rank0.text(6) == "yes"
    assert rank0.childCount() == 2  # the OOM dump and the exit dump
    from vramscope.viewer._qt.ranks.window import BAR_BLUE, OUTLIER_RED

    # Red where a rank's own figure stands out: rank 1's +1 GiB, not rank 0's small
    # reserved (rank 0 is flagged for its OOM, which the table and outline show).
    assert w.chart.brushes["reserved_bytes"] == [BAR_BLUE, OUTLIER_RED]
    grab(w, shots / "ranks_real_torchrun.png", (1280, 820))


def test_screenshot_of_a_rank_directory(tmp_path):
    """`vramscope DIR --screenshot OUT.png` renders the rank overview."""
    import subprocess
    import sys

    from PySide6.QtGui import QImage

    out = tmp_path / "ranks.png"
    run = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", str(REAL_DDP), "--screenshot", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert run.returncode == 0, run.stderr
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1440, 900)
    empty = tmp_path / "empty"
    empty.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", str(empty), "--screenshot", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
