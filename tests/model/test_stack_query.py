"""model/view/stack_query: what is alive at one moment, largest first with its stacks -
the MCP tool ``stack_at`` renders this query and adds only the checks of its arguments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vramscope.viewer.commands import mcp_tools
from vramscope.viewer.model.core.snapshot import BlockState
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.view import stack_query
from vramscope.viewer.model.view.document import Document

DATA = Path(__file__).resolve().parents[1] / "data"
SIDE_STREAM = DATA / "side_stream_pending.pickle"  # blocks pending a stream's use
OOM = DATA / "fragmentation_oom.pickle"


def _doc(path: Path) -> tuple[Document, int]:
    doc = Document.build(load_snapshot(str(path)))
    return doc, doc.trace_device()


def test_the_moment_is_the_last_oom_else_the_allocated_peak():
    doc, dev = _doc(OOM)
    assert doc.oom_events(dev)
    assert stack_query.moment_of(doc, dev) == (doc.oom_events(dev)[-1], "last_oom")
    doc, dev = _doc(SIDE_STREAM)
    assert not doc.oom_events(dev)
    event, why = stack_query.moment_of(doc, dev)
    rep = doc.timeline.replay(dev)
    assert why == "peak_allocated" and rep.allocated[event] == rep.allocated.max()


def test_alive_blocks_are_the_allocated_and_pending_ones_of_the_device():
    doc, dev = _doc(SIDE_STREAM)
    state = doc.snap
    alive = stack_query.alive_blocks(state, dev)
    states = set(state.blocks.state[alive].tolist())
    assert int(BlockState.PENDING_FREE) in states  # the file's point: they hold memory
    assert states <= {int(BlockState.ALLOCATED), int(BlockState.PENDING_FREE)}
    others = np.setdiff1d(np.arange(len(state.blocks.size)), alive)
    on_dev = state.segments.device[state.blocks.segment[others]] == dev
    assert not np.isin(state.blocks.state[others][on_dev], list(states)).any()


def test_stack_at_lists_the_largest_first_and_the_mcp_tool_renders_it():
    doc, dev = _doc(OOM)
    event, why = stack_query.moment_of(doc, dev)
    got = stack_query.stack_at(doc, dev, event, why, device_given=False, limit=5)
    sizes = [a["size"] for a in got["allocations"]]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == min(5, got["alive_allocations"])
    alive = stack_query.alive_blocks(doc.at(dev, event).snap, dev)
    assert got["alive_allocations"] == len(alive)
    assert got["alive_bytes"] == int(doc.at(dev, event).snap.blocks.size[alive].sum())
    assert got["event_chosen_by"] == "last_oom" and got["oom"] is not None
    assert json.loads(mcp_tools.stack_at(str(OOM), limit=5)) == got
