"""What is alive at one moment of a recording, largest first, each allocation with its
stack: the window's table and stack panel at that moment, as one answer (the MCP tool
``stack_at``).

:func:`moment_of` picks the moment when none is named (the last OOM's event, else the
allocated peak's); :func:`alive_blocks` filters the blocks that hold memory there;
:func:`stack_at` puts them, the top allocation sites and the exact figures together.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analysis import focus
from ..analysis.calltree import top_sites
from ..analysis.figures import Selection, memory_stats
from ..core import frames as fr
from ..core.snapshot import BlockState, Snapshot
from ..core.units import format_address
from ..replay.timeline import at_event
from .document import Document

#: Frames per allocation: the user's innermost frames come first, and deeper ones are
#: rarely what the fix touches.
FRAMES_MAX = 20


def moment_of(doc: Document, device: int) -> tuple[int, str] | None:
    """(event, why) of the moment to show when none is named: the last OOM's event
    (``"last_oom"``), else the allocated peak's (``"peak_allocated"``); None when
    ``device`` has no events."""
    ooms = doc.oom_events(device)
    if ooms:
        return ooms[-1], "last_oom"
    rep = doc.timeline.replay(device) if doc.timeline is not None else None
    if rep is not None and len(rep):
        return int(rep.peak("allocated")[1]), "peak_allocated"
    return None


def alive_blocks(state: Snapshot, device: int) -> np.ndarray:
    """The blocks of ``device`` that hold memory in ``state`` (allocated, or freed and
    pending a stream's use), in block order."""
    blocks, segs = state.blocks, state.segments
    active = (blocks.state == BlockState.ALLOCATED) | (blocks.state == BlockState.PENDING_FREE)
    return np.flatnonzero(active & (segs.device[blocks.segment] == device))


def _allocation(moment: Document, b: int, all_frames: bool) -> dict[str, Any]:
    state = moment.snap
    blocks, segs = state.blocks, state.segments
    stack = int(blocks.stack[b])
    s = int(blocks.segment[b])
    views = (
        fr.stack_views(state, stack, moment.categories, show_torch=all_frames, show_cpp=all_frames)
        if stack >= 0
        else []
    )
    return {
        "address": format_address(blocks.address[b]),
        "size": int(blocks.size[b]),
        "requested_size": int(blocks.requested_size[b]),
        "state": BlockState(int(blocks.state[b])).label,
        "stream": int(segs.stream[s]),
        "pool": "small" if bool(segs.is_small[s]) else "large",
        "segment": format_address(segs.address[s]),
        "top_frame": moment.block_top_label(b) or None,
        "frames": [f"{v.filename}:{v.line} {v.name}" for v in views[:FRAMES_MAX]],
        "frames_omitted": max(0, len(views) - FRAMES_MAX),
    }


def stack_at(
    doc: Document,
    device: int,
    event: int,
    event_chosen_by: str = "given",
    device_given: bool = True,
    limit: int = 20,
    all_frames: bool = False,
) -> dict[str, Any]:
    """The allocations alive after event ``event`` of ``device`` (a valid event of its
    trace), largest first with their stacks (torch and C++ frames only with
    ``all_frames``), the top allocation sites and the figures at that moment, as one
    JSON-ready dict; ``limit`` bounds both lists, the totals cover every allocation.
    ``event_chosen_by`` and ``device_given`` say how the moment was chosen."""
    moment = doc.at(device, event)
    state = moment.snap
    blocks = state.blocks
    alive = alive_blocks(state, device)
    largest = alive[np.lexsort((blocks.address[alive], -blocks.size[alive]))]
    shown = [_allocation(moment, b, all_frames) for b in largest[:limit].tolist()]
    sites = top_sites(state, blocks.stack[alive], blocks.size[alive], limit)
    return {
        "file": doc.snap.path,
        "device": device,
        "device_chosen_by": focus.chosen_by(doc.snap, device, device_given),
        "event_chosen_by": event_chosen_by,
        "at": at_event(doc.timeline, device, event) if doc.timeline is not None else None,
        "oom": moment.oom.to_dict() if moment.oom is not None else None,
        "figures": memory_stats(state, Selection(device=device)).to_dict(),
        "alive_allocations": int(len(alive)),
        "alive_bytes": int(blocks.size[alive].sum()),
        "limit": limit,
        "top_sites": [site.to_dict() for site in sites],
        "allocations": shown,
    }
