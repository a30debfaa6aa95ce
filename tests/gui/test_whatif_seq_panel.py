"""The What-if panel's sequence-length control with a real event loop (offscreen): the rows
are the model's estimates with their ranges, a CNN is refused in the model's words, a bad
scale is one line."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.gui.conftest import DATA

ZOO = DATA / "zoo"


def make_panel(qtbot, name: str):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.whatif.panel import WhatIfPanel
    from vramscope.viewer.model import load_snapshot

    application()
    p = WhatIfPanel(load_snapshot(ZOO / name))
    qtbot.addWidget(p)
    p.resize(1200, 760)
    p.show()
    qtbot.waitExposed(p)
    return p


def test_sequence_scale_rows_are_the_models_estimates(qtbot):
    from vramscope.viewer.model.remedies import seq_scale
    from vramscope.viewer.model.remedies.batch_ranges import range_words
    from vramscope.viewer.model.whatif import prepare

    panel = make_panel(qtbot, "dec_gpt2_eager_adamw_bf16_b8.pickle.xz")
    panel.set_checked(["expandable_segments:True"])
    panel.seq_edit.setText("2")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert panel.error.text() == ""
    assert panel.table.rowCount() == 2
    case = prepare(panel.snap)
    j = seq_scale.judge(case)
    for row, conf in enumerate(["recorded", "expandable_segments:True"]):
        want = seq_scale.predict_at(case, j, 2.0, "x", conf, panel.preds[row].limit)
        assert want.estimate is not None
        assert panel.table.item(row, 1).text() == range_words(want.estimate.low, want.estimate.high)
        assert panel.table.item(row, 0).text().startswith("seq x2 (estimate)")
        assert "an estimate" in panel.table.item(row, 1).toolTip()
    # Emptied again: the recorded run's row as before.
    panel.seq_edit.setText("")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert panel.table.item(0, 0).text().startswith("recorded: ")


def test_a_cnn_is_refused_in_the_models_words(qtbot):
    from vramscope.viewer.model.remedies.seq_scale import NO_SEQUENCE

    panel = make_panel(qtbot, "tv_resnet18_sgdm_fp32_b16.pickle.xz")
    panel.seq_edit.setText("2")
    with qtbot.waitSignal(panel.finished, timeout=120000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert NO_SEQUENCE in panel.summary.text() + panel.error.text()


@pytest.mark.parametrize("text", ["0", "-2", "two", "inf"])
def test_a_bad_scale_is_one_line(qtbot, text):
    panel = make_panel(qtbot, "dec_gpt2_eager_adamw_bf16_b8.pickle.xz")
    panel.seq_edit.setText(text)
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert panel.thread is None
    assert "not a positive number" in panel.error.text()
