"""The columnar snapshot model.

A snapshot is held as numpy columns, never as one Python object per block or
event: millions of trace events are normal.  Frames and stacks are interned:
each distinct frame is stored once (:class:`Frames`), each distinct call stack
once (:class:`Stacks`, a CSR array of frame ids), and blocks and events refer
to stacks by id (``-1``: no stack recorded).

Sizes and addresses are ``int64``: CUDA virtual addresses fit below ``2**63``
and the loader rejects anything outside ``[0, 2**63)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NO_STACK = -1


class BlockState(enum.IntEnum):
    """A block's state inside a segment, as the caching allocator reports it."""

    ALLOCATED = 0  # "active_allocated": handed out to a tensor
    PENDING_FREE = 1  # "active_pending_free": freed, waiting for other streams' events
    FREE = 2  # "inactive": a free gap inside the segment
    UNKNOWN = 3  # a state this version of vramscope does not know

    @property
    def label(self) -> str:
        return _STATE_LABELS[self]


_STATE_LABELS = {
    BlockState.ALLOCATED: "allocated",
    BlockState.PENDING_FREE: "pending free",
    BlockState.FREE: "free",
    BlockState.UNKNOWN: "unknown",
}

STATE_NAMES = {
    "active_allocated": BlockState.ALLOCATED,
    "active_pending_free": BlockState.PENDING_FREE,
    "active_awaiting_free": BlockState.PENDING_FREE,  # spelling used by some torch builds
    "inactive": BlockState.FREE,
}


class Action(enum.IntEnum):
    """Trace event actions (``device_traces[i][j]['action']``)."""

    ALLOC = 0
    FREE_REQUESTED = 1
    FREE_COMPLETED = 2
    SEGMENT_ALLOC = 3
    SEGMENT_FREE = 4
    SEGMENT_MAP = 5
    SEGMENT_UNMAP = 6
    OOM = 7
    SNAPSHOT = 8


ACTION_NAMES = {a.name.lower(): a for a in Action}


@dataclass
class Frames:
    """Interned frames: ``filename``/``name`` index :attr:`strings`."""

    filename: np.ndarray  # int32
    line: np.ndarray  # int32
    name: np.ndarray  # int32
    strings: list[str]

    def __len__(self) -> int:
        return len(self.line)

    def filename_of(self, i: int) -> str:
        return self.strings[self.filename[i]]

    def name_of(self, i: int) -> str:
        return self.strings[self.name[i]]


@dataclass
class Stacks:
    """Interned call stacks in CSR form; frame 0 of a stack is the innermost."""

    offsets: np.ndarray  # int64, len = n_stacks + 1
    frames: np.ndarray  # int32 frame ids

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def frame_ids(self, stack: int) -> np.ndarray:
        if stack < 0:
            return self.frames[:0]
        return self.frames[self.offsets[stack]:self.offsets[stack + 1]]


@dataclass
class Segments:
    """One row per cudaMalloc'd segment (or expandable segment)."""

    device: np.ndarray  # int32
    address: np.ndarray  # int64
    total_size: np.ndarray  # int64
    stream: np.ndarray  # int64
    is_small: np.ndarray  # bool: small pool (<= 1 MiB requests, 2 MiB segments)
    pool: np.ndarray  # int32 index into Snapshot.pools
    is_expandable: np.ndarray  # bool
    stack: np.ndarray  # int32
    block_start: np.ndarray  # int64: first row in Blocks
    block_count: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.address)


@dataclass
class Blocks:
    """One row per block, grouped by segment in address order."""

    segment: np.ndarray  # int32 row in Segments
    address: np.ndarray  # int64
    size: np.ndarray  # int64: the rounded size the allocator reserved
    requested_size: np.ndarray  # int64: what the caller asked for
    state: np.ndarray  # int8 BlockState
    stack: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.address)


@dataclass
class Trace:
    """Allocator trace events of all devices, in recorded order per device."""

    device: np.ndarray  # int32
    action: np.ndarray  # int8 Action
    addr: np.ndarray  # int64
    size: np.ndarray  # int64
    stream: np.ndarray  # int64
    time_us: np.ndarray  # int64, -1 where the file has no time
    stack: np.ndarray  # int32
    device_free: np.ndarray  # int64, -1 unless an oom event says it
    compile_context: np.ndarray  # int32 string id, -1 if absent
    user_metadata: np.ndarray  # int32 string id, -1 if absent

    def __len__(self) -> int:
        return len(self.action)


@dataclass
class Annotations:
    """``external_annotations``: record_function ranges (START/END markers)."""

    device: np.ndarray  # int32
    is_start: np.ndarray  # bool
    name: np.ndarray  # int32 string id
    time_us: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.time_us)


@dataclass
class Snapshot:
    """A loaded memory snapshot: columns plus small metadata."""

    segments: Segments
    blocks: Blocks
    trace: Trace
    annotations: Annotations
    frames: Frames
    stacks: Stacks
    pools: list[tuple[int, int]]
    allocator_settings: dict[str, Any]
    source_format: str = "pickle"
    path: str | None = None
    warnings: list[str] = field(default_factory=list)
    sidecar: dict[str, Any] | None = None

    @property
    def ordinary_pool(self) -> int | None:
        """Index in :attr:`pools` of the ordinary pool ``(0, 0)`` (None if no segment uses it)."""
        return self.pools.index((0, 0)) if (0, 0) in self.pools else None

    @property
    def strings(self) -> list[str]:
        return self.frames.strings

    def string(self, sid: int) -> str:
        return "" if sid < 0 else self.frames.strings[sid]

    @property
    def devices(self) -> list[int]:
        """Every device that has segments or trace events, ascending."""
        found = set(np.unique(self.segments.device).tolist())
        found.update(np.unique(self.trace.device).tolist())
        return sorted(found)

    def block_frames(self, block: int) -> np.ndarray:
        return self.stacks.frame_ids(int(self.blocks.stack[block]))

    def segment_of(self, block: int) -> int:
        return int(self.blocks.segment[block])
