"""The frees paired with their allocations on a thread while the replay applies the
events (:meth:`DeviceReplay.start_lifetimes`, started by the summary's replay): the same
pairing as made on demand, not taken for made before it is asked for, and the summary
the same as one after the other."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tests.conftest import DATA
from vramscope.viewer.model.categories import breakdown as report
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay import device as replay_device_mod
from vramscope.viewer.model.replay import replay_device
from vramscope.viewer.model.replay.timeline import build_timeline, oom_events
from vramscope.viewer.model.reports import summary as S

FILE = DATA / "gpt2_oom.pickle"


def test_started_pairing_equals_the_one_made_when_asked():
    snap = load_snapshot(FILE, use_cache=False)
    rep = replay_device(snap, 0, keyframes=False)
    want = replay_device_mod.link_lifetimes(rep.action, rep.addr, rep.native)
    with ThreadPoolExecutor(1) as pool:
        rep.start_lifetimes(pool)
        rep.start_lifetimes(pool)  # once only
        # Not made until asked: callers that choose a path by it choose as before.
        assert rep.derived("lifetimes") is None
        got = rep.alloc_of
    assert rep.derived("lifetimes") is not None
    for name in ("alloc_of", "freed_at", "free_requested_at"):
        assert np.array_equal(getattr(rep, name), want[name]), name
    assert got is rep.alloc_of


def test_the_summary_starts_it_and_answers_the_same(monkeypatch):
    monkeypatch.setattr(report, "OVERLAP_MIN_EVENTS", 0)
    monkeypatch.setattr(S.os, "cpu_count", lambda: 4)
    started = []
    real = replay_device_mod.DeviceReplay.start_lifetimes

    def spy(self, executor):
        started.append(len(self))
        return real(self, executor)

    monkeypatch.setattr(replay_device_mod.DeviceReplay, "start_lifetimes", spy)
    snap = load_snapshot(FILE, use_cache=False)
    tl, prepared = S.summary_timeline(snap, oom_events(snap))
    assert started == [len(tl.replay(0))]
    overlapped = json.dumps(S.summarize(snap, tl, None, prepared), sort_keys=True)
    plain = load_snapshot(FILE, use_cache=False)
    serial = S.summarize(plain, build_timeline(plain, keyframes=False, emit=oom_events(plain)))
    assert overlapped == json.dumps(serial, sort_keys=True)
