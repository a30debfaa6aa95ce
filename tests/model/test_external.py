"""Snapshots from the world (../shared/external, SOURCES.md): other torch versions, GPUs,
programs.  They carry no memory_stats, so the truth is internal consistency: on every
device the trace replays onto the recorded segments and blocks without an
inconsistency (in C and in Python, which agree), and the what-if model at the
recorded settings reproduces every recorded segment event.  Read in place (never
copied into the repository); missing, they skip, or fail under CI (tests/shared_data.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests import shared_data
from tests.native_gate import needs
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.replay import native_available, replay_device
from vramscope.viewer.model.replay.integrity import check
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.whatif import prepare

FILES = shared_data.external_params(id_of=lambda p: p.name.split(".")[0][:40])


@pytest.fixture(scope="module")
def external():
    cache = {}

    def get(path):
        path = shared_data.require(path)
        if path not in cache:
            snap = load_snapshot(path)
            cache[path] = (snap, build_timeline(snap))
        return cache[path]

    return get


def _final(snap, device):
    """(segments, blocks) of the recorded final snapshot on ``device``, sorted by address."""
    segs, blocks = snap.segments, snap.blocks
    on = np.flatnonzero(segs.device == device)
    seg = sorted(zip(segs.address[on].tolist(), segs.total_size[on].tolist()))
    mine = np.flatnonzero(np.isin(blocks.segment, on))
    blk = sorted(
        zip(blocks.address[mine].tolist(), blocks.size[mine].tolist(), blocks.state[mine].tolist())
    )
    return seg, blk


@pytest.mark.parametrize("path", FILES)
def test_replay_lands_on_the_recorded_segments_on_every_device(path, external):
    snap, tl = external(path)
    if not len(snap.trace):
        assert not tl.devices  # a bare segment list: nothing to replay
        return
    assert sorted(tl.devices) == sorted(set(snap.trace.device.tolist()))
    for d, rep in tl.devices.items():
        assert rep.inconsistencies == 0, d
        last = tl.snapshot_at(d, len(rep) - 1)
        seg, blk = _final(snap, d)
        assert _final(last, d) == (seg, blk), d
    assert [u.line() for u in check(tl) if u.kind == "inconsistent"] == []


@needs(native_available(), "replay_core extension not built")
@pytest.mark.parametrize("path", FILES)
def test_native_and_python_replays_agree(path, external):
    snap, tl = external(path)
    for d in tl.devices:
        a = replay_device(snap, d, native=True, keyframe_every=1000)
        b = replay_device(snap, d, native=False, keyframe_every=1000)
        assert np.array_equal(a.block_size, b.block_size) and np.array_equal(a.pool, b.pool)
        for k in (-1, len(a) // 2, len(a) - 1):
            la, lb = a.layout_after(k), b.layout_after(k)
            for f in la.__dataclass_fields__:
                assert np.array_equal(getattr(la, f), getattr(lb, f)), (d, k, f)


@pytest.mark.parametrize("path", FILES)
def test_whatif_self_check_reproduces_the_segment_events(path, external):
    snap, tl = external(path)
    for d in tl.devices:
        check = prepare(snap, device=d).self_check()
        assert check.ok, (d, check.first_difference)
