"""One :class:`SnapshotBuilder` turns decoded snapshot parts into columns.

Both sources of snapshots use it: :func:`.schema.to_snapshot` (a whole file)
and :class:`..live.columns.LiveColumns` (a running process, increment by
increment).  The builder owns the interner, so a frame, stack or string keeps
its id across every part it converts.

Reading rules (every schema generation torch has written):

* malformed entries are skipped with a counted warning naming what was
  skipped; nothing here recurses into user data, so nesting cannot hurt;
* what newer torch adds is read, never dropped: ``annotate`` events
  (:class:`..core.snapshot.AllocAnnotations`), ``forward_frames``
  (:attr:`..core.snapshot.Trace.forward_stack`), FX frame fields
  (:class:`..core.snapshot.Frames`), ``user_metadata`` given as a dict, pinned host
  memory (:class:`..core.snapshot.HostMemory`);
* keys torch writes that no view uses (``pool_id`` on events, a segment's
  ``allocated_size``) are ignored by design.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import WarningLog
from ..core.progress import Progress
from ..core.snapshot import (
    ACTION_NAMES,
    HOST_DEVICE,
    NO_STACK,
    STATE_NAMES,
    AllocAnnotations,
    Annotations,
    Blocks,
    BlockState,
    Frames,
    HostMemory,
    Segments,
    Stacks,
    Trace,
)
from .interner import Interner

INT64_MAX = (1 << 63) - 1
SMALL_SEGMENT_MAX = 2 << 20  # kSmallBuffer: small-pool segments are 2 MiB
_PLAIN = (str, int, float, bool, type(None))
ANNOTATE = "annotate"  # the trace action of _annotate_memory: not an allocator action


def _columns(n: int) -> list[list[Any]]:
    """``n`` empty Python lists, one per column being gathered."""
    return [[] for _ in range(n)]


def _uint(v: Any) -> int | None:
    """A non-negative int64, or None for anything else (bools, floats, huge)."""
    if type(v) is int and 0 <= v <= INT64_MAX:
        return v
    if type(v) is float and v.is_integer() and 0 <= v <= INT64_MAX:
        return int(v)
    return None


def _sint(v: Any, default: int) -> int:
    if type(v) is int and -INT64_MAX <= v <= INT64_MAX:
        return v
    return default


def _small_int(v: Any) -> int:
    v = _sint(v, 0)
    return v if 0 <= v < (1 << 16) else 0


def _short(v: Any) -> str:
    if type(v) is str:
        return repr(v[:40])
    return f"<{type(v).__name__}>"


def metadata_text(v: Any) -> str | None:
    """``user_metadata`` as one string: torch writes a string; dicts (some
    tools write ``{key: value}``) become ``"key: value; ..."``; empty -> None."""
    if v is None or v == "":
        return None
    if type(v) is str:
        return v
    if type(v) is dict:
        parts = [f"{k}: {x}" for k, x in v.items() if type(k) in _PLAIN and type(x) in _PLAIN]
        return "; ".join(parts) or None
    return str(v) if type(v) in _PLAIN else "?"


class SnapshotBuilder:
    """Converts the parts of decoded snapshots into columns with one interner.

    Use one builder per file, or one per live session (then call
    :meth:`forget_objects` after each increment).  Every method skips what is
    malformed and counts it in :attr:`log`.
    """

    def __init__(self, log: WarningLog | None = None) -> None:
        self.log = log if log is not None else WarningLog()
        self.interner = Interner(self.log)

    def forget_objects(self) -> None:
        """Forget object identities (call when the decoded objects are about to be freed)."""
        self.interner.forget_objects()

    def frames_table(self) -> Frames:
        """Every frame interned so far."""
        return self.interner.frames_table()

    def stacks_table(self) -> Stacks:
        """Every stack interned so far."""
        return self.interner.stacks_table()

    def segments(
        self, raw_segments: Any, device: int | None = None
    ) -> tuple[Segments, Blocks, list[tuple[int, int]]]:
        """``segments`` -> (segments, blocks, pools); ``device`` overrides each
        segment's own (pinned host memory: :data:`HOST_DEVICE`)."""
        pools: list[tuple[int, int]] = []
        if type(raw_segments) is not list:
            raw_segments = []
        segments, blocks = _segments(raw_segments, self.interner, pools, {}, self.log, device)
        return segments, blocks, pools

    def trace(self, raw_traces: Any, progress: Progress | None = None) -> Trace:
        """``device_traces`` (one list per device) -> trace columns; ``annotate``
        events are dropped here (see :meth:`trace_and_annotations`)."""
        return self.trace_and_annotations(raw_traces, progress)[0]

    def trace_and_annotations(
        self, raw_traces: Any, progress: Progress | None = None, device: int | None = None
    ) -> tuple[Trace, AllocAnnotations]:
        """``device_traces`` -> (trace columns, ``annotate`` events).

        ``device`` puts every event on that device (pinned host memory)."""
        if type(raw_traces) is not list:
            raw_traces = []
        total = sum(len(t) for t in raw_traces if type(t) is list) or 1
        return _trace(raw_traces, self.interner, self.log, progress or Progress(), total, device)

    def native_trace(self, native: dict) -> Trace:
        """Trace columns the compiled parser filled, ids mapped through the interner."""
        return _native_trace(native, self.interner)

    def annotations(self, raw: Any) -> Annotations:
        """``external_annotations`` (record_function START/END markers)."""
        return _annotations(raw if type(raw) is list else [], self.interner, self.log)

    def host(self, raw_segments: Any, raw_traces: Any) -> HostMemory | None:
        """``host_segments``/``host_traces`` -> :class:`HostMemory` (None if both absent).

        ``host_traces`` is read as one list of events (the host allocator is
        one) or, like ``device_traces``, as a list of such lists."""
        if raw_segments is None and raw_traces is None:
            return None
        if raw_segments is not None and type(raw_segments) is not list:
            self.log.add("skipped 'host_segments': it is not a list")
            raw_segments = []
        if raw_traces is not None and type(raw_traces) is not list:
            self.log.add("skipped 'host_traces': it is not a list")
            raw_traces = []
        raw_traces = raw_traces or []
        if all(type(t) is dict for t in raw_traces):
            per_list = [raw_traces]
        else:
            per_list = [t for t in raw_traces if type(t) is list]
            if len(per_list) != len(raw_traces):
                self.log.add("skipped 'host_traces' entries that are neither events nor lists")
        segments, blocks, pools = self.segments(raw_segments or [], device=HOST_DEVICE)
        trace, ann = self.trace_and_annotations(per_list, device=HOST_DEVICE)
        return HostMemory(
            segments=segments, blocks=blocks, trace=trace, pools=pools, alloc_annotations=ann
        )

    @staticmethod
    def settings(settings: Any) -> dict[str, Any]:
        """``allocator_settings`` with plain values only (one level of dicts)."""
        return _plain_settings(settings) if type(settings) is dict else {}


