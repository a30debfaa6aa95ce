"""Replay an allocator trace: the block layout and memory curves at every event.

Modules (each imports only those above it; nothing here imports the views):

* :mod:`.layout` - :class:`Layout` (segments + blocks at one instant, numpy
  columns), block states, :func:`layout_snapshot`;
* :mod:`.state` - the reference state machine (pure Python), applying the
  allocator's rules of :mod:`..core.allocator_rules`;
* :mod:`.native_loop` - glue to the C copy of that state machine
  (``_native/replay_core.c``), the fast path when it is built;
* :mod:`.seed` - the state before the first event, walked back from the
  final snapshot (late start, wrapped ring buffer);
* :mod:`.curves` - requested / allocated / active / reserved after each
  event, peaks, and :class:`CurveIndex` (envelopes + exact stretches);
* :mod:`.device` - :class:`DeviceReplay` and :func:`replay_device`;
* :mod:`.incremental` - a replay that grows as a live session sends events;
* :mod:`.timeline` - :class:`Timeline`: every device's replay, allocation
  intervals, seeks to any event;
* :mod:`.integrity` - where the trace cannot be exact (gaps, lost events), checked
  against the final snapshot;
* :mod:`.recorded_window` - the stretch of the run the trace covers.

The replay applies the caching allocator's own rules (rounding, whether a free block
is split, merging on free, segments mapped and unmapped) to the trace's addresses and
sizes, so the block layout after every event is exact.  Recordings that started late
or whose ring buffer wrapped are seeded by walking back from the final snapshot;
blocks from before the window are "allocated before recording", their sizes labelled
estimates.  A whole replay reproduces the final snapshot block for block and its peaks
equal the allocator's ``*.all.peak`` counters.  The Python state machine is the
reference; the C loop must equal it on real and random traces.  Seeking is keyframes
plus a partial replay.  Where a recording is broken, :mod:`.integrity` names the first
event that could not be applied and the stretch that cannot be trusted: nothing inside
it is shown as exact.

May import: :mod:`..core`, :mod:`.._native`, numpy.
"""

from .curves import CURVES, CurveColumn, CurveIndex, curves
from .device import DeviceReplay, link_lifetimes, replay_device
from .layout import (
    ALLOCATED,
    BEFORE_RECORDING,
    FREE,
    PENDING,
    Layout,
    initial_segment_of_blocks,
    layout_snapshot,
)
from .native_loop import native_available, use_native

__all__ = [
    "ALLOCATED",
    "BEFORE_RECORDING",
    "CURVES",
    "FREE",
    "PENDING",
    "CurveColumn",
    "CurveIndex",
    "DeviceReplay",
    "Layout",
    "curves",
    "initial_segment_of_blocks",
    "layout_snapshot",
    "link_lifetimes",
    "native_available",
    "replay_device",
    "use_native",
]
