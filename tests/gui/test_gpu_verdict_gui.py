"""The GUI's OOM banner says what `summary` says when another process held the GPU
(the recordings of tests/data/gpu_accounting and gpu_holder, expected words from their
truth files), and explains an OOM outside the allocator, which has no trace event."""

from __future__ import annotations

from tests.gpu_verdicts import (
    HOLDER,
    cublas_verdict,
    derive_outside_oom,
    holder_verdict,
    load,
    truths,
)
from vramscope.viewer.model.analysis.oom import last_oom
from vramscope.viewer.model.io.load import load_snapshot


def test_the_banner_names_the_other_process_first(loaded):
    for truth_path in truths():
        truth, path, side = load(truth_path)
        snap = load_snapshot(path, use_cache=False)
        snap.sidecar = {k: v for k, v in snap.sidecar.items() if k != "gpu_memory"}
        verdict = holder_verdict(truth, side, last_oom(snap).verdict)
        window = loaded(path)
        assert window.header.banner.isVisible()
        assert window.header.oom_text() == (
            f"CUDA out of memory (device 0, large pool, stream 0): {verdict}"
        )


def test_the_banner_explains_an_oom_outside_the_allocator(loaded, tmp_path):
    path, want = derive_outside_oom(truths()[0], tmp_path)
    window = loaded(path)
    assert window.vs.doc.oom is None  # no allocator OOM in the trace
    assert window.header.banner.isVisible()
    assert window.header.oom_text() == (
        f"CUDA out of memory outside PyTorch's allocator (device 0, cuBLAS): {want['verdict']}"
    )
    assert "train.py:41 step" in window.header.banner.toolTip()


def test_the_banner_names_cublas_s_failure_the_holder_and_the_free_memory(loaded):
    truth, path, side = load(HOLDER / "holder_cublas_oom.truth.json")
    window = loaded(path)
    assert window.vs.doc.oom is None and window.header.banner.isVisible()
    assert window.header.oom_text() == (
        "CUDA out of memory outside PyTorch's allocator "
        f"(device 0, cuBLAS): {cublas_verdict(truth, side)}"
    )