def _plain_settings(settings: dict) -> dict[str, Any]:
    """Keep only plain values (one level of dicts) for display and JSON."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if type(k) is not str:
            continue
        if type(v) in _PLAIN:
            out[k] = v
        elif type(v) is dict:
            out[k] = {str(a): b for a, b in v.items() if type(b) in _PLAIN and type(a) in _PLAIN}
    return out


def _pool_index(raw: Any, pools: list, pool_ids: dict) -> int:
    if (type(raw) is tuple or type(raw) is list) and len(raw) == 2:
        key = (_sint(raw[0], 0), _sint(raw[1], 0))
    else:
        key = (0, 0)
    idx = pool_ids.get(key)
    if idx is None:
        idx = pool_ids[key] = len(pools)
        pools.append(key)
    return idx


def _whole_segment_block(seg: dict, total: int) -> dict:
    """A host segment written without blocks: one block, its state from the
    segment's own byte counts where it has them."""
    allocated = _uint(seg.get("allocated_size"))
    active = _uint(seg.get("active_size"))
    if allocated == total:
        state = "active_allocated"
    elif active == total:
        state = "active_pending_free"
    elif allocated == 0 and active in (0, None):
        state = "inactive"
    else:
        state = "unknown"
    return {
        "size": total,
        "state": state,
        "requested_size": seg.get("requested_size"),
        "frames": seg.get("frames"),
    }


