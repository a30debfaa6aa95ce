"""Cached output of ``vramscope summary`` for big files: a re-open in a blink.

The column cache (:mod:`vramscope.viewer.model.cache`) skips the parse, but a
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

import hashlib
import os
import sys

MIN_FILE_BYTES = 1 << 20  # smaller files are summarised faster than this saves
MAX_ENTRIES = 256
_HEAD_TAIL = 1 << 20
_FORMAT = 1  # bump when the stored text changes meaning


def _results_dir() -> str:
    """``results/`` in the user cache directory, as the column cache chooses it
    (os.path, not pathlib: this module is on the fast path)."""
    env = os.environ.get("VRAMSCOPE_CACHE_DIR")
    home = os.path.expanduser("~")
    if env:
        root = env
    elif sys.platform == "win32":
        root = os.path.join(os.environ.get("LOCALAPPDATA", os.path.join(home, "AppData", "Local")),
                            "vramscope", "Cache")
    elif sys.platform == "darwin":
        root = os.path.join(home, "Library", "Caches", "vramscope")
    else:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.join(home, ".cache")),
                            "vramscope")
    return os.path.join(root, "results")


def enabled(no_cache: bool) -> bool:
    """Off with ``--no-cache``, ``VRAMSCOPE_NO_CACHE=1`` or ``VRAMSCOPE_NO_RESULT_CACHE=1``
    (the last keeps the column cache: benchmarks measure a re-open without this one)."""
    env = os.environ.get
    return not no_cache and env("VRAMSCOPE_NO_CACHE", "") in ("", "0") \
        and env("VRAMSCOPE_NO_RESULT_CACHE", "") in ("", "0")


def _code_stamp() -> str:
    """The newest mtime of the sources that shape a summary (changes on every install
    and every edit)."""
    here = os.path.dirname(os.path.abspath(__file__))
    viewer = os.path.dirname(here)
    newest = 0
    model = os.path.join(viewer, "model")
    for directory in (here, model, os.path.join(model, "_native")):
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    if entry.name.endswith((".py", ".so", ".pyd")):
                        newest = max(newest, entry.stat().st_mtime_ns)
        except OSError:
            pass
    return str(newest)


def key(path: str, args: list[str]) -> str | None:
    """Identity of (file content, arguments, code); None for small or unreadable files."""
    try:
        st = os.stat(path)
        if st.st_size < MIN_FILE_BYTES or not os.path.isfile(path):
            return None
        h = hashlib.sha256(f"{_FORMAT}:{_code_stamp()}:{st.st_size}:{st.st_mtime_ns}:"
                           f"{args!r}:".encode())
        with open(path, "rb") as f:
            h.update(f.read(_HEAD_TAIL))
            f.seek(max(0, st.st_size - _HEAD_TAIL))
            h.update(f.read(_HEAD_TAIL))
    except OSError:
        return None
    return h.hexdigest()[:40]


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
    import tempfile

    directory = _results_dir()
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".txt")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, os.path.join(directory, f"{k}.txt"))
        except BaseException:
            os.unlink(tmp)
            raise
        with os.scandir(directory) as it:
            entries = sorted((e.stat().st_mtime, e.path) for e in it if e.name.endswith(".txt"))
        for _, old in entries[:-MAX_ENTRIES]:
            os.unlink(old)
    except OSError:
        pass
