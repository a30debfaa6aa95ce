"""Open a snapshot file: bytes -> safe decode -> columns.

The single entry point for every reader (CLI, GUI, tests).  Formats are
detected by content: gzip/xz/bz2 wrappers, then JSON (the form memory_viz
also accepts) or a pickle of protocol 0-5.  Pickles go through the compiled
parser when it is built (:mod:`.fast_pickle`; a big uncompressed file is mapped
and its traces parsed on all cores, a small one streamed) and through the
restricted pure-Python unpickler otherwise or whenever the compiled parser hands
a file back.  When the CLI started the parse on a thread before its imports
(:mod:`vramscope.viewer.startup.parse_ahead`, handed over through
:mod:`vramscope.viewer.early.parse_handover`: the model never imports the start-up code), that
answer is used instead of parsing again.  Errors are :class:`SnapshotError` with a one-line message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from ...early import parse_handover
from ..core.errors import LoadCancelled, SnapshotError
from ..core.progress import Progress, ProgressCallback
from ..core.snapshot import Snapshot
from . import cache
from .fast_pickle import NativeResult, from_answer, native_loads
from .fast_pickle import available as native_available
from .safe_pickle import safe_loads
from .schema import to_snapshot
from .source import compression_of, decompress, read_file

SIDECAR_MAX_BYTES = 16 << 20


class PendingParse(Protocol):
    """A parse of a file already under way (what :func:`parse_handover.claim` returns)."""

    def answer(self, update=None, path: str | os.PathLike | None = None) -> tuple | None:
        """Wait for it: ``snapparse.parse``'s answer, or None (parse in-process instead)."""

    def discard(self) -> None:
        """Stop it and drop what it built."""


def load_snapshot(
    path: str | os.PathLike,
    progress: Progress | ProgressCallback | None = None,
    use_cache: bool | None = None,
) -> Snapshot:
    """Load ``path`` into a columnar :class:`Snapshot`.

    ``progress`` is a :class:`Progress` (or a plain ``callback(stage, fraction)``);
    setting its cancel event makes the load raise :class:`LoadCancelled`.
    Big files are cached as columns (:mod:`.cache`); ``use_cache=False`` (or
    the environment variable ``VRAMSCOPE_NO_CACHE=1``) bypasses the cache.
    """
    progress = _as_progress(progress)
    # A parse the CLI started on a thread before its imports (parse_ahead); unused ones stop.
    ahead: PendingParse | None = parse_handover.claim(path)
    try:
        if use_cache is None:
            use_cache = os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0")
        key = cache.file_key(path) if use_cache else None
        snap = cache.load_cached(key) if key else None
        if snap is None:
            snap = _stream_native(path, progress, ahead) if native_available() else None
            if snap is None:
                raw = read_file(path, progress)
                snap = load_bytes(raw, progress)
                del raw
            if key:
                cache.store(key, snap)
    finally:
        if ahead is not None:
            ahead.discard()  # nothing left to do once it answered
    progress.update("columns", 1.0)
    parse_handover.stamp("columns_done")
    snap.path = os.fspath(path)
    snap.sidecar = read_sidecar(path)
    return snap


def load_bytes(raw: bytes, progress: Progress | ProgressCallback | None = None) -> Snapshot:
    """Decode snapshot bytes (any supported format) into a :class:`Snapshot`."""
    progress = _as_progress(progress)
    if not raw:
        raise SnapshotError("the file is empty")
    data, compression = decompress(raw, progress)
    if not data:
        raise SnapshotError("the file is empty after decompression")
    native = None
    if _looks_like_json(data):
        obj = _json_loads(data)
        fmt = "json"
    else:
        fast = native_loads(data, progress=progress)
        if fast is not None:
            obj, native = fast.obj, fast.native
        else:
            obj = safe_loads(data, progress)
        fmt = "pickle"
    del data, raw
    if compression:
        fmt = f"{fmt}+{compression}"
    return _to_snapshot(obj, progress, fmt, native)


def _to_snapshot(obj: Any, progress: Progress, fmt: str, native: dict | None) -> Snapshot:
    try:
        return to_snapshot(obj, progress, source_format=fmt, native=native)
    except (LoadCancelled, SnapshotError):
        raise
    except RecursionError:
        raise SnapshotError("not a memory snapshot: nesting is too deep") from None


def _stream_native(
    path: str | os.PathLike, progress: Progress, ahead: PendingParse | None = None
) -> Snapshot | None:
    """An uncompressed pickle streamed through the compiled parser (a 1 MiB
    buffer, never the whole file in memory), or its answer from the child that
    ``ahead`` waits for; None: read it whole instead."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(64)
            if not head or compression_of(head[:8]) or _looks_like_json(head):
                return None
            f.seek(0)
            progress.update("read", 1.0)
            answer = None
            if ahead is not None:
                answer = ahead.answer(lambda fraction: progress.update("parse", fraction), path)
            if answer is not None:
                fast: NativeResult | None = from_answer(answer, progress)
            elif (
                size >= parse_handover.MIN_BYTES
                and (threads := parse_handover.parse_threads()) > 1
                and (mapped := parse_handover.map_file(f)) is not None
            ):
                # A big file: mapped whole, so its traces can be parsed on every core.
                try:
                    fast = native_loads(
                        mapped, -1, progress, threads, parse_handover.SECTION_MIN_EVENTS, True
                    )
                finally:
                    mapped.close()
            else:
                fast = native_loads(f.readinto, size, progress)
    except OSError:
        return None  # read_file() reports it in one line
    if fast is None:
        return None
    return _to_snapshot(fast.obj, progress, "pickle", fast.native)


def read_sidecar(path: str | os.PathLike) -> dict[str, Any] | None:
    """The capture module's JSON sidecar next to a snapshot, if present and sane."""
    p = Path(path)
    if p.suffix == ".json":
        return None
    name = p.name
    for suffix in (".xz", ".gz", ".bz2"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    stem = name[: -len(".pickle")] if name.endswith(".pickle") else Path(name).stem
    side = p.with_name(stem + ".json")
    try:
        if not side.is_file() or side.stat().st_size > SIDECAR_MAX_BYTES:
            return None
        obj = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _as_progress(progress: Progress | ProgressCallback | None) -> Progress:
    if progress is None:
        return Progress()
    if isinstance(progress, Progress):
        return progress
    return Progress(progress)


def _looks_like_json(data: bytes) -> bool:
    head = data[:64].lstrip(b" \t\r\n\xef\xbb\xbf")
    return head[:1] in (b"{", b"[")


def _json_loads(data: bytes) -> Any:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SnapshotError("not a memory snapshot: the JSON text is not UTF-8") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise SnapshotError("not a memory snapshot: the JSON nesting is too deep") from None
    except ValueError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SnapshotError(f"not a memory snapshot: invalid JSON ({msg})") from None
