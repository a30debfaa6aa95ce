"""Re-encode real snapshots into every form torch (or a user) may have written.

Test helpers only: these build *trusted* bytes from the bundled snapshots so
the loader can be checked against each format and schema generation.
"""

from __future__ import annotations

import copy
import gzip
import json
import lzma
import pickle
from pathlib import Path

import numpy as np

from vramscope.viewer.model.io.safe_pickle import safe_loads


def raw_object(path: Path):
    """The snapshot as builtin objects (decoded by our own safe unpickler)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        data = lzma.decompress(data)
    return safe_loads(data)


def to_json_bytes(obj) -> bytes:
    return json.dumps(obj).encode()


def to_legacy(obj):
    """torch 2.0-style: blocks carry history[{addr, real_size, frames}], no
    frames/requested_size; trace events without time_us and context keys."""
    out = copy.deepcopy(obj)
    for seg in out["segments"]:
        for key in ("segment_pool_id", "is_expandable", "frames", "requested_size", "device"):
            seg.pop(key, None)
        for b in seg["blocks"]:
            frames = b.pop("frames", [])
            real = b.pop("requested_size", b["size"])
            if b["state"] != "inactive":
                b["history"] = [{"addr": b["address"], "real_size": real, "frames": frames}]
    for trace in out["device_traces"]:
        for e in trace:
            for key in ("time_us", "compile_context", "user_metadata"):
                e.pop(key, None)
    out.pop("allocator_settings", None)
    out.pop("external_annotations", None)
    return out


def on_device(obj, device: int):
    """The same snapshot as recorded on ``device`` (device_traces padded)."""
    out = copy.deepcopy(obj)
    for seg in out["segments"]:
        seg["device"] = device
    out["device_traces"] = [[] for _ in range(device)] + out["device_traces"]
    return out


def merge_devices(a, b):
    """Two snapshots' devices side by side, as a multi-GPU process records."""
    out = copy.deepcopy(a)
    out["segments"] = out["segments"] + copy.deepcopy(b["segments"])
    traces = [list(x) for x in out["device_traces"]]
    for i, t in enumerate(b["device_traces"]):
        while len(traces) <= i:
            traces.append([])
        traces[i] = traces[i] + copy.deepcopy(t)
    out["device_traces"] = traces
    return out


def encodings(obj):
    """(name, bytes) for pickle protocols 0-5, gzip, xz and JSON."""
    yield from ((f"protocol{p}", pickle.dumps(obj, protocol=p)) for p in (0, 1, 2, 3, 4, 5))
    p4 = pickle.dumps(obj, protocol=4)
    yield "gzip", gzip.compress(p4)
    yield "xz", lzma.compress(p4)
    yield "json", to_json_bytes(obj)
    yield "json+gzip", gzip.compress(to_json_bytes(obj))


def resolved_stack(snap, stack_id: int) -> list[tuple[str, int, str]]:
    frames = snap.frames
    return [
        (frames.strings[frames.filename[f]], int(frames.line[f]), frames.strings[frames.name[f]])
        for f in snap.stacks.frame_ids(int(stack_id))
    ]


def assert_same_snapshot(
    a, b, *, stacks: bool = True, trace: bool = True, ignore: tuple[str, ...] = ()
) -> None:
    """Column-by-column equality, resolving interned stacks to frames
    (``ignore``: ``table.column`` names left out)."""
    for table in ("segments", "blocks") + (("trace",) if trace else ()):
        ta, tb = getattr(a, table), getattr(b, table)
        for name in ta.__dataclass_fields__:
            if name == "stack" or f"{table}.{name}" in ignore:
                continue
            va, vb = getattr(ta, name), getattr(tb, name)
            if table == "segments" and name == "pool":
                va = np.array([a.pools[i] for i in va]).reshape(-1, 2)
                vb = np.array([b.pools[i] for i in vb]).reshape(-1, 2)
            assert np.array_equal(va, vb), f"{table}.{name}"
    if stacks:
        for table in ("blocks",) + (("trace",) if trace else ()):
            sa, sb = getattr(a, table).stack, getattr(b, table).stack
            for i in np.unique(
                np.concatenate([np.flatnonzero(sa >= 0)[:200], np.flatnonzero(sa >= 0)[-200:]])
            ):
                assert resolved_stack(a, sa[i]) == resolved_stack(b, sb[i]), f"{table}[{i}]"


# ---- what newer torch (2.12+) writes, with its real key names ----

FX_FRAME = {
    "fx_node_op": "call_function",
    "fx_node_name": "linear_1",
    "fx_node_target": "aten.mm.default",
    "fx_original_trace": '  File "/w/model.py", line 42, in forward\n    y = self.fc(x)\n',
}
FORWARD_FRAMES = [  # traceback.format_list entries, outermost first
    '  File "/w/train.py", line 10, in <module>\n    loss = model(x).sum()\n',
    '  File "/w/model.py", line 42, in forward\n    y = self.fc(x)\n',
]
ANNOTATION_TEXT = "saved for backward"
HOST_DEVICE_EVENTS = 5


