"""Ground-truth recordings (tests/data/truth, recorded on the GPU machine): every one
replays exactly - no inconsistency, the recorded final segments and blocks, peaks equal
to the allocator's own ``*.all.peak`` counters - and the what-if model at the recorded
settings reproduces every segment event (expandable-segments OOM, cache released
under a memory limit, garbage collection threshold, empty_cache, wrapped ring...)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.replay.integrity import check
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.whatif import prepare

TRUTH = Path(__file__).resolve().parents[1] / "data" / "truth"
FILES = sorted(TRUTH.glob("*.pickle.xz"))
CURVES = {
    "reserved": "reserved_bytes",
    "allocated": "allocated_bytes",
    "active": "active_bytes",
    "requested": "requested_bytes",
}
# Floor: the recordings replayed when these tests were written.  They are in the
# repository: fewer means one was lost, and the parametrised tests would still pass.
MIN_FILES = 61


def test_enough_recordings_are_replayed():
    assert len(FILES) >= MIN_FILES, [name_of(p) for p in FILES]


def name_of(path: Path) -> str:
    return path.name.split(".pickle")[0]


@pytest.fixture(scope="module")
def recorded():
    cache = {}

    def get(path):
        if path not in cache:
            snap = load_snapshot(path)
            truth = json.loads((path.parent / f"{name_of(path)}.truth.json").read_text())
            cache[path] = (snap, truth, build_timeline(snap))
        return cache[path]

    return get


@pytest.mark.parametrize("path", FILES, ids=name_of)
def test_replay_is_exact(path, recorded):
    snap, truth, tl = recorded(path)
    stats = snap.sidecar["memory_stats"]
    d = truth["device"]
    rep = tl.replay(d)
    assert rep.inconsistencies == 0
    assert [u.line() for u in check(tl) if u.kind == "inconsistent"] == []
    final = tl.snapshot_at(d, len(rep) - 1)
    for a, b in (
        (final.segments.address, snap.segments.address),
        (final.segments.total_size, snap.segments.total_size),
        (final.blocks.address, snap.blocks.address),
        (final.blocks.size, snap.blocks.size),
    ):
        assert sorted(a.tolist()) == sorted(b.tolist())
    start = 0
    if truth.get("peaks_reset_per_iteration"):
        # The counters' peaks cover the last iteration (reset at its start).
        start = int(np.searchsorted(rep.time_us, truth["iterations_stats"][-1]["start_us"]))
    for curve, counter in CURVES.items():
        y = np.asarray(getattr(rep, curve))
        window = y[max(start - 1, 0) :] if start else y
        assert int(window.max()) == stats[f"{counter}.all.peak"], curve
        assert int(y[-1]) == stats[f"{counter}.all.current"], curve


@pytest.mark.parametrize("path", FILES, ids=name_of)
def test_whatif_self_check(path, recorded):
    snap, truth, _tl = recorded(path)
    # Where the program reset the peak counters each iteration they cover its last one
    # (test_replay_is_exact checks the replay against them there).
    check_ = prepare(snap, device=truth["device"]).self_check(
        peaks_since_start=not truth.get("peaks_reset_per_iteration")
    )
    assert check_.ok, check_.first_difference


def test_expandable_oom_peak_equals_the_counter(recorded):
    """The hidden-case kind (torch 2.11, expandable segments, ends in an OOM): the
    replayed peak reserved is the allocator's, not pages above it."""
    path = TRUTH / "expandable_oom.pickle.xz"
    snap, truth, tl = recorded(path)
    assert truth["oom"] and "expandable_segments:True" in truth["alloc_conf"]
    rep = tl.replay(truth["device"])
    assert rep.peak("reserved")[0] == snap.sidecar["memory_stats"]["reserved_bytes.all.peak"]
    case = prepare(snap, device=truth["device"])
    assert case.recorded_run().peak_reserved_until_oom == rep.peak("reserved")[0]
