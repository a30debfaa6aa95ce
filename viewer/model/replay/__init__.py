"""Replay an allocator trace: the block layout and memory curves at every event.

Modules (each imports only those above it; nothing here imports the views):

* :mod:`.layout` - :class:`Layout` (segments + blocks at one instant, numpy
  columns), block states, :func:`layout_snapshot`;
* :mod:`.state` - the reference state machine (pure Python: ``_State`` and
  ``_apply``), the allocator's split / merge / map / unmap rules;
* :mod:`.native` - glue to the C copy of that state machine
  (``_native/replay_core.c``), the fast path when it is built;
* :mod:`.seed` - the state before the first event, walked back from the
  final snapshot (late start, wrapped ring buffer);
* :mod:`.curves` - requested / allocated / active / reserved after each
  event, peaks, and :class:`CurveIndex` (envelopes + exact stretches);
* :mod:`.device` - :class:`DeviceReplay` and :func:`replay_device`;

"""

from .curves import CURVES, CurveColumn, CurveIndex, curves
from .device import DeviceReplay, link_lifetimes, replay_device
from .layout import (ALLOCATED, BEFORE_RECORDING, FREE, PENDING, Layout,
                     initial_segment_of_blocks, layout_snapshot)
from .native import native_available, use_native
# Private names the tests and benchmarks reach for (the reference paths).
from .native import _core as _core
from .seed import _first_frees as _first_frees
from .state import _State as _State, _apply as _apply

__all__ = ["ALLOCATED", "BEFORE_RECORDING", "CURVES", "CurveColumn", "CurveIndex", "DeviceReplay",
           "FREE", "Layout", "PENDING", "curves", "initial_segment_of_blocks", "layout_snapshot",
           "link_lifetimes", "native_available", "replay_device", "use_native"]
