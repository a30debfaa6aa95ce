"""Where the memory was allocated (summary's top sites): the sites' bytes add up to no more
than what is allocated at that instant, and the top site is the one the replayed blocks
give, found here from the blocks themselves, one by one."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests import shared_data
from tests.conftest import DATA
from vramscope.viewer.model.analysis.calltree import allocator_frames, site_frames
from vramscope.viewer.model.analysis.figures import Selection, memory_stats
from vramscope.viewer.model.core import frames as fr
from vramscope.viewer.model.core.snapshot import BlockState
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports.summary import summarize

EXTERNAL = shared_data.EXTERNAL


def truth(snap, state) -> Counter:
    """Live bytes per label, from each live block's stack read frame by frame: the
    innermost user frame, else the innermost torch Python frame."""
    cats = fr.frame_categories(snap.frames)
    b = state.blocks
    live = (b.state == BlockState.ALLOCATED) | (b.state == BlockState.PENDING_FREE)
    out: Counter = Counter()
    for stack, size in zip(b.stack[live].tolist(), b.size[live].tolist()):
        label = "<no stack recorded>"
        if stack >= 0:
            ids = snap.stacks.frame_ids(stack)
            for wanted in (fr.CAT_USER, fr.CAT_TORCH):
                hit = [f for f in ids.tolist() if cats[f] == wanted]
                if hit:
                    label = fr.frame_view(snap.frames, hit[0], wanted).short
                    break
        out[label] += int(size)
    return out


@pytest.mark.parametrize(
    "name", ["gpt2_oom", "fragmentation_oom", "capacity_oom", "resnet50_train"]
)
def test_sites_at_the_peak_and_the_oom(name):
    snap = load_snapshot(str(DATA / f"{name}.pickle"), use_cache=False)
    timeline = build_timeline(snap)
    summary = summarize(snap, timeline)
    checked = []
    peak = summary["top_sites_at_peak"]
    assert peak is not None and peak["device"] == summary["device"]
    checked.append(peak)
    assert len(summary["top_sites_at_oom"]) == len(summary["ooms"])
    for oom, entry in zip(summary["ooms"], summary["top_sites_at_oom"]):
        assert (entry["device"], entry["event"]) == (oom["device"], oom["event"])
        checked.append(entry)
    for entry in checked:
        state = timeline.snapshot_at(entry["device"], entry["event"])
        allocated = memory_stats(state, Selection(device=entry["device"])).allocated_bytes
        want = truth(snap, state)
        sites = entry["sites"]
        assert sites, entry
        total = sum(s["bytes"] for s in sites)
        live_total = sum(want.values())
        assert total <= live_total
        assert total <= allocated
        top_label, top_bytes = want.most_common(1)[0]
        assert (sites[0]["frame"], sites[0]["bytes"]) == (top_label, top_bytes)
        assert [s["bytes"] for s in sites] == sorted((s["bytes"] for s in sites), reverse=True)
        assert sum(s["count"] for s in sites) <= int(
            sum(
                (state.blocks.state == BlockState.ALLOCATED)
                | (state.blocks.state == BlockState.PENDING_FREE)
            )
        )


@shared_data.MARK
def test_the_allocator_is_never_the_site_when_the_stack_has_another_frame():
    path = EXTERNAL / "kkaitlyn111_cs336-a2-systems-memory_files_memory_ctx128_fullstep_.pickle.xz"
    shared_data.require(path)
    snap = load_snapshot(str(path), use_cache=False)
    cats = fr.frame_categories(snap.frames)
    bad = allocator_frames(snap)
    names = [snap.frames.strings[i] for i in snap.frames.name.tolist()]
    assert any(
        "CUDACachingAllocator" in snap.frames.strings[f] for f in snap.frames.filename[bad].tolist()
    )
    sites = site_frames(snap, cats)
    for sid in range(len(snap.stacks)):
        ids = snap.stacks.frame_ids(sid)
        other = [f for f in ids.tolist() if cats[f] != fr.CAT_NOISE and not bad[f]]
        if other:
            assert not bad[sites[sid]], names[sites[sid]]
    assert np.all(
        sites[[len(snap.stacks.frame_ids(s)) == 0 for s in range(len(snap.stacks))]] == -1
    )
