"""``vramscope FILE --screenshot OUT.png --view NAME --color-by MODE --device N --at EVENT``:
the screenshot of a chosen view, drawn by driving the real window (its tabs, View > Colour
by category, the device selector, the Timeline menu, the Tools panels), after the work
off the GUI thread has ended; wrong values are one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA  # (tests/gui/conftest.py)
from PySide6.QtGui import QColor, QImage

GEN = DATA / "truth" / "generate_gpt2_fp32.pickle.xz"  # a generation run: no OOM, one device
OOM = DATA / "gpt2_oom.pickle"

SHOT_ARGS = dict(view=None, color_by=None, device=None, at=None, timeout=None)
_shots: dict[tuple, str] = {}  # (file, options) -> PNG: each picture rendered once
_drawn: dict[tuple, dict] = {}  # (file, options) -> what the shot widget held (drawn_facts)


def drawn_facts(widget) -> dict:
    """What the widget a screenshot is of holds as it is saved: its class, the widget the
    view shows (the main window's current tab, else the panel's table) with its place in
    the picture and its own rendering, and the rows and plotted points it draws."""
    from PySide6.QtCore import QPoint

    tabs = getattr(widget, "tabs", None)
    shown = tabs.currentWidget() if tabs is not None else widget.table
    corner = shown.mapTo(widget, QPoint(0, 0))
    if tabs is not None:
        named = {"table": widget.table, "calltree": widget.calltree}
        named["categories"] = widget.categories_wiring.panel
        name = next((n for n, w in named.items() if w is shown), type(shown).__name__)
    else:
        name = "table"
    facts = {
        "widget": type(widget).__name__,
        "shown": name,
        "rect": (corner.x(), corner.y(), shown.width(), shown.height()),
        "own": shown.grab().toImage(),
    }
    if tabs is not None:  # the blocks' rows, the call tree's top rows, the breakdown's
        facts["rows"] = {
            "table": lambda: widget.table.model.rowCount(),
            "calltree": lambda: widget.calltree.tree.topLevelItemCount(),
            "categories": lambda: len(widget.categories_wiring.panel.bd.requested),
        }[name]()
    else:
        facts["rows"] = widget.table.rowCount()
        items = widget.plot.getPlotItem().listDataItems()
        xs = [i.getData()[0] for i in items]
        facts["points"] = sum(len(x) for x in xs if x is not None)
    return facts


def shoot(tmp_path_factory, path=GEN, **opts) -> str:
    """The PNG of ``vramscope PATH --screenshot OUT --view ...`` (in this process)."""
    from vramscope.viewer._qt import app
    from vramscope.viewer.commands import gui

    key = (os.fspath(path), tuple(sorted(opts.items())))
    if key not in _shots:
        out = tmp_path_factory.mktemp("shot") / "shot.png"
        args = argparse.Namespace(
            file=os.fspath(path), screenshot=os.fspath(out), **{**SHOT_ARGS, **opts}
        )
        save = app._save

        def saved(widget, out, pixmap=None):
            _drawn[key] = drawn_facts(widget)
            return save(widget, out, pixmap)

        app._save = saved
        try:
            assert gui.main(args) == 0
        finally:
            app._save = save
        _shots[key] = os.fspath(out)
    return _shots[key]


def as_rgb(img: QImage) -> np.ndarray:
    img = img.convertToFormat(QImage.Format.Format_RGB32)
    flat = np.frombuffer(img.constBits(), np.uint32, img.width() * img.height()).copy()
    return (flat & 0xFFFFFF).reshape(img.height(), img.width())


def pixels(png: str) -> np.ndarray:
    """(height, width) RGB as 0xRRGGBB of ``png``, checked to be 1440x900."""
    img = QImage(png)
    assert not img.isNull()
    assert (img.width(), img.height()) == (1440, 900)
    return as_rgb(img)


def category_counts(rgb: np.ndarray) -> dict[str, int]:
    """Pixels of each category's colour (the model's scheme, which every view paints)."""
    from vramscope.viewer.model.categories import CATEGORY_COLORS

    return {
        name: int((rgb == (QColor(c).rgb() & 0xFFFFFF)).sum())
        for name, c in CATEGORY_COLORS.items()
    }


def test_the_command_line_offers_the_views_the_window_draws():
    from vramscope.viewer._qt import app
    from vramscope.viewer.cli import gui_parser
    from vramscope.viewer.commands import gui

    assert tuple(gui.SCREENSHOT_VIEWS) == app.VIEWS
    assert gui.COLOR_MODES == app.COLOR_MODES
    text = gui_parser().format_help()
    for name in app.VIEWS:
        assert name in text
    for option in ("--view", "--color-by", "--device", "--at", "--timeout"):
        assert option in text


SHOWN = {  # the view -> the widget shot, the widget it shows (see drawn_facts)
    "blocks": ("MainWindow", "table"),
    "calltree": ("MainWindow", "calltree"),
    "categories": ("MainWindow", "categories"),  # the What it is tab
    "diagnosis": ("DiagnosisPanel", "table"),
    "whatif": ("WhatIfPanel", "table"),
}


@pytest.mark.parametrize("view", list(SHOWN))
def test_every_view_is_a_1440x900_png_of_that_view(tmp_path_factory, qapp, view):
    """The PNG is the view's widget: where the view's tab (or the panel's table) lies in
    the picture, the pixels are that widget's own rendering, and a panel's table and
    chart hold the job's rows and curves."""
    key = (os.fspath(GEN), (("view", view),))
    rgb = pixels(shoot(tmp_path_factory, view=view))
    facts = _drawn[key]
    widget, shown = SHOWN[view]
    assert (facts["widget"], facts["shown"]) == (widget, shown)
    x, y, w, h = facts["rect"]
    assert w > 200 and h > 100, facts["rect"]
    own = as_rgb(facts["own"])
    assert own.shape == (h, w)
    assert np.array_equal(rgb[y : y + h, x : x + w], own), view
    assert facts["rows"] > 0, facts
    if widget != "MainWindow":
        assert facts["points"] > 0, facts


def test_the_views_are_different_pictures(tmp_path_factory, qapp):
    from vramscope.viewer._qt.app import VIEWS

    images = {v: pixels(shoot(tmp_path_factory, view=v)) for v in VIEWS}
    default = pixels(shoot(tmp_path_factory))
    assert np.array_equal(default, images["blocks"])  # the default: the window as it opens
    for i, a in enumerate(VIEWS):
        for b in VIEWS[i + 1 :]:
            # (a few pixels could differ by chance: a view is most of the picture)
            assert (images[a] != images[b]).mean() > 0.05, (a, b)


def test_colour_by_category_paints_the_category_colours(tmp_path_factory, qapp):
    """By code site only the header's small split bar has category colours; by category
    the timeline's allocations and the segment map's blocks are painted in them."""
    site = category_counts(pixels(shoot(tmp_path_factory, color_by="site")))
    by_cat = category_counts(pixels(shoot(tmp_path_factory, color_by="category")))
    painted = [name for name, n in by_cat.items() if n > 5000]
    assert len(painted) >= 2, by_cat
    assert "parameter" in painted
    assert not [name for name, n in site.items() if n > 5000], site
    assert site == category_counts(pixels(shoot(tmp_path_factory)))  # the default: by site


def test_categories_view_shows_the_what_it_is_tab(tmp_path_factory, qapp):
    """The bottom area is the What it is tab: its split bar across the tab in the
    category colours (the Blocks tab has only small swatches there)."""
    tab = pixels(shoot(tmp_path_factory, view="categories", color_by="category"))
    blocks = pixels(shoot(tmp_path_factory, color_by="category"))
    bottom = slice(540, 880), slice(0, 1000)
    in_tab = sum(category_counts(tab[bottom]).values())
    in_blocks = sum(category_counts(blocks[bottom]).values())
    assert in_tab > 10_000 > in_blocks, (in_tab, in_blocks)


def test_at_moves_the_cursor(tmp_path_factory, qapp):
    """--at: another moment, another picture (the header's figures, the map, the cursor);
    latest is where this recording opens."""
    latest = pixels(shoot(tmp_path_factory, at="latest"))
    assert np.array_equal(latest, pixels(shoot(tmp_path_factory)))
    peak = pixels(shoot(tmp_path_factory, at="peak"))
    early = pixels(shoot(tmp_path_factory, at="1000"))
    assert (peak != latest).mean() > 0.01
    assert (early != peak).mean() > 0.01


def test_at_oom_on_a_recording_with_an_oom(tmp_path_factory, qapp):
    oom = pixels(shoot(tmp_path_factory, OOM, at="oom"))
    assert np.array_equal(oom, pixels(shoot(tmp_path_factory, OOM)))  # it opens there
    assert (oom != pixels(shoot(tmp_path_factory, OOM, at="100"))).mean() > 0.01


def test_device_picks_the_device_selector(tmp_path_factory, qapp):
    """One device: the window opens on "All devices" (--device all); --device 0 picks
    "Device 0", its only GPU: the same segments, another selector and scope line."""
    every = pixels(shoot(tmp_path_factory, device="all"))
    assert np.array_equal(every, pixels(shoot(tmp_path_factory)))
    zero = pixels(shoot(tmp_path_factory, device="0"))
    changed = np.flatnonzero((zero != every).any(axis=1))
    assert len(changed) and changed.max() < 130  # the toolbar and the header's lines only


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """gpt2_oom.pickle as device 0 and fragmentation_oom.pickle as device 1, one file."""
    import pickle

    with open(OOM, "rb") as f:
        snap = pickle.load(f)
    with open(DATA / "fragmentation_oom.pickle", "rb") as f:
        other = pickle.load(f)
    for seg in other["segments"]:
        seg["device"] = 1
    snap["segments"] += other["segments"]
    snap["device_traces"].append(other["device_traces"][0])
    path = tmp_path_factory.mktemp("two") / "two_devices.pickle"
    path.write_bytes(pickle.dumps(snap))
    return path


def test_device_of_a_multi_device_file(tmp_path_factory, qapp, two_devices):
    """--device 1: device 1's segments and trace, coloured by its own breakdown (built
    after the selector changed device, and waited for)."""
    zero = pixels(shoot(tmp_path_factory, two_devices, device="0", color_by="category"))
    one = pixels(shoot(tmp_path_factory, two_devices, device="1", color_by="category"))
    assert (zero != one).mean() > 0.2
    counts = category_counts(one)
    assert counts["temporary"] > 50_000, counts  # fragmentation_oom: all temporaries
    assert counts["temporary"] > 10 * category_counts(zero)["temporary"]


# --------------------------------------------------------------------------- errors


def run_gui(capsys, path=GEN, **opts):
    """``gui.main`` with ``opts``: (exit code, stderr lines, the PNG's path)."""
    from vramscope.viewer.commands import gui

    out = os.fspath(path) + ".never.png" if path else "never.png"
    args = argparse.Namespace(
        file=os.fspath(path) if path else None,
        screenshot=opts.pop("screenshot", out),
        **{**SHOT_ARGS, **opts},
    )
    code = gui.main(args)
    return code, capsys.readouterr().err.strip().splitlines(), out


@pytest.mark.parametrize(
    "opts, words",
    [
        (dict(view="timeline"), "--view timeline: not a view (one of: blocks, calltree"),
        (dict(color_by="rainbow"), "--color-by rainbow: one of: site, category"),
        (dict(device="gpu1"), "--device gpu1: a device number"),
        (dict(device="3"), "no device 3 in this snapshot (--device: all, 0)"),
        (dict(at="soon"), "--at soon: an event number"),
        (dict(at="-1"), "--at -1: an event number"),
        (dict(at="999999999"), "--at 999999999: device 0's trace has events 0 to 164,405"),
        (dict(at="oom"), "--at oom: no out-of-memory event in device 0's trace"),
        (dict(timeout="0"), "--timeout 0: a number of seconds above 0"),
        (dict(view="categories", screenshot=None), "--view: only with --screenshot OUT.png"),
    ],
)
def test_wrong_values_are_one_line_and_exit_2(qapp, capsys, opts, words):
    code, err, out = run_gui(capsys, **opts)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("vramscope: error: "), err
    assert words in err[0]
    assert not os.path.exists(out)


def test_wrong_value_from_a_shell_no_traceback(tmp_path):
    out = tmp_path / "o.png"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramscope.viewer",
            os.fspath(GEN),
            "--screenshot",
            os.fspath(out),
            "--view",
            "nope",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "vramscope: error: --view nope: not a view (one of: blocks, calltree, categories, "
        "diagnosis, whatif)"
    ]
    assert not out.exists()


