"""Help > Keyboard shortcuts / How to record a snapshot, and File > Export report: real
windows on real recordings, offscreen."""

from __future__ import annotations

import base64
import html.parser
from pathlib import Path

import pytest
from PySide6.QtCore import QByteArray, Qt
from PySide6.QtGui import QAction, QImage
from PySide6.QtWidgets import QApplication

DATA = Path(__file__).resolve().parents[1] / "data"
FRAG = DATA / "fragmentation_oom.pickle"
LEAK = DATA / "truth" / "gpt2_leak.pickle.xz"


def opened(qtbot, window, load, path):
    assert load(window, path, timeout=120000) == "loaded"
    # (the build starts after the window's first paint of the file: settled once shown)
    qtbot.waitUntil(window.categories_wiring.settled, timeout=120000)
    return window


# --------------------------------------------------------------------------- help
def test_shortcuts_dialog_lists_every_shortcut_of_the_window(qtbot, window):
    dialog = window.tools.show_shortcuts()
    qtbot.addWidget(dialog)
    listed = {(action, keys) for _menu, action, keys in dialog.rows}
    assert dialog.table.rowCount() == len(dialog.rows)
    expected = set()
    for a in window.findChildren(QAction):
        keys = [k for k in a.shortcuts() if not k.isEmpty()]
        if keys and a.text():
            expected.add(a.text().replace("&", "").rstrip("…").rstrip())
    assert expected <= {action for action, _ in listed}
    shown = {keys for _, keys in listed}
    for key in ("Ctrl+Shift+W", "Ctrl+Shift+M", "Ctrl+Shift+R", "Ctrl+E", "Ctrl+Shift+P"):
        assert key in shown
    menus = {menu for menu, _a, _k in dialog.rows}
    assert "View › Show only category" in menus


def test_record_dialog_gives_the_capture_command_and_torch_calls(qtbot, window):
    from vramscope.capture.runner import _parser  # the real CLI of ``python -m vramscope.capture``

    dialog = window.tools.show_record_help()
    qtbot.addWidget(dialog)
    command = dialog.capture.text
    assert command == "python -m vramscope.capture your_script.py"
    assert command.startswith(_parser(None).prog)
    calls = dialog.torch.text
    assert "torch.cuda.memory._record_memory_history(max_entries=" in calls
    assert 'torch.cuda.memory._dump_snapshot("snap.pickle")' in calls
    QApplication.clipboard().setText("")
    qtbot.mouseClick(dialog.capture.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == command
    qtbot.mouseClick(dialog.torch.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == calls


# --------------------------------------------------------------------------- export
class _Page(html.parser.HTMLParser):
    """The parts of a report page the test reads."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[list[str]] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.verdict = ""
        self._cls: list[str] = []
        self._in_figure = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class") or ""
        self._cls.append(cls)
        if tag == "td" and cls == "figure":
            self.figures.append([])
        if tag == "img":
            self.images.append(a.get("src") or "")
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith("data:"):
                self.links.append(a[key])
        if tag in ("link", "script"):
            self.links.append(tag)

    def handle_endtag(self, tag):
        if self._cls:
            self._cls.pop()

    def handle_data(self, data):
        cls = self._cls[-1] if self._cls else ""
        if cls in ("title", "value") and self.figures:
            self.figures[-1].append(data)
        if cls == "verdict":
            self.verdict += data


def _export(qtbot, window, path):
    export = window.export_report(str(path))
    with qtbot.waitSignal(export.finished, timeout=120000) as got:
        pass
    return got.args


def test_export_report_writes_a_self_contained_page(qtbot, make_window, load, tmp_path):
    from vramscope.viewer._qt.main_window.report_export import KEY_DIR
    from vramscope.viewer._qt.widgets import settings as st

    window = opened(qtbot, make_window(), load, FRAG)
    assert window.export_report_action.isEnabled()
    path = tmp_path / "out" / "report.html"
    path.parent.mkdir()
    outcome, detail = _export(qtbot, window, path)
    assert outcome == "done", detail
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    header = window.header
    assert page.figures == [
        [header.titles[k].text(), header.values[k].text()] for k in header.values
    ]
    assert page.verdict == header.oom_text() != ""
    assert not page.links, page.links  # nothing outside the file
    assert len(page.images) == 2  # the timeline and the segment map
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        image = QImage.fromData(QByteArray(base64.b64decode(src.split(",", 1)[1])), "PNG")
        assert not image.isNull() and image.width() > 300
    text = path.read_text(encoding="utf-8")
    assert "What would make it fit" in text and '<table class="remedies">' in text
    assert st.settings().value(KEY_DIR) == str(path.parent)


def test_export_report_says_what_the_memory_is_and_the_leaks(qtbot, window, load, tmp_path):
    window = opened(qtbot, window, load, LEAK)
    path = tmp_path / "leak.html"
    outcome, detail = _export(qtbot, window, path)
    assert outcome == "done", detail
    text = path.read_text(encoding="utf-8")
    bd = window.categories.bd
    assert '<table class="categories">' in text and '<table class="leaks">' in text
    assert bd.leaks[0].frame in text
    split = bd.split_at(window.vs.cursor_k)
    from vramscope.viewer.model.core.units import format_bytes

    assert format_bytes(sum(split.values())) in text


def test_export_report_can_be_cancelled(qtbot, window, load, tmp_path):
    window = opened(qtbot, window, load, FRAG)
    path = tmp_path / "never.html"
    export = window.export_report(str(path))
    export.job.cancel()
    with qtbot.waitSignal(export.finished, timeout=120000) as got:
        pass
    assert got.args[0] == "cancelled"
    assert not path.exists()


@pytest.mark.parametrize("doc", [None])
def test_export_needs_a_document(window, doc):
    assert window.vs.doc is doc
    assert not window.export_report_action.isEnabled()
    assert window.export_report("/nonexistent/x.html") is None
