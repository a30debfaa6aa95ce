"""The breakdown built with the intervals on a second thread (large traces, several cores)
equals the one built on one thread, column for column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from tests.native_gate import skip_unless
from vramscope.viewer.model.categories import MemoryBreakdown
from vramscope.viewer.model.categories import breakdown as report
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay import native_loop as _nat
from vramscope.viewer.model.replay.timeline import build_timeline, oom_events

DATA = Path(__file__).resolve().parents[1] / "data"
EXTERNAL = shared_data.EXTERNAL
FILES = [
    DATA / f
    for f in (
        "transformer_long_python_1000k.pickle.xz",
        "gpt2_oom.pickle",
        "cuda_graph_pool.pickle",
        "side_stream_pending.pickle",
    )
] + [shared_data.param(EXTERNAL / "JasperSolt_EoR_NN-snapshot.pickle.xz")]


def _build(path, overlap: bool, monkeypatch):
    monkeypatch.setattr(report, "OVERLAP_MIN_EVENTS", 0 if overlap else 1 << 62)
    monkeypatch.setattr(report.os, "cpu_count", lambda: 2)
    snap = load_snapshot(path)
    tl = build_timeline(snap, keyframes=False, emit=oom_events(snap))
    rep = tl.replay(min(tl.devices))
    assert report._overlap(rep) == (overlap and rep.native and _nat._core is not None)
    return MemoryBreakdown.build(snap, tl)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_overlapped_build_is_identical(path, monkeypatch):
    if path.parent == EXTERNAL:  # others' files, not always there
        shared_data.require(path)
    skip_unless(_nat._core is not None, "no native replay core: nothing runs on a second thread")
    a = _build(path, True, monkeypatch)
    b = _build(path, False, monkeypatch)
    for col in ("start", "end", "requested", "stack", "addr", "size"):
        np.testing.assert_array_equal(getattr(a.intervals, col), getattr(b.intervals, col))
    np.testing.assert_array_equal(a.category, b.category)
    np.testing.assert_array_equal(a.reason, b.reason)
    np.testing.assert_array_equal(a.phases.phase, b.phases.phase)
    assert [it.to_dict() for it in a.iterations] == [it.to_dict() for it in b.iterations]
    assert [lk.to_dict() for lk in a.leaks] == [lk.to_dict() for lk in b.leaks]
    np.testing.assert_array_equal(a.requested, b.requested)
