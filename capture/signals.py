"""Dump on demand: ``kill -USR1 <pid>`` writes a snapshot and training goes on.

Python runs signal handlers in the main thread between bytecodes, so the
dump happens at a safe point of the user's program (it waits while the main
thread sits inside one long CUDA call).  The handler is installed while at
least one recorder wants it and the previous handler is restored after;
a previous Python handler is called after ours, so a framework that also
listens to SIGUSR1 (e.g. for SLURM requeueing) keeps working.

Signals exist only on POSIX for SIGUSR1, and only the main thread may
install handlers; elsewhere on-demand dumps are simply unavailable.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

from . import messages

DEFAULT_SIGNAL = "SIGUSR1"

# POSIX names that may be missing on this platform without being a mistake.
_POSIX_ONLY = {
    "SIGUSR1",
    "SIGUSR2",
    "SIGHUP",
    "SIGQUIT",
    "SIGPROF",
    "SIGWINCH",
    "SIGTTIN",
    "SIGTTOU",
}

_lock = threading.Lock()
# signal number -> [previous handler, number of holders]
_installed: dict[int, list[Any]] = {}


def resolve(sig: str | int | None) -> int | None:
    """Signal number for a name like ``"SIGUSR1"`` or ``"USR1"``, a number, or None.

    A name this platform lacks (SIGUSR1 on Windows) gives None: on-demand
    dumps are then just off.  A name no platform has is a ValueError.
    """
    if sig is None:
        return None
    if isinstance(sig, bool):
        raise TypeError("dump_signal must be a signal name, a number or None")
    if isinstance(sig, int):
        return int(sig)
    if not isinstance(sig, str):
        raise TypeError("dump_signal must be a signal name, a number or None")
    name = sig.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    value = getattr(signal, name, None)
    if isinstance(value, int):
        return int(value)
    if name in _POSIX_ONLY:
        return None
    raise ValueError(f"unknown signal {sig!r}")


def _handler(signum: int, frame: FrameType | None) -> None:
    try:
        _dispatch(signum)
    except Exception as exc:  # a handler's exception would surface in the user's code
        messages.warn(f"the on-demand snapshot failed: {type(exc).__name__}: {exc}")
    entry = _installed.get(signum)
    previous = entry[0] if entry else None
    if callable(previous) and previous is not _handler:
        previous(signum, frame)


_dispatch: Callable[[int], None] = lambda signum: None  # noqa: E731 - set by set_dispatch


def set_dispatch(dispatch: Callable[[int], None]) -> None:
    """What the handler calls with the signal number (the recorder module sets it)."""
    global _dispatch
    _dispatch = dispatch


def acquire(signum: int) -> bool:
    """Install the dump handler for ``signum`` (reference-counted); False if impossible."""
    with _lock:
        entry = _installed.get(signum)
        if entry is not None:
            entry[1] += 1
            return True
        if threading.current_thread() is not threading.main_thread():
            messages.info(
                f"on-demand dumps ({signal.Signals(signum).name}) are off: "
                "recording was started outside the main thread"
            )
            return False
        try:
            previous = signal.signal(signum, _handler)
        except (ValueError, OSError) as exc:
            messages.warn(f"cannot install the on-demand dump signal handler: {exc}")
            return False
        _installed[signum] = [previous, 1]
        return True


def release(signum: int) -> None:
    """Drop one hold on ``signum``; the last one restores the previous handler."""
    with _lock:
        entry = _installed.get(signum)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _installed[signum]
        try:
            # Someone who replaced our handler since keeps theirs.
            if signal.getsignal(signum) is _handler:
                signal.signal(signum, entry[0] if entry[0] is not None else signal.SIG_DFL)
        except (ValueError, OSError) as exc:
            messages.warn(f"cannot restore the previous signal handler: {exc}")
