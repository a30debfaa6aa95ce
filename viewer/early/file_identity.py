"""Where vramscope keeps its caches and how it names a file's content (stdlib only).

Shared by the column cache (:mod:`vramscope.viewer.model.io.cache`), the summary's
result cache and :mod:`vramscope.viewer.startup.parse_ahead`, which must decide
before numpy is even imported whether a file's columns are already cached: one
implementation, so they can never disagree about a key.  Stdlib only: those two
import it without the model package (:mod:`vramscope.viewer.early`).
"""

from __future__ import annotations

import hashlib
import os
import sys

COLUMN_CACHE_VERSION = 3  # 2: raw mapped columns (.cols) instead of .npz; 3: newer torch's fields
COLUMN_SUFFIX = ".cols"
# Files smaller than this parse faster than a cache lookup is worth.
MIN_FILE_BYTES = 1 << 20
_HEAD_TAIL = 1 << 20


def cache_root() -> str:
    """The user cache directory (``VRAMSCOPE_CACHE_DIR`` overrides)."""
    env = os.environ.get("VRAMSCOPE_CACHE_DIR")
    if env:
        return env
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA", os.path.join(home, "AppData", "Local"))
        return os.path.join(base, "vramscope", "Cache")
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "vramscope")
    return os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.join(home, ".cache")), "vramscope")


def content_key(path: str | os.PathLike, salt: str) -> str | None:
    """Identity of a file's content: ``salt``, size, mtime and a hash of its first and
    last MiB; None for small, non-regular or unreadable files."""
    try:
        st = os.stat(path)
        if st.st_size < MIN_FILE_BYTES or not os.path.isfile(path):
            return None
        h = hashlib.sha256(f"{salt}:{st.st_size}:{st.st_mtime_ns}:".encode())
        with open(path, "rb") as f:
            h.update(f.read(_HEAD_TAIL))
            f.seek(max(0, st.st_size - _HEAD_TAIL))
            h.update(f.read(_HEAD_TAIL))
    except OSError:
        return None
    return h.hexdigest()[:40]


def column_key(path: str | os.PathLike) -> str | None:
    """The column cache's key for ``path``: its content identity plus the cache version."""
    return content_key(path, f"v{COLUMN_CACHE_VERSION}")


def column_entry(key: str) -> str:
    """The column cache's entry file for ``key``."""
    return os.path.join(cache_root(), key + COLUMN_SUFFIX)
