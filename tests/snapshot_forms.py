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

from vramscope.viewer.model.safe_pickle import safe_loads


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
    return [(frames.strings[frames.filename[f]], int(frames.line[f]),
             frames.strings[frames.name[f]]) for f in snap.stacks.frame_ids(int(stack_id))]


def assert_same_snapshot(a, b, *, stacks: bool = True, trace: bool = True) -> None:
    """Column-by-column equality, resolving interned stacks to frames."""
    for table in ("segments", "blocks") + (("trace",) if trace else ()):
        ta, tb = getattr(a, table), getattr(b, table)
        for name in ta.__dataclass_fields__:
            if name == "stack":
                continue
            va, vb = getattr(ta, name), getattr(tb, name)
            if table == "segments" and name == "pool":
                va = np.array([a.pools[i] for i in va]).reshape(-1, 2)
                vb = np.array([b.pools[i] for i in vb]).reshape(-1, 2)
            assert np.array_equal(va, vb), f"{table}.{name}"
    if stacks:
        for table in ("blocks",) + (("trace",) if trace else ()):
            sa, sb = getattr(a, table).stack, getattr(b, table).stack
            for i in np.unique(np.concatenate([np.flatnonzero(sa >= 0)[:200],
                                               np.flatnonzero(sa >= 0)[-200:]])):
                assert resolved_stack(a, sa[i]) == resolved_stack(b, sb[i]), f"{table}[{i}]"
