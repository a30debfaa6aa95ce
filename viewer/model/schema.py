"""Turn an unpickled (or JSON-decoded) snapshot into columns.

Accepts every schema generation torch has written:

* the current dict ``{segments, device_traces, allocator_settings,
  external_annotations}`` with per-block ``frames``/``requested_size``;
* torch 2.0-style blocks with ``history: [{addr, real_size, frames}]``;
* a bare list of segments (``torch.cuda.memory_snapshot()``);
* any optional key missing, JSON lists where pickles have tuples, several
  devices.

Anything malformed is skipped with a counted warning naming what was skipped;
only a file that is not a snapshot at all raises :class:`SnapshotError`.
Nothing here recurses into user data, so nesting depth cannot hurt.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import SnapshotError, WarningLog
from .progress import Progress
from .snapshot import (
    ACTION_NAMES,
    NO_STACK,
    STATE_NAMES,
    Annotations,
    Blocks,
    BlockState,
    Frames,
    Segments,
    Snapshot,
    Stacks,
    Trace,
)

INT64_MAX = (1 << 63) - 1
SMALL_SEGMENT_MAX = 2 << 20  # kSmallBuffer: small-pool segments are 2 MiB
_PLAIN = (str, int, float, bool, type(None))


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


class _Interner:
    """Interns strings, frames and stacks; identity caches keep shared lists cheap.

    Torch pickles share frame dicts (and sometimes whole frame lists) by
    reference; caching by ``id()`` while the parsed tree is alive turns a file
    where 200k events reference one 5000-frame list into 5000 frame lookups,
    not a billion.
    """

    def __init__(self, log: WarningLog) -> None:
        self.log = log
        self.strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self.f_file: list[int] = []
        self.f_line: list[int] = []
        self.f_name: list[int] = []
        self._frame_ids: dict[tuple[int, int, int], int] = {}
        self._frame_by_obj: dict[int, int] = {}
        self.s_offsets: list[int] = [0]
        self.s_frames: list[int] = []
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self._stack_by_obj: dict[int, int] = {}

    def string(self, s: Any) -> int:
        if type(s) is not str:
            if s is None:
                return -1
            s = str(s) if type(s) in _PLAIN else "?"
        sid = self._string_ids.get(s)
        if sid is None:
            sid = len(self.strings)
            self.strings.append(s)
            self._string_ids[s] = sid
        return sid

    def frame(self, f: Any) -> int:
        fid = self._frame_by_obj.get(id(f))
        if fid is not None:
            return fid
        if type(f) is not dict:
            self.log.add("skipped stack frames that are not dicts")
            return -1
        filename = f.get("filename", "??")
        name = f.get("name", "??")
        line = _sint(f.get("line", 0), 0)
        if not -(1 << 31) <= line < (1 << 31):
            line = 0
        key = (self.string(filename if type(filename) is str else "??"), line,
               self.string(name if type(name) is str else "??"))
        fid = self._frame_ids.get(key)
        if fid is None:
            fid = len(self.f_line)
            self.f_file.append(key[0])
            self.f_line.append(key[1])
            self.f_name.append(key[2])
            self._frame_ids[key] = fid
        self._frame_by_obj[id(f)] = fid
        return fid

    def stack(self, frames: Any) -> int:
        if frames is None:
            return NO_STACK
        sid = self._stack_by_obj.get(id(frames))
        if sid is not None:
            return sid
        if type(frames) is not list and type(frames) is not tuple:
            self.log.add("skipped frame lists that are not lists")
            return NO_STACK
        ids = tuple(fid for fid in map(self.frame, frames) if fid >= 0)
        sid = self._stack_ids.get(ids)
        if sid is None:
            sid = len(self.s_offsets) - 1
            self.s_frames.extend(ids)
            self.s_offsets.append(len(self.s_frames))
            self._stack_ids[ids] = sid
        self._stack_by_obj[id(frames)] = sid
        return sid

    def frames_table(self) -> Frames:
        return Frames(
            filename=np.array(self.f_file, dtype=np.int32),
            line=np.array(self.f_line, dtype=np.int32),
            name=np.array(self.f_name, dtype=np.int32),
            strings=self.strings,
        )

    def stacks_table(self) -> Stacks:
        return Stacks(
            offsets=np.array(self.s_offsets, dtype=np.int64),
            frames=np.array(self.s_frames, dtype=np.int32),
        )


def to_snapshot(obj: Any, progress: Progress | None = None, source_format: str = "pickle",
                native: dict | None = None) -> Snapshot:
    """Build a :class:`Snapshot` from decoded builtin objects.

    ``native``: trace columns the compiled parser filled (then the trace
    lists in ``obj`` are empty placeholders); interned here in the same order
    as :func:`_trace` would, so both paths give identical ids.
    """
    progress = progress or Progress()
    log = WarningLog()
    if type(obj) is list:
        if obj and not any(type(s) is dict and "blocks" in s for s in obj[:1000]):
            raise SnapshotError(
                "not a memory snapshot: the file holds a list, but not a list of segments"
            )
        raw_segments, raw_traces, settings, annotations = obj, [], {}, []
    elif type(obj) is dict:
        if "segments" not in obj and "device_traces" not in obj:
            keys = ", ".join(sorted(str(k) for k in list(obj)[:6]))
            raise SnapshotError(
                f"not a memory snapshot: the file holds a dict without 'segments' or "
                f"'device_traces' (keys: {keys or 'none'})"
            )
        raw_segments = obj.get("segments", [])
        raw_traces = obj.get("device_traces", [])
        settings = obj.get("allocator_settings", {})
        annotations = obj.get("external_annotations", [])
    else:
        raise SnapshotError(
            f"not a memory snapshot: the file holds {_a(type(obj).__name__)}, "
            "not a snapshot dict or a list of segments"
        )
    if type(raw_segments) is not list:
        log.add("skipped 'segments': it is not a list")
        raw_segments = []
    if type(raw_traces) is not list:
        log.add("skipped 'device_traces': it is not a list")
        raw_traces = []
    if type(settings) is not dict:
        log.add("skipped 'allocator_settings': it is not a dict")
        settings = {}
    if type(annotations) is not list:
        log.add("skipped 'external_annotations': it is not a list")
        annotations = []

    interner = _Interner(log)
    pools: list[tuple[int, int]] = []
    pool_ids: dict[tuple[int, int], int] = {}
    segments, blocks = _segments(raw_segments, interner, pools, pool_ids, log)
    if native is not None:
        trace = _native_trace(native, interner)
    else:
        total_events = sum(len(t) for t in raw_traces if type(t) is list) or 1
        trace = _trace(raw_traces, interner, log, progress, total_events)
    ann = _annotations(annotations, interner, log)
    progress.update("columns", 1.0)
    return Snapshot(
        segments=segments,
        blocks=blocks,
        trace=trace,
        annotations=ann,
        frames=interner.frames_table(),
        stacks=interner.stacks_table(),
        pools=pools,
        allocator_settings=_plain_settings(settings),
        source_format=source_format,
        warnings=log.messages(),
    )


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


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


def _segments(raw_segments: list, interner: _Interner, pools: list, pool_ids: dict, log: WarningLog):
    s_device, s_addr, s_total, s_stream, s_small, s_pool, s_exp, s_stack = ([] for _ in range(8))
    s_bstart, s_bcount = [], []
    b_seg, b_addr, b_size, b_req, b_state, b_stack = ([] for _ in range(6))
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
            log.add("segments whose blocks do not add up to their total_size "
                    "(shown as recorded)")
        seg_type = seg.get("segment_type")
        if seg_type == "small":
            is_small = True
        elif seg_type == "large":
            is_small = False
        else:
            is_small = total <= SMALL_SEGMENT_MAX
        s_device.append(_small_int(seg.get("device", 0)))
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


def _small_int(v: Any) -> int:
    v = _sint(v, 0)
    return v if 0 <= v < (1 << 16) else 0


def _short(v: Any) -> str:
    if type(v) is str:
        return repr(v[:40])
    return f"<{type(v).__name__}>"


def _trace(raw_traces: list, interner: _Interner, log: WarningLog, progress: Progress,
           total_events: int) -> Trace:
    t_dev, t_act, t_addr, t_size, t_stream, t_time, t_stack, t_free, t_cc, t_um = (
        [] for _ in range(10))
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
            t_um.append(-1 if um is None or um == "" else string(um))
    return Trace(
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
    )


def _native_trace(native: dict, interner: _Interner) -> Trace:
    """Trace columns from the compiled parser, ids mapped through the interner.

    The parser hands out raw stack and string handles plus the order in which
    each first appeared (stack before compile_context before user_metadata,
    event by event); interning them in that order gives the ids :func:`_trace`
    gives.
    """
    cols = {name: np.frombuffer(col, dtype=_NATIVE_DTYPES[name])
            for name, col in native["columns"].items()}
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
        compile_context=np.take(string_map, cols["compile_context"]) if strings
        else cols["compile_context"],
        user_metadata=np.take(string_map, cols["user_metadata"]) if strings
        else cols["user_metadata"],
    )


_NATIVE_DTYPES = {
    "device": np.int32, "action": np.int8, "addr": np.int64, "size": np.int64,
    "stream": np.int64, "time_us": np.int64, "stack": np.int32, "device_free": np.int64,
    "compile_context": np.int32, "user_metadata": np.int32, "first_seen": np.int32,
}


def _annotations(raw: list, interner: _Interner, log: WarningLog) -> Annotations:
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
