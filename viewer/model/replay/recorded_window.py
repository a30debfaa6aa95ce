"""What a device's trace can and cannot show: the recorded window.

A trace is a window of the run: ``_record_memory_history`` keeps the last
``max_entries`` events in a ring buffer (older ones are overwritten), and
recording may start after the program already allocated.  The replay seeds
such a window with the layout before its first event, walked back from the
final snapshot (:mod:`.seed`); those segments and blocks are facts, but
their creation is not in the trace.  :class:`RecordedWindow` says how much
of the run the window misses, so reports can say what it cannot show:

* peaks are over the window: a peak equal to the starting layout may have
  been reached (or passed) before it;
* what-if keeps the starting segments in their recorded places under every
  setting, so a setting's effect on them is unknown; where no segment was
  created or freed inside the window, a what-if peak equal to the starting
  reserved bytes is the recorded layout, not a prediction;
* cudaMalloc / cudaFree counts cover the window only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..core.members import one_of
from ..core.snapshot import Action, BlockState
from ..core.units import format_bytes, plural
from . import DeviceReplay

SEGMENT_ACTIONS = (
    Action.SEGMENT_ALLOC,
    Action.SEGMENT_FREE,
    Action.SEGMENT_MAP,
    Action.SEGMENT_UNMAP,
)


@dataclass(frozen=True)
class RecordedWindow:
    """One device's trace window against the run (plain data, JSON-ready)."""

    device: int
    events: int  # trace events of this device
    started_late: bool  # segments existed before the first event (wrapped ring / late start)
    segments_before: int  # segments that existed before the first event
    reserved_before: int  # their bytes
    blocks_before: int  # live (allocated or pending-free) blocks before the first event
    allocated_before: int  # their bytes
    segment_events: int  # segment_alloc / free / map / unmap inside the window

    @property
    def saw_segment_changes(self) -> bool:
        """Whether any segment was created, freed, mapped or unmapped inside the window."""
        return self.segment_events > 0

    @property
    def reserved_fixed(self) -> bool:
        """Reserved memory never changed in the window: it is the layout it started with."""
        return self.started_late and not self.saw_segment_changes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["saw_segment_changes"] = self.saw_segment_changes
        d["reserved_fixed"] = self.reserved_fixed
        return d

    def describe(self) -> str:
        """One sentence: what the window starts after (empty when it saw the whole run)."""
        if not self.started_late:
            return ""
        text = (
            f"device {self.device}'s trace starts after "
            f"{plural(self.segments_before, 'segment')} "
            f"({format_bytes(self.reserved_before)}) already existed"
            + (
                f", holding {plural(self.blocks_before, 'live block')} "
                f"({format_bytes(self.allocated_before)})"
                if self.blocks_before
                else ""
            )
            + " (the ring buffer wrapped, or recording started late): the trace shows "
            "none of their creation"
        )
        if self.reserved_fixed:
            text += (
                "; no segment was created or freed inside the window, so reserved "
                f"memory stays {format_bytes(self.reserved_before)} throughout it"
            )
        return text


def recorded_window(rep: DeviceReplay) -> RecordedWindow:
    """The window of ``rep`` (a device's replay, seeded with the layout before it)."""
    init = rep.initial
    live = (
        one_of(init.blk_state, (BlockState.ALLOCATED, BlockState.PENDING_FREE))
        if init.n_blocks
        else np.zeros(0, bool)
    )
    return RecordedWindow(
        device=int(rep.device),
        events=int(len(rep)),
        started_late=bool(len(init.seg_addr)),
        segments_before=int(len(init.seg_addr)),
        reserved_before=int(init.seg_size.sum()) if len(init.seg_size) else 0,
        blocks_before=int(live.sum()),
        allocated_before=int(init.blk_size[live].sum()) if live.any() else 0,
        segment_events=int(np.count_nonzero(one_of(rep.action, SEGMENT_ACTIONS))),
    )
