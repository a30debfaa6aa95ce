"""The Ranks window's split: what each rank's memory is, side by side - a table and
stacked bars that draw the model's numbers, made on the loader thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QPalette

from tests.conftest import DATA
from vramscope.viewer.model.categories import CATEGORY_LABELS, CATEGORY_NAMES
from vramscope.viewer.model.core.units import format_bytes
from vramscope.viewer.model.reports import ranks

REAL_DDP = DATA / "ddp_2ranks"  # torchrun on 2 x H200


@pytest.fixture
def shots(tmp_path) -> Path:
    out = Path(os.environ.get("VRAMSCOPE_SHOTS", tmp_path / "shots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def window(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.ranks.window import RanksWindow

    application()
    w = RanksWindow()
    qtbot.addWidget(w)
    w.resize(1440, 900)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def load(qtbot, w, directory) -> None:
    with qtbot.waitSignal(w.loadFinished, timeout=60000) as blocker:
        w.open_directory(directory)
    assert blocker.args == ["loaded"]


def table_rows(w) -> dict[str, list[str]]:
    t = w.split.table
    return {
        t.topLevelItem(i).text(0).strip(): [
            t.topLevelItem(i).text(c) for c in range(1, t.columnCount())
        ]
        for i in range(t.topLevelItemCount())
    }


def test_the_table_and_bars_are_the_models_split(window, qtbot, monkeypatch, shots):
    threads: list[threading.Thread] = []
    real = ranks.category_fields
    monkeypatch.setattr(
        ranks, "category_fields", lambda *a: threads.append(threading.current_thread()) or real(*a)
    )
    assert window.split.table.topLevelItemCount() == 0
    load(qtbot, window, REAL_DDP)
    # Made with the overview, on the loader's thread, once per rank.
    assert len(threads) == 2 and threading.main_thread() not in threads
    model = ranks.load_ranks(REAL_DDP, jobs=1)
    t = window.split.table
    assert [t.headerItem().text(c) for c in range(t.columnCount())] == [
        "Memory",
        *(f"rank {e.rank}" for e in model.ranks),
    ]
    rows = table_rows(window)
    labels = dict(zip(CATEGORY_NAMES, CATEGORY_LABELS))
    for name, label in labels.items():
        values = [e.categories_at_peak[name] for e in model.ranks]
        if any(values):
            assert rows.pop(label) == [format_bytes(v) for v in values], label
    assert rows.pop("in DDP buckets") == [
        format_bytes(e.ddp_bucket_bytes_at_peak) for e in model.ranks
    ]
    assert rows.pop("total") == [
        format_bytes(sum(e.categories_at_peak.values())) for e in model.ranks
    ]
    assert rows.pop("of it guessed") == [
        format_bytes(e.categories_guessed_bytes_at_peak) for e in model.ranks
    ]
    assert rows.pop("at event") == [str(e.categories_event) for e in model.ranks]
    assert rows.pop("device") == [str(e.categories_device) for e in model.ranks]
    assert not rows
    # One stacked bar per rank: each category's segment its bytes, in its colour.
    from vramscope.viewer._qt.widgets.category_colors import color
    from vramscope.viewer._qt.widgets.plotting import byte_unit

    bars = window.split.bars
    assert set(bars) == {
        n for n in CATEGORY_NAMES if any(e.categories_at_peak[n] for e in model.ranks)
    }
    _unit, size = byte_unit(max(sum(e.categories_at_peak.values()) for e in model.ranks))
    for name, item in bars.items():
        heights = item.opts["height"]
        assert [round(h * size) for h in heights] == [
            e.categories_at_peak[name] for e in model.ranks
        ]
        assert QColor(item.opts["brush"]).name() == color(name).name()
    last = bars[list(bars)[-1]].opts  # drawn last: its top is the rank's total
    tops = [round((last["y0"][i] + last["height"][i]) * size) for i in range(len(model.ranks))]
    assert tops == [sum(e.categories_at_peak.values()) for e in model.ranks]
    grab(window, shots / "ranks_split_light.png")


def test_dark_palette(window, qtbot, shots):
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    old = app.palette()
    dark = QPalette(old)
    dark.setColor(QPalette.ColorRole.Window, QColor("#202124"))
    dark.setColor(QPalette.ColorRole.Base, QColor("#17181a"))
    dark.setColor(QPalette.ColorRole.AlternateBase, QColor("#232428"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e8eaed"))
    dark.setColor(QPalette.ColorRole.WindowText, QColor("#e8eaed"))
    try:
        app.setPalette(dark)
        load(qtbot, window, REAL_DDP)
        # Drawn on the palette's background, the axes in its text colour.
        assert window.split.chart.backgroundBrush().color().name() == "#17181a"
        assert table_rows(window)["parameters"] == [
            format_bytes(e.categories_at_peak["parameter"]) for e in window.overview.ranks
        ]
        grab(window, shots / "ranks_split_dark.png")
    finally:
        app.setPalette(old)


def grab(window, path: Path) -> None:
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    assert window.grab().save(os.fspath(path), "PNG")
    assert path.stat().st_size > 10_000