def _segments(
    raw_segments: list,
    interner: Interner,
    pools: list,
    pool_ids: dict,
    log: WarningLog,
    device: int | None = None,
):
    s_device, s_addr, s_total, s_stream, s_small, s_pool, s_exp, s_stack = _columns(8)
    s_bstart, s_bcount = [], []
    b_seg, b_addr, b_size, b_req, b_state, b_stack = _columns(6)
    stack = interner.stack
    for seg in raw_segments:
        if type(seg) is not dict:
            log.add("skipped segments that are not dicts")
            continue
        addr = _uint(seg.get("address"))
        total = _uint(seg.get("total_size"))
        raw_blocks = seg.get("blocks")
        if addr is None or total is None:
            log.add("skipped segments with a missing or negative address or total_size")
            continue
        if raw_blocks is None and device == HOST_DEVICE:
            raw_blocks = [_whole_segment_block(seg, total)]
        if type(raw_blocks) is not list:
            log.add("skipped segments without a 'blocks' list")
            continue
        seg_row = len(s_addr)
        first = len(b_addr)
        offset = addr
        for b in raw_blocks:
            if type(b) is not dict:
                log.add("skipped blocks that are not dicts")
                continue
            size = _uint(b.get("size"))
            if size is None:
                log.add("skipped blocks with a missing or negative size")
                continue
            b_address = _uint(b.get("address", offset))
            if b_address is None:
                log.add("skipped blocks with a negative address")
                continue
            state_name = b.get("state")
            state = STATE_NAMES.get(state_name) if type(state_name) is str else None
            if state is None:
                log.add(f"kept blocks with unknown state {_short(state_name)} as 'unknown'")
                state = BlockState.UNKNOWN
            frames = b.get("frames")
            requested = b.get("requested_size")
            history = b.get("history")
            if (frames is None or requested is None) and type(history) is list and history:
                # torch 2.0: the allocation's details live in history[0].
                h = history[0] if type(history[0]) is dict else {}
                if frames is None:
                    frames = h.get("frames")
                if requested is None:
                    requested = h.get("real_size")
            req = _uint(requested)
            if req is None:
                req = size if state != BlockState.FREE else 0
                if requested is not None:
                    log.add("replaced missing or negative requested_size by the block size")
            b_seg.append(seg_row)
            b_addr.append(b_address)
            b_size.append(size)
            b_req.append(req)
            b_state.append(int(state))
            b_stack.append(stack(frames))
            offset = b_address + size
        count = len(b_addr) - first
        block_sum = sum(b_size[first:])
        if block_sum != total:
            log.add("segments whose blocks do not add up to their total_size (shown as recorded)")
        seg_type = seg.get("segment_type")
        if seg_type == "small":
            is_small = True
        elif seg_type == "large":
            is_small = False
        else:
            is_small = total <= SMALL_SEGMENT_MAX
        s_device.append(_small_int(seg.get("device", 0)) if device is None else device)
        s_addr.append(addr)
        s_total.append(total)
        s_stream.append(_sint(seg.get("stream", 0), 0))
        s_small.append(is_small)
        s_pool.append(_pool_index(seg.get("segment_pool_id"), pools, pool_ids))
        s_exp.append(seg.get("is_expandable") is True)
        s_stack.append(stack(seg.get("frames")))
        s_bstart.append(first)
        s_bcount.append(count)
    segments = Segments(
        device=np.array(s_device, dtype=np.int32),
        address=np.array(s_addr, dtype=np.int64),
        total_size=np.array(s_total, dtype=np.int64),
        stream=np.array(s_stream, dtype=np.int64),
        is_small=np.array(s_small, dtype=bool),
        pool=np.array(s_pool, dtype=np.int32),
        is_expandable=np.array(s_exp, dtype=bool),
        stack=np.array(s_stack, dtype=np.int32),
        block_start=np.array(s_bstart, dtype=np.int64),
        block_count=np.array(s_bcount, dtype=np.int64),
    )
    blocks = Blocks(
        segment=np.array(b_seg, dtype=np.int32),
        address=np.array(b_addr, dtype=np.int64),
        size=np.array(b_size, dtype=np.int64),
        requested_size=np.array(b_req, dtype=np.int64),
        state=np.array(b_state, dtype=np.int8),
        stack=np.array(b_stack, dtype=np.int32),
    )
    return segments, blocks


