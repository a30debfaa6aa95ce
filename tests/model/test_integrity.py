"""integrity: a broken recording is named precisely (first inconsistent event and why),
never shown as exact; a wrapped ring's inferred sizes are labelled estimates."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tests.conftest import DATA
from tests.native_gate import needs
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core.snapshot import Action, Trace
from vramscope.viewer.model.replay import native_available
from vramscope.viewer.model.replay.integrity import check, final_difference
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports.summary import summarize

LOOPS = [False, True] if native_available() else [False]
needs(native_available(), "replay_core extension not built")  # under the gate: required


def without_rows(snap, drop):
    keep = np.setdiff1d(np.arange(len(snap.trace)), np.asarray(drop))
    return dataclasses.replace(
        snap,
        trace=Trace(
            **{f.name: getattr(snap.trace, f.name)[keep] for f in dataclasses.fields(Trace)}
        ),
    )


@pytest.mark.parametrize("native", LOOPS)
def test_a_lost_alloc_is_named_at_the_first_event_it_breaks(native, loaded_snapshots, monkeypatch):
    if not native:
        monkeypatch.setenv("VRAMSCOPE_PURE_PYTHON", "1")
    snap = loaded_snapshots(DATA / "side_stream_pending.pickle")
    tr = snap.trace
    assert [u for u in check(build_timeline(snap)) if u.kind == "inconsistent"] == []
    allocs = np.flatnonzero(tr.action == Action.ALLOC)
    k = int(allocs[len(allocs) // 2])
    addr = int(tr.addr[k])
    later = np.flatnonzero(
        (tr.addr == addr) & (np.arange(len(tr)) > k) & (tr.action == Action.FREE_REQUESTED)
    )
    broken = without_rows(snap, [k])
    found = [u for u in check(build_timeline(broken)) if u.kind == "inconsistent"]
    assert len(found) == 1
    u = found[0]
    assert u.first_event == int(later[0]) - 1  # one row earlier: the alloc's row is gone
    assert f"0x{addr:x}" in u.line() and "frees a block that is not allocated" in u.line()
    assert "\n" not in u.line()
    assert u.to_dict()["kind"] == "inconsistent"


def test_a_lost_segment_alloc_is_untrusted_to_the_end(loaded_snapshots):
    """The allocation after a lost segment_alloc lands outside every segment, and the
    replay never gets back to the recorded segments: untrusted from there to the end."""
    snap = loaded_snapshots(DATA / "gpt2_oom.pickle")
    tr = snap.trace
    k = int(np.flatnonzero(tr.action == Action.SEGMENT_ALLOC)[-1])
    assert tr.action[k + 1] == Action.ALLOC and tr.addr[k + 1] == tr.addr[k]
    tl = build_timeline(without_rows(snap, [k]))
    (u,) = check(tl)
    n = len(tl.replay(0))
    assert (u.kind, u.first_event, u.last_event) == ("inconsistent", k, n - 1)
    assert "is outside every segment" in u.line() and "recorded only" in u.line()


def test_wrapped_ring_is_labelled_estimated():
    snap = load_snapshot(DATA / "truth" / "ring_wrap.pickle.xz")
    truth = json.loads((DATA / "truth" / "ring_wrap.truth.json").read_text())
    assert truth["recording"]["ring_wrapped"]
    tl = build_timeline(snap)
    found = check(tl)
    assert [u.kind for u in found] == ["estimated"]
    assert found[0].first_event == 0 and "inferred" in found[0].line()
    assert summarize(snap, tl)["untrusted"] == [found[0].to_dict()]


def test_final_difference_names_a_live_drift(loaded_snapshots):
    snap = loaded_snapshots(DATA / "gpt2_oom.pickle")
    tl = build_timeline(snap)
    assert final_difference(tl) == []
    other = loaded_snapshots(DATA / "side_stream_pending.pickle")
    diff = final_difference(tl, other)
    assert len(diff) == 1 and "differs from the recorded segments" in diff[0].line()


def test_whatif_on_an_inconsistent_trace_is_one_clear_error():
    """A request stream the allocator model cannot follow: SnapshotError, one line."""
    from tests.model.test_replay import random_trace_snapshot
    from vramscope.viewer.model.core.errors import SnapshotError
    from vramscope.viewer.model.whatif import prepare

    rng = np.random.default_rng(7)
    raised = 0
    for _ in range(40):
        snap, _n = random_trace_snapshot(rng, list(range(9)))
        try:
            case = prepare(snap)
            case.self_check()
            case.simulate("expandable_segments:True", limit=1 << 30)
        except SnapshotError as e:
            raised += 1
            assert "\n" not in str(e) and "inconsistent" in str(e)
    assert raised  # these traces are garbage: some must be refused, none may crash


def test_overflowed_torch_211_ring_replays_exactly_with_estimates_labelled():
    """A real torch 2.11 recording whose ring overflowed (tests/data/newer_fields):
    exact on the counters, only the stretch of inferred sizes labelled."""
    snap = load_snapshot(DATA / "newer_fields.pickle")
    tl = build_timeline(snap)
    rep = tl.replay(0)
    assert rep.inconsistencies == 0
    stats = snap.sidecar["memory_stats"]
    assert rep.peak("reserved")[0] == stats["reserved_bytes.all.peak"]
    found = check(tl)
    assert [u.kind for u in found] == ["estimated"] and found[0].first_event == 0
