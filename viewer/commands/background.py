"""Work left to a detached child once a command's answer is out (cache writes)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def can_fork() -> bool:
    """A child can be forked here to do the work after the answer (Linux)."""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


def detached(work: Callable[[], object]) -> None:
    """Run ``work()`` in a forked child with its own session and no terminal or pipes
    (the command returns, and a reader of its output sees the end, at once); where
    ``fork`` is missing, here.  ``work``'s errors are its own: a cache write that
    fails is no reason to fail the command."""
    sys.stdout.flush()
    sys.stderr.flush()
    if not can_fork():
        _quietly(work)
        return
    try:
        pid = os.fork()
    except OSError:
        _quietly(work)
        return
    if pid:
        return
    try:  # the child: never returns into the CLI
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        _quietly(work)
    finally:
        os._exit(0)


def _quietly(work: Callable[[], object]) -> None:
    try:
        work()
    except Exception:
        pass