def host_memory() -> tuple[list, list]:
    """(host_segments, host_traces) as the pinned host allocator writes them: segments in
    the device segments' form, one flat list of trace entries (one host allocator)."""
    frames = [{"filename": "/w/loader.py", "line": 7, "name": "pin"}]
    base, size = 0x7F0000000000, 2 << 20
    segments = [
        {
            "address": base,
            "total_size": size,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "allocated_size": size,
            "active_size": size,
            "requested_size": size,
            "is_expandable": False,
            "frames": frames,
            "blocks": [
                {
                    "address": base,
                    "size": size,
                    "requested_size": size,
                    "state": "active_allocated",
                    "frames": frames,
                }
            ],
        },
        {
            "address": base + size,
            "total_size": 4 << 20,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "allocated_size": 0,
            "active_size": 0,
            "requested_size": 0,
            "is_expandable": False,
            "frames": [],
            "blocks": [
                {
                    "address": base + size,
                    "size": 4 << 20,
                    "requested_size": 0,
                    "state": "inactive",
                    "frames": [],
                }
            ],
        },
    ]
    t = 1_700_000_000_000_000
    traces = [
        {
            "action": "segment_alloc",
            "addr": base,
            "size": size,
            "stream": 0,
            "time_us": t,
            "frames": frames,
            "compile_context": "N/A",
            "user_metadata": "",
        },
        {
            "action": "alloc",
            "addr": base,
            "size": size,
            "stream": 0,
            "time_us": t + 1,
            "frames": frames,
            "compile_context": "N/A",
            "user_metadata": "",
        },
        {
            "action": "segment_alloc",
            "addr": base + size,
            "size": 4 << 20,
            "stream": 0,
            "time_us": t + 2,
            "frames": frames,
            "compile_context": "N/A",
            "user_metadata": "",
        },
        {
            "action": "alloc",
            "addr": base + size,
            "size": 4 << 20,
            "stream": 0,
            "time_us": t + 3,
            "frames": frames,
            "compile_context": "N/A",
            "user_metadata": "",
        },
        {
            "action": "free_completed",
            "addr": base + size,
            "size": 4 << 20,
            "stream": 0,
            "time_us": t + 4,
            "frames": frames,
            "compile_context": "N/A",
            "user_metadata": "",
        },
    ]
    assert len(traces) == HOST_DEVICE_EVENTS
    return segments, traces


def with_newer_fields(obj, *, every: int = 7, host: bool = True, overflow: bool = True):
    """The snapshot as torch 2.12+ writes it: ``pool_id`` on every event, an ``annotate``
    event after every ``every``-th alloc (torch.cuda.memory._annotate_memory),
    ``forward_frames`` and FX frame fields on those allocs, ``user_metadata`` set,
    the trace ring's overflow flag, and pinned host memory.  Returns (object, facts):
    facts says what was added where, for the tests to check."""
    out = copy.deepcopy(obj)
    facts = {"annotated": [], "forward_rows": [], "fx_frames": 0}
    row = 0
    for device, trace in enumerate(out["device_traces"]):
        new_trace = []
        n_alloc = 0
        for e in trace:
            e["pool_id"] = (0, 0)
            new_trace.append(e)
            if e["action"] == "alloc":
                n_alloc += 1
                if n_alloc % every == 0:
                    e["forward_frames"] = list(FORWARD_FRAMES)
                    e["user_metadata"] = f"step {n_alloc}"
                    frames = e.get("frames") or []
                    if frames:  # FX-generated code frame: a new dict (frames are shared)
                        e["frames"] = [dict(frames[0], **FX_FRAME)] + list(frames[1:])
                        facts["fx_frames"] += 1
                    facts["forward_rows"].append(row)
                    new_trace.append(
                        {
                            "action": "annotate",
                            "addr": e["addr"],
                            "size": e["size"],
                            "stream": e.get("stream", 0),
                            "time_us": e.get("time_us", 0),
                            "frames": e.get("frames") or [],
                            "compile_context": "N/A",
                            "user_metadata": ANNOTATION_TEXT,
                            "pool_id": (0, 0),
                        }
                    )
                    facts["annotated"].append((device, e["addr"], row))
            row += 1
        out["device_traces"][device] = new_trace
    if overflow:
        out.setdefault("allocator_settings", {})
        out["allocator_settings"]["trace_alloc_overflowed"] = True
        out["allocator_settings"]["trace_alloc_max_entries"] = 100_000
    if host:
        out["host_segments"], out["host_traces"] = host_memory()
    return out, facts
