"""The summary's memory breakdown started during the replay (summary_timeline +
summarize(prepared=...)) answers exactly what the serial path answers, and the hook it
uses (on_seeded) runs before any event is applied."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from tests.conftest import DATA
from tests.native_gate import skip_unless
from vramscope.viewer.model.categories import breakdown as report
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline, oom_events
from vramscope.viewer.model.reports import summary as S

TRUTH = DATA / "truth"
EXTERNAL = shared_data.EXTERNAL
FILES = [
    DATA / "gpt2_oom.pickle",
    DATA / "resnet50_train.pickle",
    DATA / "transformer_long_python_1000k.pickle.xz",
    TRUTH / "gpt2_leak.pickle.xz",
    TRUTH / "ring_wrap.pickle.xz",
    TRUTH / "expandable_oom.pickle.xz",
    TRUTH / "eval_keeps_outputs.pickle.xz",
    shared_data.param(EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"),
]


def _serial(path: Path) -> str:
    snap = load_snapshot(path, use_cache=False)
    tl = build_timeline(snap, keyframes=False, emit=oom_events(snap))
    return json.dumps(S.summarize(snap, tl), sort_keys=True)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0][:30])
def test_breakdown_made_during_the_replay_gives_the_same_summary(path, monkeypatch):
    if path.parent == EXTERNAL:  # others' files, not always there
        shared_data.require(path)
    # Every trace takes the overlapped path here (real files are below the 1M-event bar).
    monkeypatch.setattr(report, "OVERLAP_MIN_EVENTS", 0)
    monkeypatch.setattr(S.os, "cpu_count", lambda: 4)
    snap = load_snapshot(path, use_cache=False)
    tl, prepared = S.summary_timeline(snap, oom_events(snap))
    one_device = len(np.unique(snap.trace.device)) == 1
    assert (prepared is not None) == one_device
    overlapped = json.dumps(S.summarize(snap, tl, None, prepared), sort_keys=True)
    assert overlapped == _serial(path)


def test_on_seeded_runs_before_the_events_are_applied():
    snap = load_snapshot(DATA / "gpt2_oom.pickle", use_cache=False)
    seen = []

    def on_seeded(rep):
        seen.append((len(rep), int(np.count_nonzero(rep.block_size)), rep.initial.n_blocks))

    tl = build_timeline(snap, on_seeded=on_seeded)
    rep = tl.replay(min(tl.devices))
    assert len(seen) == len(tl.devices) == 1
    n, sized_before, _ = seen[0]
    assert n == len(rep) and sized_before == 0
    assert np.count_nonzero(rep.block_size) > 0  # filled by the replay, after the hook


def test_a_failing_first_part_becomes_a_warning_not_a_crash(monkeypatch):
    monkeypatch.setattr(report, "OVERLAP_MIN_EVENTS", 0)
    monkeypatch.setattr(S.os, "cpu_count", lambda: 4)

    def broken(snap, rep, intervals_of_device=None):
        raise ValueError("an allocation freed twice")

    monkeypatch.setattr(report, "prepare", broken)
    snap = load_snapshot(DATA / "gpt2_oom.pickle", use_cache=False)
    tl, prepared = S.summary_timeline(snap, oom_events(snap))
    out = S.summarize(snap, tl, None, prepared)
    assert out["categories_at_peak"] is None
    assert any("memory categories of device" in w and "freed twice" in w for w in out["warnings"])


def test_replays_on_several_threads_at_once_equal_serial_ones():
    """The C replay lets go of the GIL in its event loop: replays of different files on
    several threads at once (a GUI load beside a live session) give the serial answers."""
    from concurrent.futures import ThreadPoolExecutor

    from vramscope.viewer.model.replay import native_loop as _nat

    skip_unless(_nat._core is not None, "compiled replay not built")
    names = [
        "gpt2_oom.pickle",
        "resnet50_train.pickle",
        "fragmentation_oom.pickle",
        "small_pool_mixed.pickle",
    ] * 2
    snaps = {n: load_snapshot(DATA / n, use_cache=False) for n in set(names)}

    def answer(name):
        tl = build_timeline(snaps[name], keyframes=True)
        rep = tl.replay(min(tl.devices))
        last = rep.layout_after(len(rep) - 1)
        return (
            rep.block_size.tolist(),
            rep.pool.tolist(),
            rep.inconsistencies,
            [rep.peak(c) for c in S.CURVES],
            last.blk_addr.tolist(),
            len(rep.keyframes),
        )

    serial = {n: answer(n) for n in set(names)}
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(answer, names))
    assert together == [serial[n] for n in names]