def test_categories_never_computed_time_out_with_one_line(qapp, capsys, monkeypatch):
    """A breakdown that never ends: the screenshot gives up after --timeout with one line,
    the GUI thread turning meanwhile (its worker is cancelled when the window closes)."""
    import time

    from PySide6.QtCore import QTimer

    from vramscope.viewer._qt.categories import panel

    def forever(self):
        while not self.cancel_event.is_set():
            time.sleep(0.01)

    monkeypatch.setattr(panel.BreakdownThread, "run", forever)
    ticks = []
    timer = QTimer(interval=50)
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start()
    code, err, out = run_gui(capsys, view="categories", color_by="category", timeout="1.5")
    timer.stop()
    assert code == 2
    assert len(err) == 1
    assert "the memory categories were not computed within 1.5 s" in err[0]
    assert len(ticks) >= 10  # the event loop ran while waiting: no freeze
    assert not os.path.exists(out)


def test_at_moves_the_what_it_is_tab_too(tmp_path_factory, qapp):
    """The tab draws its breakdown at the peak of requested bytes when it lands; with
    --at its split and cursor are at the moment asked for, as the header's."""
    opened = pixels(shoot(tmp_path_factory, view="categories", color_by="category"))
    at = pixels(shoot(tmp_path_factory, view="categories", color_by="category", at="60000"))
    tab = slice(540, 880), slice(0, 1000)
    assert (opened[tab] != at[tab]).mean() > 0.002  # (without: 0, the same picture)