def _trace(
    raw_traces: list,
    interner: Interner,
    log: WarningLog,
    progress: Progress,
    total_events: int,
    device_override: int | None = None,
) -> tuple[Trace, AllocAnnotations]:
    t_dev, t_act, t_addr, t_size, t_stream, t_time, t_stack, t_free, t_cc, t_um = _columns(10)
    fwd_rows: list[int] = []  # rows with forward_frames (rare): a sparse column
    fwd_ids: list[int] = []
    a_dev, a_addr, a_size, a_time, a_text, a_stack, a_row = _columns(7)
    stack = interner.stack
    string = interner.string
    actions = ACTION_NAMES
    done = 0
    for device, events in enumerate(raw_traces):
        if type(events) is not list:
            log.add("skipped device traces that are not lists")
            continue
        if device >= (1 << 16):
            log.add("skipped device traces beyond device 65535")
            continue
        if device_override is not None:
            device = device_override
        for e in events:
            done += 1
            if not done & 0xFFFF:
                progress.update("columns", done / total_events)
            if type(e) is not dict:
                log.add("skipped trace events that are not dicts")
                continue
            name = e.get("action")
            action = actions.get(name) if type(name) is str else None
            if action is None:
                if name == ANNOTATE:
                    addr = _uint(e.get("addr"))
                    if addr is None:
                        log.add("skipped annotate events without an address")
                        continue
                    a_dev.append(device)
                    a_addr.append(addr)
                    a_size.append(_uint(e.get("size")) or 0)
                    a_time.append(_sint(e.get("time_us", -1), -1))
                    text = metadata_text(e.get("user_metadata"))
                    a_text.append(string("" if text is None else text))
                    a_stack.append(stack(e.get("frames")))
                    a_row.append(len(t_act))
                    continue
                log.add(f"skipped trace events with unknown action {_short(name)}")
                continue
            size = _uint(e.get("size"))
            if size is None:
                log.add("skipped trace events with a missing or negative size")
                continue
            addr = _uint(e.get("addr", 0))
            if addr is None:
                log.add("skipped trace events with a negative address")
                continue
            t_dev.append(device)
            t_act.append(action)
            t_addr.append(addr)
            t_size.append(size)
            t_stream.append(_sint(e.get("stream", 0), 0))
            t_time.append(_sint(e.get("time_us", -1), -1))
            t_stack.append(stack(e.get("frames")))
            t_free.append(_sint(e.get("device_free", -1), -1))
            cc = e.get("compile_context")
            t_cc.append(-1 if cc is None or cc == "N/A" else string(cc))
            um = e.get("user_metadata")
            if um is None or um == "":
                t_um.append(-1)
            elif type(um) is str:
                t_um.append(string(um))
            else:  # a dict (``{key: value}``) or another plain value
                text = metadata_text(um)
                t_um.append(-1 if text is None else string(text))
            fwd = e.get("forward_frames")
            if fwd is not None:
                sid = interner.forward_stack(fwd)
                if sid != NO_STACK:
                    fwd_rows.append(len(t_act) - 1)
                    fwd_ids.append(sid)
    n = len(t_act)
    forward = np.full(n, NO_STACK, dtype=np.int32)
    if fwd_rows:
        forward[np.array(fwd_rows, dtype=np.int64)] = fwd_ids
    trace = Trace(
        device=np.array(t_dev, dtype=np.int32),
        action=np.array(t_act, dtype=np.int8),
        addr=np.array(t_addr, dtype=np.int64),
        size=np.array(t_size, dtype=np.int64),
        stream=np.array(t_stream, dtype=np.int64),
        time_us=np.array(t_time, dtype=np.int64),
        stack=np.array(t_stack, dtype=np.int32),
        device_free=np.array(t_free, dtype=np.int64),
        compile_context=np.array(t_cc, dtype=np.int32),
        user_metadata=np.array(t_um, dtype=np.int32),
        forward_stack=forward,
    )
    ann = AllocAnnotations(
        device=np.array(a_dev, dtype=np.int32),
        addr=np.array(a_addr, dtype=np.int64),
        size=np.array(a_size, dtype=np.int64),
        time_us=np.array(a_time, dtype=np.int64),
        text=np.array(a_text, dtype=np.int32),
        stack=np.array(a_stack, dtype=np.int32),
        trace_index=np.array(a_row, dtype=np.int64),
    )
    return trace, ann


