"""Files that appear whole or not at all: the viewer's one way of writing a file that
something else may read while it is written (the column cache, the CLI's result
cache, a live session's saved snapshot).

The data goes to a temporary file beside the target (same file system, so the final
``os.replace`` is atomic) named ``.NAME.XXXX.tmp``: listings skip it (dot-file,
``.tmp``), and a reader of ``NAME`` sees the old file or the new one, never half of
one.  Capture writes its files with its own helper (``capture/files.py``): it runs in
the training process and imports nothing of the viewer.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomic(
    target: str | os.PathLike[str],
    data: bytes | Callable[[IO[bytes]], object],
    durable: bool = False,
) -> None:
    """Write ``data`` (bytes, or a function that writes to the binary file it is given)
    to ``target`` through a temporary file and a rename; the folder is created if
    missing.  ``durable``: flushed to the disk before the rename, so that after a power
    cut the file is whole or absent (a file the user asked to save; a cache can be
    rebuilt and skips the wait).  On any error the temporary file is removed and the
    error raised again."""
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                data(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
