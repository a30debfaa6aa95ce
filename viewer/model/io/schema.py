"""Turn an unpickled (or JSON-decoded) snapshot into columns.

Accepts every schema generation torch has written:

* the current dict ``{segments, device_traces, allocator_settings,
  external_annotations}`` with per-block ``frames``/``requested_size``;
* torch 2.0-style blocks with ``history: [{addr, real_size, frames}]``;
* a bare list of segments (``torch.cuda.memory_snapshot()``);
* any optional key missing, JSON lists where pickles have tuples, several
  devices.

and what newer torch adds (``annotate`` events, ``forward_frames``, FX frame
fields, ``host_segments``/``host_traces``, ``trace_alloc_overflowed``).

Anything malformed is skipped with a counted warning naming what was skipped;
only a file that is not a snapshot at all raises :class:`SnapshotError`.
The conversion itself is :class:`.builder.SnapshotBuilder`'s (shared with the
live view); this module decides what the decoded object is.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import SnapshotError
from ..core.progress import Progress
from ..core.snapshot import Snapshot
from .builder import SnapshotBuilder


def to_snapshot(
    obj: Any,
    progress: Progress | None = None,
    source_format: str = "pickle",
    native: dict | None = None,
) -> Snapshot:
    """Build a :class:`Snapshot` from decoded builtin objects.

    ``native``: trace columns the compiled parser filled (then the trace
    lists in ``obj`` are empty placeholders); interned here in the same order
    as the Python path would, so both paths give identical ids.
    """
    progress = progress or Progress()
    builder = SnapshotBuilder()
    log = builder.log
    host_segments = host_traces = None
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
        host_segments = obj.get("host_segments")
        host_traces = obj.get("host_traces")
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

    segments, blocks, pools = builder.segments(raw_segments)
    if native is not None:
        trace = builder.native_trace(native)
        alloc_annotations = None  # the compiled parser hands files with any to Python
    else:
        trace, alloc_annotations = builder.trace_and_annotations(raw_traces, progress)
    ann = builder.annotations(annotations)
    host = builder.host(host_segments, host_traces)  # after the device trace: same ids both paths
    progress.update("columns", 1.0)
    snap = Snapshot(
        segments=segments,
        blocks=blocks,
        trace=trace,
        annotations=ann,
        frames=builder.frames_table(),
        stacks=builder.stacks_table(),
        pools=pools,
        allocator_settings=builder.settings(settings),
        source_format=source_format,
        warnings=log.messages(),
        host=host,
    )
    if alloc_annotations is not None:
        snap.alloc_annotations = alloc_annotations
    return snap


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"
