"""Cached output of ``vramscope summary`` for big files: a re-open in a blink.

The column cache (:mod:`vramscope.viewer.model.io.cache`) skips the parse, but a
re-open would still import numpy and replay the trace.  A summary is a pure
function of the file's content, the arguments and vramscope's code, so its
text is stored under a key of exactly those: the file's size, mtime and a
hash of its first and last MiB (as the column cache identifies files), the
arguments, the version and the modification times of the model's sources
(an edited checkout never serves a stale result).  This module imports
neither numpy nor the model, so a hit costs an interpreter start and a read.

It lives in the same cache directory (``VRAMSCOPE_CACHE_DIR``), under
``results/``, keeps at most :data:`MAX_ENTRIES` (least recently used go first)
and is bypassed with ``--no-cache``, ``VRAMSCOPE_NO_CACHE=1`` or
``VRAMSCOPE_NO_RESULT_CACHE=1``.
"""

from __future__ import annotations

import os
from typing import Any

# The model's content key, without the model package (numpy): a hit stays a read.
from ..early import file_identity

MAX_ENTRIES = 256
_FORMAT = 2  # bump when the stored text changes meaning (2: categories, iterations, leaks)


def _results_dir() -> str:
    """``results/`` in the user cache directory, beside the column cache."""
    return os.path.join(file_identity.cache_root(), "results")


def enabled(no_cache: bool) -> bool:
    """Off with ``--no-cache``, ``VRAMSCOPE_NO_CACHE=1`` or ``VRAMSCOPE_NO_RESULT_CACHE=1``
    (the last keeps the column cache: benchmarks measure a re-open without this one)."""
    env = os.environ.get
    return (
        not no_cache
        and env("VRAMSCOPE_NO_CACHE", "") in ("", "0")
        and env("VRAMSCOPE_NO_RESULT_CACHE", "") in ("", "0")
    )


def _code_stamp() -> str:
    """The newest mtime of the sources that shape a summary (changes on every install
    and every edit)."""
    here = os.path.dirname(os.path.abspath(__file__))
    viewer = os.path.dirname(here)
    newest = 0
    model = os.path.join(viewer, "model")
    for directory in (
        here,
        model,
        os.path.join(model, "_native"),
        os.path.join(model, "categories"),
    ):
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    if entry.name.endswith((".py", ".so", ".pyd")):
                        newest = max(newest, entry.stat().st_mtime_ns)
        except OSError:
            pass
    return str(newest)


def key(path: str, args: list[Any]) -> str | None:
    """Identity of (file content, arguments, code); None for small or unreadable files."""
    return file_identity.content_key(path, f"{_FORMAT}:{_code_stamp()}:{args!r}")


def get(k: str) -> str | None:
    """The stored output for key ``k``, or None."""
    p = os.path.join(_results_dir(), f"{k}.txt")
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
        os.utime(p)  # least recently *used* goes first
    except (OSError, UnicodeDecodeError):
        return None
    return text


def put(k: str, text: str) -> None:
    """Store ``text`` for key ``k`` (atomically); a cache that cannot be written is ignored."""
    from ..model.io.atomic import write_atomic

    directory = _results_dir()
    try:
        write_atomic(os.path.join(directory, f"{k}.txt"), text.encode("utf-8"))
        with os.scandir(directory) as it:
            entries = sorted((e.stat().st_mtime, e.path) for e in it if e.name.endswith(".txt"))
        for _, old in entries[:-MAX_ENTRIES]:
            os.unlink(old)
    except OSError:
        pass
