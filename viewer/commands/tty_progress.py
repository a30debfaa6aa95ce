"""A one-line progress indicator on stderr, for commands that simulate many runs.

Only on a terminal: piped or captured output (scripts, tests, ``--json``
consumers) gets no carriage-return noise.
"""

from __future__ import annotations

import sys

from ..model.progress import Progress


def tty_progress(label: str, stream=None) -> Progress:
    """A :class:`Progress` that draws ``label: stage NN%`` on stderr when it is a TTY."""
    out = stream or sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        return Progress()

    def draw(stage: str, fraction: float) -> None:
        out.write(f"\r{label}: {stage} {fraction * 100:3.0f}%")
        if fraction >= 1.0:
            out.write("\r" + " " * (len(label) + len(stage) + 8) + "\r")
        out.flush()

    return Progress(draw)


def clear_line(stream=None) -> None:
    """Erase whatever :func:`tty_progress` left on the line."""
    out = stream or sys.stderr
    if getattr(out, "isatty", lambda: False)():
        out.write("\r\033[K")
        out.flush()
