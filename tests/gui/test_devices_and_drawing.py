"""What a new user saw in the window: "All devices" showing one device, another device's
OOM in the stack panel, the OOM ruler cut at the map's edge, a screenshot taken before the
header's "What it is" line was drawn, every other map row unlabelled and an empty Leaks
chart.  Real windows (offscreen), real files, a real event loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication


DATA = Path(__file__).resolve().parents[1] / "data"
GPT2 = DATA / "gpt2_oom.pickle"
EXTERNAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "external"
SUN = EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"  # 3 devices
NESTA = EXTERNAL / "Nesta-gitU_discrete_diffusion-memory_snapshot.json.xz"  # 384 MiB request


def shared(path: Path) -> Path:
    """A file of ../shared: missing is a failure, never a skip (CI must have them)."""
    assert path.exists(), f"{path} missing: the tests need ../shared/external"
    return path


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
        qtbot, window, load, build_ends_first):
    assert load(window, GPT2) == "loaded"
    panel = window.categories_wiring.panel
    qtbot.waitUntil(lambda: panel.bd is not None, timeout=60000)
    settle(qtbot)
    split = window.categories_wiring.header_split
    k = window.cursor_k
    assert split.split == panel.bd.split_at(k) and sum(split.split.values()) > 0
    assert split.text.text().startswith(
        f"{sum(panel.bd.split_at(k).values()) / 2**30:.2f} GiB")


def test_screenshot_waits_for_the_header_split(qtbot, tmp_path, monkeypatch, build_ends_first):
    """``--screenshot``'s own path (app.screenshot): the PNG is grabbed once the header's
    "What it is" line shows the breakdown at the cursor."""
    from vramscope.viewer._qt import app as qtapp

    seen = {}
    save = qtapp._save

    def spy(window, out, pixmap=None):
        wiring = window.categories_wiring
        seen.update(split=dict(wiring.header_split.split), bd=wiring.panel.bd,
                    k=window.cursor_k, text=wiring.header_split.text.text())
        return save(window, out, pixmap)

    monkeypatch.setattr(qtapp, "_save", spy)
    out = tmp_path / "shot.png"
    assert qtapp.screenshot(str(GPT2), str(out)) == (0, "")
    assert out.stat().st_size > 0
    assert seen["bd"] is not None
    assert seen["split"] == seen["bd"].split_at(seen["k"]) and seen["text"]
