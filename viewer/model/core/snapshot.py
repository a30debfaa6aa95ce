"""The columnar snapshot model.

A snapshot is held as numpy columns, never as one Python object per block or
event: millions of trace events are normal.  Frames and stacks are interned:
each distinct frame is stored once (:class:`Frames`), each distinct call stack
once (:class:`Stacks`, a CSR array of frame ids), and blocks and events refer
to stacks by id (``-1``: no stack recorded).

Sizes and addresses are ``int64``: CUDA virtual addresses fit below ``2**63``
and the loader rejects anything outside ``[0, 2**63)``.

Newer torch writes more than the allocator's state; each is kept apart so that
no GPU figure changes:

* ``annotate`` trace events (``torch.cuda.memory._annotate_memory`` /
  ``_annotate_tensor``) are not allocator actions: they live in
  :class:`AllocAnnotations`, never in :class:`Trace`;
* ``forward_frames`` (the forward-pass stack of an allocation made in
  backward) is :attr:`Trace.forward_stack`, a stack id like :attr:`Trace.stack`;
* FX frame fields (``fx_node_name``, ``fx_node_op``, ``fx_node_target``,
  ``fx_original_trace``) are columns of :class:`Frames`;
* pinned host memory (``host_segments``/``host_traces``) is
  :attr:`Snapshot.host`, its own device :data:`HOST_DEVICE`, outside
  :attr:`Snapshot.devices` and every GPU figure;
* ``allocator_settings.trace_alloc_overflowed``/``trace_alloc_max_entries``:
  :attr:`Snapshot.trace_overflowed`, :meth:`Snapshot.trace_integrity_note`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NO_STACK = -1
HOST_DEVICE = -1  # the device number of pinned host memory (host_segments / host_traces)


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


FX_FIELDS = ("fx_node_name", "fx_node_op", "fx_node_target", "fx_original_trace")


@dataclass
class Frames:
    """Interned frames: ``filename``/``name`` index :attr:`strings`.

    The ``fx_*`` columns hold the FX debug fields torch adds to frames of
    FX-generated code (``_snapshot(augment_with_fx_traces=True)``): string ids,
    ``-1`` where the frame has none.  ``fx_original_trace`` is the model source
    stack (several lines) the FX node came from.
    """

    filename: np.ndarray  # int32
    line: np.ndarray  # int32
    name: np.ndarray  # int32
    strings: list[str]
    fx_node_name: np.ndarray | None = None  # int32 string id, -1: none
    fx_node_op: np.ndarray | None = None
    fx_node_target: np.ndarray | None = None
    fx_original_trace: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in FX_FIELDS:
            if getattr(self, name) is None:
                setattr(self, name, np.full(len(self.line), -1, dtype=np.int32))

    def __len__(self) -> int:
        return len(self.line)

    def fx_of(self, i: int) -> dict[str, str]:
        """The FX fields of frame ``i`` (``{}`` for ordinary frames), e.g.
        ``{"fx_node_name": "linear", "fx_node_op": "call_function", ...}``."""
        out = {}
        for name in FX_FIELDS:
            sid = int(getattr(self, name)[i])
            if sid >= 0:
                out[name] = self.strings[sid]
        return out

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
        return self.frames[self.offsets[stack] : self.offsets[stack + 1]]


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
    # int32 stack id of the event's ``forward_frames``: for an allocation made in
    # backward, the forward-pass stack that created it (-1: none recorded)
    # (None given: filled with -1 by __post_init__, so never None after construction)
    forward_stack: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.forward_stack is None:
            self.forward_stack = np.full(len(self.action), NO_STACK, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.action)

    def device_range(self) -> tuple[int, int] | None:
        """(lowest, highest) device with events, None without events: two passes over
        the column, made once per column (many steps ask whether one device holds every
        event, as in most recordings)."""
        got = self.__dict__.get("_device_range")
        if got is not None and got[0] is self.device and got[1] == len(self.device):
            return got[2]
        found = (int(self.device.min()), int(self.device.max())) if len(self.device) else None
        self.__dict__["_device_range"] = (self.device, len(self.device), found)
        return found

    def single_device(self) -> int | None:
        """The device of every event when one device holds them all, else None."""
        found = self.device_range()
        return found[0] if found is not None and found[0] == found[1] else None


@dataclass
class Annotations:
    """``external_annotations``: record_function ranges (START/END markers)."""

    device: np.ndarray  # int32
    is_start: np.ndarray  # bool
    name: np.ndarray  # int32 string id
    time_us: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.time_us)

    @classmethod
    def empty(cls) -> "Annotations":
        return cls(
            device=np.zeros(0, dtype=np.int32),
            is_start=np.zeros(0, dtype=bool),
            name=np.zeros(0, dtype=np.int32),
            time_us=np.zeros(0, dtype=np.int64),
        )


@dataclass
class AllocAnnotations:
    """``annotate`` trace events: text attached to a live allocation after the fact.

    Written by ``torch.cuda.memory._annotate_memory(ptr, text)`` /
    ``_annotate_tensor(t, text)``: ``addr`` is the allocation's base address,
    ``text`` its ``user_metadata``, ``stack`` where the annotation was made.
    ``trace_index`` places it on the timeline: the row in :class:`Trace` of the
    first allocator event recorded after it (``len(trace)`` if none), so it
    sits between the same events it was recorded between.
    """

    device: np.ndarray  # int32
    addr: np.ndarray  # int64
    size: np.ndarray  # int64 (the allocation's size as the event reports it)
    time_us: np.ndarray  # int64, -1 where absent
    text: np.ndarray  # int32 string id
    stack: np.ndarray  # int32 stack id
    trace_index: np.ndarray  # int64 row in Trace

    def __len__(self) -> int:
        return len(self.addr)

    @classmethod
    def empty(cls) -> "AllocAnnotations":
        i32, i64 = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        return cls(
            device=i32, addr=i64, size=i64, time_us=i64, text=i32, stack=i32, trace_index=i64
        )

    def on_device(self, device: int, device_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(annotation rows, positions) of ``device``'s annotations on its own event axis.

        ``device_rows``: the trace rows of that device's events in order
        (``timeline.replay(device).rows``).  An annotation at position ``k``
        was recorded after event ``k - 1`` and before event ``k`` of the device:
        the timeline draws its marker there.
        """
        mine = np.flatnonzero(self.device == device)
        return mine, np.searchsorted(device_rows, self.trace_index[mine]).astype(np.int64)

    def rows_for(
        self, device: int, addr: int, first: int = 0, last: int | None = None
    ) -> np.ndarray:
        """Rows annotating ``addr`` on ``device`` recorded between trace rows
        ``first`` and ``last`` (the lifetime of one allocation), in order."""
        mask = (self.device == device) & (self.addr == addr) & (self.trace_index >= first)
        if last is not None:
            mask &= self.trace_index <= last
        return np.flatnonzero(mask)


