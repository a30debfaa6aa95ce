"""Messages from the capture side: one line each on stderr, prefixed ``vramscope:``.

Capture runs inside somebody else's training process, so its problems are
reported, never raised: ``warnings.warn`` would turn into an exception under
``python -W error`` or pytest's ``filterwarnings = error``, which is exactly
the "exception thrown into the user's program" the capture side must avoid.
Plain stderr lines cannot do that.
"""

from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_once: set[str] = set()


def _emit(line: str) -> None:
    stream = sys.stderr
    if stream is None:  # pythonw, or a daemon that closed its stderr
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):  # closed or broken stream: nothing better to do
        pass


def info(message: str) -> None:
    """Tell the user what capture did (a file written, recording started)."""
    _emit(f"vramscope: {message}")


def warn(message: str) -> None:
    """Report a capture problem; the user's program carries on."""
    _emit(f"vramscope: warning: {message}")


def warn_once(key: str, message: str) -> bool:
    """Like :func:`warn`, but only the first time ``key`` is seen in this process.

    Returns whether the warning was printed.
    """
    with _lock:
        if key in _once:
            return False
        _once.add(key)
    warn(message)
    return True


def info_once(key: str, message: str) -> bool:
    """Like :func:`info`, but only the first time ``key`` is seen in this process."""
    with _lock:
        if key in _once:
            return False
        _once.add(key)
    info(message)
    return True


def _reset_once() -> None:
    """Forget which one-time warnings were printed (for tests)."""
    with _lock:
        _once.clear()
