"""The compiled snapshot parser, with the pure-Python path as its fallback.

``_native/snapparse.c`` walks the pickle opcodes under the same rules as
:mod:`.safe_pickle` and writes trace events straight into columns (no Python
object per event).  Whenever the input leaves the form it models exactly, it
answers "fallback" and the caller runs the pure-Python path from the start,
so results and error messages stay those of the reference path.  It is not
used when the extension is not built or ``VRAMSCOPE_PURE_PYTHON=1``.
"""

from __future__ import annotations

import gc
from typing import Any, Callable

from .._native import native_module
from ..core.errors import SnapshotError, UnsafeSnapshotError
from ..core.progress import Progress
from .safe_pickle import OUT_OF_BAND, REFUSED_MESSAGE, out_of_band_message

TRUNCATED_MESSAGE = "the file is truncated: the pickle data ends before its end marker"


class NativeResult:
    """What the compiled parser built: the snapshot object (its ``device_traces``
    hold empty placeholder lists) and the trace columns it filled instead."""

    def __init__(self, obj: Any, native: dict | None) -> None:
        self.obj = obj
        self.native = native


def available() -> bool:
    """Whether the compiled parser is built and not disabled."""
    return native_module("snapparse") is not None


def native_loads(
    source: bytes | memoryview | Callable[[memoryview], int],
    total: int = -1,
    progress: Progress | None = None,
    threads: int = 1,
    min_events: int = 65536,
    file_mapped: bool = False,
) -> NativeResult | None:
    """Parse with the compiled parser; None means "use the pure-Python path".

    ``source`` is the pickle bytes, or a file's ``readinto`` over ``total``
    bytes (an uncompressed file, streamed through a small buffer).  ``threads`` > 1
    lets a whole-input parse (bytes or a mapped file) split big device traces
    into regions parsed on that many threads (the same result; only traces of at
    least ``min_events`` events).  ``file_mapped``: ``source`` is an ``mmap`` of a
    file (its pages are then unmapped behind the parse).  Raises :class:`SnapshotError` for
    truncation and :class:`UnsafeSnapshotError` for executable objects, at the
    same byte and with the same words as :func:`.safe_pickle.safe_loads`.
    """
    mod = native_module("snapparse")
    if mod is None:
        return None
    progress = progress or Progress()
    was_enabled = gc.isenabled()
    gc.disable()  # few objects are built, all acyclic; collections would only cost time
    try:
        answer = mod.parse(
            source, total, lambda f: progress.update("parse", f), threads, min_events, file_mapped
        )
    finally:
        if was_enabled:
            gc.enable()
    return from_answer(answer, progress)


def from_answer(answer: tuple, progress: Progress | None = None) -> NativeResult | None:
    """Interpret ``snapparse.parse``'s answer (here or from
    :mod:`vramscope.viewer.startup.parse_ahead`)."""
    progress = progress or Progress()
    kind = answer[0]
    if kind == "ok":
        progress.update("parse", 1.0)
        return NativeResult(answer[1], answer[2])
    if kind == "truncated":
        raise SnapshotError(TRUNCATED_MESSAGE)
    if kind == "refused" and answer[1] in OUT_OF_BAND.values():
        raise SnapshotError(out_of_band_message(answer[1], answer[2]))
    if kind == "refused":
        raise UnsafeSnapshotError(f"{REFUSED_MESSAGE} ({answer[1]} at byte {answer[2]})")
    return None  # "fallback": the pure-Python parser decides
