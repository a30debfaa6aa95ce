"""File > Export report on real windows, offscreen: right after the file loads (what the
memory is still being computed) the export waits for it without freezing the window,
and can be cancelled while it waits; a file of several GPUs gets one section per
device, the device that ran out of memory first."""

from __future__ import annotations

import base64
import re
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QByteArray
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QPushButton

from tests import shared_data
from vramscope.viewer.model.categories import MemoryBreakdown

DATA = Path(__file__).resolve().parents[1] / "data"
FRAG = DATA / "fragmentation_oom.pickle"
THREE_GPUS = shared_data.EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"


@pytest.fixture
def held_breakdown(monkeypatch):
    """What the memory is is built only once the returned event is set (a slow build,
    made deterministic); set at the end of the test whatever happens."""
    gate = threading.Event()
    build = MemoryBreakdown.build

    def held(cls, *args, **kwargs):
        gate.wait(120)
        return build(*args, **kwargs)

    monkeypatch.setattr(MemoryBreakdown, "build", classmethod(held))
    yield gate
    gate.set()


def _images(text: str) -> dict[str, QImage]:
    out = {}
    for alt, src in re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([^"]+)"', text):
        out[alt] = QImage.fromData(QByteArray(base64.b64decode(src)), "PNG")
    return out


def test_export_right_after_load_waits_for_what_the_memory_is(
    qtbot, window, load, held_breakdown, tmp_path
):
    gate = held_breakdown
    assert load(window, FRAG, timeout=120000) == "loaded"
    assert window.categories.bd is None  # (still being built)
    path = tmp_path / "early.html"
    export = window.export_report(str(path))
    ended = []
    export.finished.connect(lambda outcome, detail: ended.append((outcome, detail)))
    qtbot.wait(400)  # the event loop runs meanwhile: the window is not frozen
    assert not ended and export.job is None and not path.exists()
    assert export.dialog.isVisible() and "what the memory is" in export.dialog.labelText()
    gate.set()
    qtbot.waitUntil(lambda: bool(ended), timeout=120000)
    assert ended[0][0] == "done", ended
    text = path.read_text(encoding="utf-8")
    bd = window.categories.bd
    assert bd is not None
    k = window.vs.cursor_k
    assert '<table class="categories">' in text
    assert f"What the memory is (device {bd.device}, after event {k:,})" in text
    # The views as laid out in the window, not before its layout settled.
    images = _images(text)
    timeline = next(img for alt, img in images.items() if alt.startswith("Timeline"))
    ratio = window.timeline.devicePixelRatioF()
    assert (timeline.width(), timeline.height()) == (
        round(window.timeline.width() * ratio),
        round(window.timeline.height() * ratio),
    )


def test_export_can_be_cancelled_while_it_waits(qtbot, window, load, held_breakdown, tmp_path):
    gate = held_breakdown
    assert load(window, FRAG, timeout=120000) == "loaded"
    path = tmp_path / "never.html"
    export = window.export_report(str(path))
    with qtbot.waitSignal(export.finished, timeout=30000) as got:
        export.dialog.findChild(QPushButton).click()  # the dialog's Cancel
    assert got.args[0] == "cancelled"
    gate.set()
    qtbot.wait(200)
    assert not path.exists()


def _export(qtbot, window, path, devices=None):
    export = window.export_report(str(path), devices=devices)
    with qtbot.waitSignal(export.finished, timeout=300000) as got:
        pass
    assert got.args[0] == "done", got.args
    return path.read_text(encoding="utf-8")


@shared_data.MARK
def test_a_file_of_three_gpus_has_a_section_each_the_oom_device_first(
    qtbot, window, load, tmp_path
):
    path = shared_data.require(THREE_GPUS)
    assert load(window, path, timeout=120000) == "loaded"
    oom_device = window.vs.doc.oom.device
    text = _export(qtbot, window, tmp_path / "all.html")
    ids = re.findall(r'<section class="device" id="device-(\d+)">', text)
    assert len(ids) == 3 and ids[0] == str(oom_device)
    assert "This file has 3 devices (0, 1, 2); this report covers all of them" in text
    # Every section has its figures, verdict (the OOM's device only) and remedies.
    parts = text.split('<section class="device"')[1:]
    for sid, part in zip(ids, parts):
        assert '<table class="figures">' in part and "What would make it fit" in part, sid
        assert ('class="verdict"' in part) == (sid == str(oom_device)), sid
        assert '<table class="remedies">' in part, sid
    # The window's views belong to the device the window shows.
    assert "<img" in parts[0] and all("<img" not in p for p in parts[1:])


@shared_data.MARK
def test_a_report_of_one_gpu_of_three_says_which_it_leaves_out(qtbot, window, load, tmp_path):
    path = shared_data.require(THREE_GPUS)
    assert load(window, path, timeout=120000) == "loaded"
    text = _export(qtbot, window, tmp_path / "one.html", devices=[0])
    assert re.findall(r'<section class="device" id="device-(\d+)">', text) == ["0"]
    assert "This file has 3 devices (0, 1, 2); this report covers device 0 (not 1, 2)" in text


def _text_of(page: str) -> str:
    """The page without its images and its date (what may differ between two exports)."""
    page = re.sub(r'<img alt="[^"]*" src="data:[^"]+">', "<img>", page)
    return re.sub(r"Made by vramscope [^<]*", "", page)


def test_vramscope_report_writes_the_page_file_export_report_writes(qtbot, window, load, tmp_path):
    import subprocess
    import sys

    cli = tmp_path / "cli.html"
    got = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "report", str(FRAG), "-o", str(cli)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert got.returncode == 0, got.stderr
    assert load(window, FRAG, timeout=120000) == "loaded"
    gui = _export(qtbot, window, tmp_path / "gui.html")
    assert _text_of(gui) == _text_of(cli.read_text(encoding="utf-8"))
    assert gui.count("<img") == 2
