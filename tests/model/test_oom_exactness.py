"""An OOM inside a stretch that is not exact (integrity.Untrusted) is said to be not
exact, with the stretch's reason; OOMs outside stay exact.

The cases are real recordings made untrusted the ways recordings break: the start of
the trace cut off (what a wrapped ring buffer leaves: sizes before it are estimated),
and a lost segment_alloc (the replay cannot apply what follows).  No bundled file has
an OOM inside an untrusted stretch (checked over tests/data and /work/shared/external).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.conftest import DATA
from tests.model.test_integrity import without_rows
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.analysis.oom import oom_reports
from vramscope.viewer.model.core.snapshot import Action
from vramscope.viewer.model.replay import integrity
from vramscope.viewer.model.replay.integrity import Untrusted, check, untrusted_at
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports.summary import format_text, summarize

CUT = 500  # trace entries cut from fragmentation_oom's start (its OOMs: 1068, 1959)


def cut_ring(dst, src=DATA / "fragmentation_oom.pickle", drop: int = CUT):
    """``src`` (a bundled recording, our own file) with the first ``drop`` entries of
    its trace gone, as a ring that wrapped leaves it; written to ``dst``."""
    with open(src, "rb") as f:
        raw = pickle.load(f)
    raw["device_traces"][0] = raw["device_traces"][0][drop:]
    dst.write_bytes(pickle.dumps(raw))
    return dst


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    snap = load_snapshot(cut_ring(tmp_path_factory.mktemp("cut") / "cut.pickle"))
    return snap, build_timeline(snap)


def test_the_full_recording_is_exact(loaded_snapshots):
    snap = loaded_snapshots(DATA / "fragmentation_oom.pickle")
    reports = oom_reports(snap, build_timeline(snap))
    assert len(reports) == 2
    assert all(r.exact and r.not_exact_reason is None for r in reports)


def test_an_oom_inside_the_estimated_start_is_not_exact(cut):
    snap, tl = cut
    (u,) = check(tl)
    assert u.kind == "estimated" and u.first_event == 0
    first, last = oom_reports(snap, tl)
    rep = tl.replay(0)
    k_first, k_last = (int(np.searchsorted(rep.rows, r.event_index)) for r in (first, last))
    assert k_first <= u.last_event < k_last  # one OOM inside the stretch, one after it
    assert not first.exact and first.not_exact_reason == u.reason
    assert last.exact and last.not_exact_reason is None
    assert first.to_dict()["exact"] is False


def test_a_lost_segment_alloc_makes_the_oom_after_it_not_exact(loaded_snapshots):
    snap = loaded_snapshots(DATA / "gpt2_oom.pickle")
    assert [r.exact for r in oom_reports(snap, build_timeline(snap))] == [True]
    k = int(np.flatnonzero(snap.trace.action == Action.SEGMENT_ALLOC)[-1])
    broken = without_rows(snap, [k])
    (r,) = oom_reports(broken, build_timeline(broken))
    assert not r.exact and "is outside every segment" in r.not_exact_reason


def test_given_check_is_used_not_run_again(cut, monkeypatch):
    snap, tl = cut
    found = check(tl)
    calls = []
    monkeypatch.setattr(
        "vramscope.viewer.model.analysis.oom.check", lambda *a, **k: calls.append(a) or []
    )
    reports = oom_reports(snap, tl, untrusted=found)
    assert calls == [] and [r.exact for r in reports] == [False, True]
    reports = oom_reports(snap, tl)  # without it: checked here (the stub finds nothing)
    assert len(calls) == 1 and [r.exact for r in reports] == [True, True]


def test_summary_marks_the_oom_and_checks_once(cut, monkeypatch):
    snap, tl = cut
    real, calls = integrity.check, []
    monkeypatch.setattr(integrity, "check", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(
        "vramscope.viewer.model.analysis.oom.check",
        lambda *a, **k: calls.append(1) or real(*a, **k),
    )
    out = summarize(snap, tl)
    assert len(calls) == 1  # summarize's check is the one the OOM reports use
    first, last = out["ooms"]
    assert first["exact"] is False and first["not_exact_reason"] == out["untrusted"][0]["reason"]
    assert last["exact"] is True and out["oom"] == last
    text = format_text(out)
    marked = [line for line in text.splitlines() if "(not exact: " in line]
    assert len(marked) == 1 and marked[0].startswith(f"  {first['verdict']} (not exact: ")
    # --at the first OOM: the OOM that explains that moment is the inexact one.
    at = summarize(snap, tl, at=(0, first["event"]))
    assert at["oom"]["exact"] is False


def test_the_graver_reason_is_named_where_stretches_overlap():
    est = Untrusted(0, 0, 10, "estimated", "sizes inferred")
    bad = Untrusted(0, 5, 20, "inconsistent", "event 5 cannot be applied")
    other = Untrusted(1, 0, 30, "inconsistent", "another device")
    found = [est, bad, other]
    assert untrusted_at(found, 0, 3) is est
    assert untrusted_at(found, 0, 7) is bad
    assert untrusted_at(found, 0, 20) is bad and untrusted_at(found, 0, 21) is None
    assert untrusted_at(found, 2, 0) is None
