"""Trace increments appended as columns; a :class:`Snapshot` of the latest instant.

One interner lives for the whole session, so a frame or stack seen in an
earlier increment keeps its id and each increment is converted once (never
the whole history again).  Events are kept in chunks of numpy columns; the
oldest chunks are dropped beyond ``max_events`` (the window the viewer
shows).  The segments come with every increment, taken at the same instant
as its newest event, so the replay of the window ends exactly at them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import WarningLog
from ..progress import Progress
from ..schema import _Interner, _annotations, _plain_settings, _segments, _trace
from ..snapshot import Snapshot, Trace

_TRACE_FIELDS = ("device", "action", "addr", "size", "stream", "time_us", "stack",
                 "device_free", "compile_context", "user_metadata")


class LiveColumns:
    """The session's accumulated trace (columns) and the latest segments."""

    def __init__(self, max_events: int = 1_000_000) -> None:
        self.max_events = max_events
        self.log = WarningLog()
        self.interner = _Interner(self.log)
        self.chunks: list[Trace] = []
        self.n_events = 0
        self.dropped = 0
        self.raw_segments: list[Any] = []
        self.settings: dict[str, Any] = {}

    def reset(self) -> None:
        """Forget the trace (after a gap: a replay across it would be wrong)."""
        self.dropped += self.n_events
        self.chunks = []
        self.n_events = 0

    def append(self, device_traces: list[Any], segments: list[Any] | None,
               settings: Any = None) -> int:
        """Add one increment (per-device lists of trace entries); returns events added."""
        if type(device_traces) is not list:
            device_traces = []
        total = sum(len(t) for t in device_traces if type(t) is list) or 1
        chunk = _trace(device_traces, self.interner, self.log, Progress(), total)
        if len(chunk.action):
            self.chunks.append(chunk)
            self.n_events += len(chunk.action)
        if type(segments) is list:
            self.raw_segments = segments
        if type(settings) is dict:
            self.settings = settings
        self._trim()
        return len(chunk.action)

    def _trim(self) -> None:
        while self.n_events > self.max_events and self.chunks:
            excess = self.n_events - self.max_events
            first = self.chunks[0]
            if len(first.action) <= excess:
                self.chunks.pop(0)
                self.n_events -= len(first.action)
                self.dropped += len(first.action)
            else:
                self.chunks[0] = Trace(**{f: getattr(first, f)[excess:] for f in _TRACE_FIELDS})
                self.n_events -= excess
                self.dropped += excess

    def trace(self) -> Trace:
        if not self.chunks:
            return _trace([], self.interner, self.log, Progress(), 1)
        if len(self.chunks) > 1:  # merge, so the next call is cheap
            self.chunks = [Trace(**{f: np.concatenate([getattr(c, f) for c in self.chunks])
                                    for f in _TRACE_FIELDS})]
        return self.chunks[0]

    def snapshot(self) -> Snapshot:
        """The latest segments with the accumulated trace, as one snapshot."""
        pools: list[tuple[int, int]] = []
        pool_ids: dict[tuple[int, int], int] = {}
        segments, blocks = _segments(self.raw_segments, self.interner, pools, pool_ids, self.log)
        return Snapshot(
            segments=segments,
            blocks=blocks,
            trace=self.trace(),
            annotations=_annotations([], self.interner, self.log),
            frames=self.interner.frames_table(),
            stacks=self.interner.stacks_table(),
            pools=pools,
            allocator_settings=_plain_settings(self.settings),
            source_format="live",
            warnings=self.log.messages(),
        )


def segments_snapshot(segments: list[Any]) -> Snapshot:
    """A snapshot of segments only (the 2 Hz stats reply): figures and the map."""
    log = WarningLog()
    interner = _Interner(log)
    pools: list[tuple[int, int]] = []
    pool_ids: dict[tuple[int, int], int] = {}
    segs, blocks = _segments(segments if type(segments) is list else [], interner, pools,
                             pool_ids, log)
    return Snapshot(segments=segs, blocks=blocks,
                    trace=_trace([], interner, log, Progress(), 1),
                    annotations=_annotations([], interner, log),
                    frames=interner.frames_table(), stacks=interner.stacks_table(),
                    pools=pools, allocator_settings={}, source_format="live",
                    warnings=log.messages())
