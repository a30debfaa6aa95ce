"""Trace increments appended as columns; a :class:`Snapshot` of the latest instant.

One interner lives for the whole session, so a frame or stack seen in an
earlier increment keeps its id and each increment is converted once (never
the whole history again).  Events are kept in chunks of numpy columns; the
oldest chunks are dropped beyond ``max_events`` (the window the viewer
shows).  The segments come with every increment, taken at the same instant
as its newest event, so the replay of the window ends exactly at them.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from ..core.snapshot import AllocAnnotations, Snapshot, Trace
from ..io.builder import SnapshotBuilder

_TRACE_FIELDS = tuple(f.name for f in fields(Trace))


class LiveColumns:
    """The session's accumulated trace (columns) and the latest segments."""

    def __init__(self, max_events: int = 1_000_000) -> None:
        self.max_events = max_events
        self.builder = SnapshotBuilder()
        self.log = self.builder.log
        self.chunks: list[Trace] = []
        self.n_events = 0
        self.dropped = 0
        self.raw_segments: list[Any] = []
        self.settings: dict[str, Any] = {}
        # annotate events; trace_index counts every event ever appended (dropped included)
        self.ann_chunks: list[AllocAnnotations] = []

    def reset(self) -> None:
        """Forget the trace (after a gap: a replay across it would be wrong)."""
        self.dropped += self.n_events
        self.chunks = []
        self.n_events = 0

    def append(
        self, device_traces: list[Any], segments: list[Any] | None, settings: Any = None
    ) -> int:
        """Add one increment (per-device lists of trace entries); returns events added."""
        chunk, ann = self.builder.trace_and_annotations(device_traces)
        if len(ann):
            ann.trace_index += self.dropped + self.n_events
            self.ann_chunks.append(ann)
        # The increment's objects are freed after this call: identities must not outlive them.
        self.builder.forget_objects()
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
            return self.builder.trace([])
        if len(self.chunks) > 1:  # merge, so the next call is cheap
            self.chunks = [
                Trace(
                    **{
                        f: np.concatenate([getattr(c, f) for c in self.chunks])
                        for f in _TRACE_FIELDS
                    }
                )
            ]
        return self.chunks[0]

    def alloc_annotations(self) -> AllocAnnotations:
        """The ``annotate`` events of the events still held, placed on the held trace."""
        if not self.ann_chunks:
            return AllocAnnotations.empty()
        merged = AllocAnnotations(
            **{
                f: np.concatenate([getattr(c, f) for c in self.ann_chunks])
                for f in AllocAnnotations.__dataclass_fields__
            }
        )
        keep = merged.trace_index >= self.dropped  # the rest annotate events no longer held
        merged = AllocAnnotations(
            **{f: getattr(merged, f)[keep] for f in AllocAnnotations.__dataclass_fields__}
        )
        self.ann_chunks = [merged] if len(merged) else []
        held = {f: getattr(merged, f) for f in AllocAnnotations.__dataclass_fields__}
        held["trace_index"] = merged.trace_index - self.dropped
        return AllocAnnotations(**held)

    def snapshot(self) -> Snapshot:
        """The latest segments with the accumulated trace, as one snapshot."""
        segments, blocks, pools = self.builder.segments(self.raw_segments)
        self.builder.forget_objects()
        return Snapshot(
            segments=segments,
            blocks=blocks,
            trace=self.trace(),
            annotations=self.builder.annotations([]),
            frames=self.builder.frames_table(),
            stacks=self.builder.stacks_table(),
            pools=pools,
            allocator_settings=self.builder.settings(self.settings),
            source_format="live",
            warnings=self.log.messages(),
            alloc_annotations=self.alloc_annotations(),
        )


def segments_snapshot(segments: list[Any]) -> Snapshot:
    """A snapshot of segments only (the 2 Hz stats reply): figures and the map."""
    builder = SnapshotBuilder()
    segs, blocks, pools = builder.segments(segments)
    return Snapshot(
        segments=segs,
        blocks=blocks,
        trace=builder.trace([]),
        annotations=builder.annotations([]),
        frames=builder.frames_table(),
        stacks=builder.stacks_table(),
        pools=pools,
        allocator_settings={},
        source_format="live",
        warnings=builder.log.messages(),
    )
