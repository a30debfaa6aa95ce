"""The header says when what it shows is not exact: the OOM banner of an OOM
inside an untrusted stretch carries the mark and its reason; the figures at a moment
inside such a stretch are prefixed with ≈ and tagged, the reason as tooltip."""

from __future__ import annotations

import os

import numpy as np
from PySide6.QtCore import Qt

from tests.model.test_oom_exactness import cut_ring
from vramscope.viewer.model.core.snapshot import Action


def test_banner_and_figures_say_not_exact_inside_the_estimated_stretch(qtbot, loaded, tmp_path):
    window = loaded(cut_ring(tmp_path / "cut.pickle"))
    header, tl = window.header, window.timeline
    first, last = window.vs.doc.ooms
    assert not first.exact and last.exact
    rep = window.vs.doc.timeline.replay(0)
    ks = np.flatnonzero(rep.action == Action.OOM).tolist()
    window.set_cursor(ks[1])  # the last OOM: exact
    assert "not exact" not in header.oom_text() and header.exactness_text() == ""
    assert not header.values["reserved_bytes"].text().startswith("\u2248")
    qtbot.mouseClick(tl.prev_oom_button, Qt.MouseButton.LeftButton)
    assert window.vs.cursor_k == ks[0]
    assert "OOM 1 of 2" in header.oom_text()
    assert header.oom_text().endswith(f"\u2014 not exact: {first.not_exact_reason}")
    assert first.not_exact_reason in header.banner.toolTip()
    assert "estimated at this moment" in header.exactness_text()
    assert first.not_exact_reason in header.exactness.toolTip()
    assert all(v.text().startswith("\u2248 ") for v in header.values.values())
    assert first.not_exact_reason in header.values["allocated_bytes"].toolTip()
    if os.environ.get("VRAMSCOPE_SHOT"):  # a look at it: VRAMSCOPE_SHOT=out.png pytest ...
        qtbot.wait(100)  # the layout's deferred update (wider figures)
        window.grab().save(os.environ["VRAMSCOPE_SHOT"])
    window.set_cursor(len(rep) - 1)  # the recorded snapshot: exact again
    assert header.exactness_text() == ""
    assert not header.values["reserved_bytes"].text().startswith("\u2248")
    assert "not exact" not in header.oom_text()