@dataclass
class HostMemory:
    """Pinned host memory (``host_segments``/``host_traces``), its own device.

    torch records it with ``_record_memory_history(record_pinned_host_memory=True)``.
    The columns have the GPU tables' layout; every ``device`` column holds
    :data:`HOST_DEVICE`.  Stacks, frames and strings are the snapshot's.
    """

    segments: Segments
    blocks: Blocks
    trace: Trace
    pools: list[tuple[int, int]]
    alloc_annotations: AllocAnnotations = field(default_factory=AllocAnnotations.empty)

    def __len__(self) -> int:
        return len(self.segments) + len(self.trace)

    @property
    def reserved_bytes(self) -> int:
        """Pinned bytes the host allocator holds at the end of the recording."""
        return int(self.segments.total_size.sum())

    @property
    def allocated_bytes(self) -> int:
        """Pinned bytes handed out (blocks in use) at the end of the recording."""
        return int(self.blocks.size[self.blocks.state == BlockState.ALLOCATED].sum())


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
    alloc_annotations: AllocAnnotations = field(default_factory=AllocAnnotations.empty)
    host: HostMemory | None = None  # pinned host memory, when the file has any

    def sidecar_stats(self, device: int | None) -> dict[str, Any]:
        """The sidecar's ``memory_stats()`` counters where they are ``device``'s (the
        sidecar names the device it was taken on; none named: the only one), else {}."""
        side = self.sidecar if isinstance(self.sidecar, dict) else {}
        stats = side.get("memory_stats") if side.get("device") in (None, device) else None
        return stats if isinstance(stats, dict) else {}

    @property
    def trace_overflowed(self) -> bool | None:
        """``allocator_settings.trace_alloc_overflowed``: True when the allocator's
        trace ring wrapped and its oldest events were overwritten (None: the file
        does not say, as before torch 2.12)."""
        v = self.allocator_settings.get("trace_alloc_overflowed")
        return v if type(v) is bool else None

    @property
    def trace_max_entries(self) -> int | None:
        """``allocator_settings.trace_alloc_max_entries``: the ring's size (None if absent)."""
        v = self.allocator_settings.get("trace_alloc_max_entries")
        return v if type(v) is int and not isinstance(v, bool) and v >= 0 else None

    def trace_integrity_note(self) -> str | None:
        """One line for the integrity line / header when the trace ring overflowed, else None.

        The segments are complete either way (torch takes them at snapshot
        time); what is lost is the history before the first recorded event.
        """
        if not self.trace_overflowed:
            return None
        size = self.trace_max_entries
        # (not units.plural: units imports this module)
        ring = (
            f"its {size:,} {'entry' if size == 1 else 'entries'}"
            if size is not None
            else "its entries"
        )
        return (
            "the allocator's trace ring overflowed (torch reports trace_alloc_overflowed): "
            f"events older than {ring} were overwritten, so the timeline starts "
            "mid-run; the segments at the end are complete"
        )

    @property
    def has_host_memory(self) -> bool:
        """Whether the file carries pinned host memory (shown as device :data:`HOST_DEVICE`)."""
        return self.host is not None and len(self.host) > 0

    def host_snapshot(self) -> "Snapshot | None":
        """The pinned host memory as a snapshot of its own (device :data:`HOST_DEVICE`),
        sharing this snapshot's frames and stacks; None without host memory.

        Kept apart so no GPU figure ever includes host bytes: views that offer
        "host" in the device selector build their document from this.
        """
        if self.host is None:
            return None
        return Snapshot(
            segments=self.host.segments,
            blocks=self.host.blocks,
            trace=self.host.trace,
            annotations=Annotations.empty(),
            alloc_annotations=self.host.alloc_annotations,
            frames=self.frames,
            stacks=self.stacks,
            pools=self.host.pools,
            allocator_settings=self.allocator_settings,
            source_format=self.source_format,
            path=self.path,
            warnings=[],
        )

    def event_details(self, row: int, until_row: int | None = None) -> dict[str, Any]:
        """What newer torch recorded about the allocation made at trace row ``row``,
        for tooltips and the stack panel.

        ``until_row``: the row of its free (``None``: still live) bounds the
        annotations taken.  Rows index :attr:`trace` (from a device's event
        index ``k``, ``timeline.replay(device).rows[k]``).  Returns
        ``user_metadata`` and ``compile_context`` (str or None),
        ``forward_frames`` (frame ids, innermost first: the forward-pass stack
        of an allocation made in backward) and ``annotations``: a list of
        ``{"text", "stack", "time_us"}`` (``_annotate_memory`` calls, in order).
        """
        t = self.trace
        um, cc = int(t.user_metadata[row]), int(t.compile_context[row])
        ann = self.alloc_annotations
        rows = ann.rows_for(int(t.device[row]), int(t.addr[row]), first=row + 1, last=until_row)
        return {
            "user_metadata": self.string(um) if um >= 0 else None,
            "compile_context": self.string(cc) if cc >= 0 else None,
            "forward_frames": self.event_forward_frames(row),
            "annotations": [
                {
                    "text": self.string(int(ann.text[i])),
                    "stack": int(ann.stack[i]),
                    "time_us": int(ann.time_us[i]) if ann.time_us[i] >= 0 else None,
                }
                for i in rows.tolist()
            ],
        }

    def event_forward_frames(self, event: int) -> np.ndarray:
        """Frame ids of trace row ``event``'s forward-pass stack (empty if none)."""
        return self.stacks.frame_ids(int(self.trace.forward_stack[event]))

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
        """Every GPU that has segments or trace events, ascending (pinned host
        memory is :attr:`host`, never listed here)."""
        found = set(np.unique(self.segments.device).tolist())
        found.update(np.unique(self.trace.device).tolist())
        return sorted(found)

    def block_frames(self, block: int) -> np.ndarray:
        return self.stacks.frame_ids(int(self.blocks.stack[block]))
