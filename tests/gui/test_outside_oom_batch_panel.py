"""The Diagnosis panel after an OOM outside the allocator (cuBLAS could not create its
handle, tests/data/gpu_holder): no batch is claimed to fit the allocator's limit, in the
words of `vramscope advise` (a real event loop, offscreen)."""

from __future__ import annotations

from tests.gpu_verdicts import HOLDER


def test_the_panel_says_the_batch_is_not_judged_as_the_cli_does(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.diagnosis.panel import DiagnosisPanel
    from vramscope.viewer.model import load_snapshot

    application()
    panel = DiagnosisPanel(load_snapshot(HOLDER / "holder_cublas_oom.pickle.xz"))
    qtbot.addWidget(panel)
    panel.resize(1200, 760)
    panel.show()
    qtbot.waitExposed(panel)
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run()
    a = panel.advice
    assert a.largest_scale_that_fits is None and a.batch_not_judged
    assert panel.fit_label.text() == f"Largest batch that fits: not judged: {a.batch_not_judged}"
    assert "outside PyTorch's allocator (cuBLAS" in panel.fit_label.text()