def _native_trace(native: dict, interner: Interner) -> Trace:
    """Trace columns from the compiled parser, ids mapped through the interner.

    The parser hands out raw stack and string handles plus the order in which
    each first appeared (stack before compile_context before user_metadata,
    event by event); interning them in that order gives the ids :func:`_trace`
    gives.  (Events with keys the compiled parser does not know, such as
    ``forward_frames``, or ``annotate`` events never reach here: it hands
    those files to the Python path.)
    """
    cols = {
        name: np.frombuffer(col, dtype=_NATIVE_DTYPES[name])
        for name, col in native["columns"].items()
    }
    stacks, strings = native["stacks"], native["strings"]
    stack_map = np.full(len(stacks) + 1, NO_STACK, dtype=np.int32)  # last slot: raw -1
    string_map = np.full(len(strings) + 1, -1, dtype=np.int32)
    for code in cols["first_seen"].tolist():
        if code & 1:
            string_map[code >> 1] = interner.string(strings[code >> 1])
        else:
            stack_map[code >> 1] = interner.stack(stacks[code >> 1])
    return Trace(
        device=cols["device"],
        action=cols["action"],
        addr=cols["addr"],
        size=cols["size"],
        stream=cols["stream"],
        time_us=cols["time_us"],
        stack=np.take(stack_map, cols["stack"]),  # raw -1 takes the trailing NO_STACK
        device_free=cols["device_free"],
        # no strings: the raw column is all -1 already
        compile_context=np.take(string_map, cols["compile_context"])
        if strings
        else cols["compile_context"],
        user_metadata=np.take(string_map, cols["user_metadata"])
        if strings
        else cols["user_metadata"],
    )


_NATIVE_DTYPES = {
    "device": np.int32,
    "action": np.int8,
    "addr": np.int64,
    "size": np.int64,
    "stream": np.int64,
    "time_us": np.int64,
    "stack": np.int32,
    "device_free": np.int64,
    "compile_context": np.int32,
    "user_metadata": np.int32,
    "first_seen": np.int32,
}


def _annotations(raw: list, interner: Interner, log: WarningLog) -> Annotations:
    dev, start, name, time = [], [], [], []
    for a in raw:
        if type(a) is not dict:
            log.add("skipped external annotations that are not dicts")
            continue
        stage = a.get("stage")
        t = _sint(a.get("time_us"), -1)
        if stage not in ("START", "END") or t < 0:
            log.add("skipped external annotations without a START/END stage and time")
            continue
        dev.append(_small_int(a.get("device", 0)))
        start.append(stage == "START")
        name.append(interner.string(a.get("name", "?")))
        time.append(t)
    return Annotations(
        device=np.array(dev, dtype=np.int32),
        is_start=np.array(start, dtype=bool),
        name=np.array(name, dtype=np.int32),
        time_us=np.array(time, dtype=np.int64),
    )
