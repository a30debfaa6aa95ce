"""The compare window's "Other sizes" tab on a real pair (GPT-2 at batch 4 and 8, from
the zoo): the prediction runs in a job with progress and Cancel, and says what the
command line says for the same question (``whatif A --with B --batch 12 --sizes 4,8``),
the run at batch 12 (its point to the byte of its own recording's peak, its range holding
it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from tests.conftest import DATA

ZOO = DATA / "zoo"
A = ZOO / "dec_gpt2_sdpa_adamw_fp32_b4.pickle.xz"
B = ZOO / "dec_gpt2_sdpa_adamw_fp32_b8.pickle.xz"
TRUTH_12 = ZOO / "dec_gpt2_sdpa_adamw_fp32_b12.truth.json"


@pytest.fixture
def window(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.compare.diff_window import DiffWindow

    application()
    w = DiffWindow()
    qtbot.addWidget(w)
    w.resize(1440, 900)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.loadFinished, timeout=60000) as blocker:
        w.open(str(A), str(B))
    assert blocker.args == ["loaded"], w.last_error
    w.views.setCurrentWidget(w.two_sizes)
    yield w
    w.close()


def ask(pane, knob: str, a: int, b: int, target: float) -> None:
    pane.knob.setCurrentIndex(pane.knob.findData(knob))
    pane.size_a.setValue(a)
    pane.size_b.setValue(b)
    pane.target.setValue(target)


def test_other_sizes_predicts_the_cli_answer(window, qtbot):
    from vramscope.viewer.model.core.units import format_bytes

    pane = window.two_sizes
    ask(pane, "batch", 4, 8, 12)
    with qtbot.waitSignal(pane.finished, timeout=120000) as blocker:
        qtbot.mouseClick(pane.predict_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["done"], pane.text.toPlainText()
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "whatif", str(A), "--with", str(B)]
        + ["--batch", "12", "--sizes", "4,8", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert pane.result.peak == row["peak_reserved_bytes"]
    assert pane.result.peak == json.loads(TRUTH_12.read_text())["peak_reserved_bytes"]
    text = pane.text.toPlainText()
    # Beyond both recordings: an estimate whose range is the CLI's and holds the real run.
    assert text.splitlines()[0] == "batch 12 (from A=4, B=8) (estimate)"
    est = row["peak_reserved_estimate"]
    assert f"peak reserved: {format_bytes(est['low_bytes'])} to " in text
    real = json.loads(TRUTH_12.read_text())["peak_reserved_bytes"]
    assert est["low_bytes"] <= real <= est["high_bytes"]
    assert "have one size in A and in B" in text
    assert "from two recordings: all 1,746 allocations matched" in text
    assert not pane.progress.isVisible() and pane.predict_button.isEnabled()


def test_other_sizes_cancel_and_a_bad_question(window, qtbot):
    pane = window.two_sizes
    ask(pane, "batch", 4, 8, 12)
    with qtbot.waitSignal(pane.finished, timeout=30000) as blocker:
        qtbot.mouseClick(pane.predict_button, Qt.MouseButton.LeftButton)
        assert pane.is_running() and pane.cancel_button.isVisible()
        qtbot.mouseClick(pane.cancel_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["cancelled"]
    assert "cancelled" in pane.text.toPlainText()
    assert pane.predict_button.isEnabled()
    # Sizes unknown and nothing changed size cannot happen here; a scale is fine: x3 of A.
    ask(pane, "batch", 0, 0, 3)
    with qtbot.waitSignal(pane.finished, timeout=120000) as blocker:
        qtbot.mouseClick(pane.predict_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["done"], pane.text.toPlainText()
    assert "inferred from the matched allocations" in pane.text.toPlainText()
    assert pane.result.peak == json.loads(TRUTH_12.read_text())["peak_reserved_bytes"]
