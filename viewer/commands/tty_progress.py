"""A one-line progress indicator for long commands, on a terminal only.

Commands write it to stderr, and only when stderr is a terminal: piped or
redirected output (scripts, CI logs, ``2> file``) gets nothing, so what a
program reads stays exactly the result.  The line is redrawn in place
(carriage return) at most every 0.1 s and erased when the work is done.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from ..model.core.progress import Progress

REDRAW_S = 0.1


class TerminalProgress:
    """``with TerminalProgress("vramscope whatif") as tp: tp.stage("loading")``.

    :meth:`stage` returns a :class:`Progress` for the model (or None when
    off), so ``load_snapshot(path, tp.stage("loading"))`` costs nothing when
    piped.
    """

    def __init__(self, prog: str, stream: TextIO | None = None) -> None:
        self.prog = prog
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream)
        self._shown = 0  # width of the line on screen
        self._last = 0.0

    def __enter__(self) -> "TerminalProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.clear()

    def stage(self, label: str, fraction: float | None = 0.0) -> Progress | None:
        """Show ``label`` now; the returned Progress moves its percentage."""
        if not self.enabled:
            return None
        self._draw(label, fraction, force=True)
        return Progress(lambda _stage, f: self._draw(label, f))

    def show(self, label: str, fraction: float | None = None, force: bool = False) -> None:
        """Redraw with a new label (at most every 0.1 s unless ``force``)."""
        if self.enabled:
            self._draw(label, fraction, force)

    def clear(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0

    def _draw(self, label: str, fraction: float | None, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < REDRAW_S:
            return
        self._last = now
        pct = "" if fraction is None else f" {min(max(fraction, 0.0), 1.0) * 100:3.0f}%"
        text = f"{self.prog}: {label}"
        width = _columns(self.stream) - 1 - len(pct)
        if len(text) > width:  # cut the label, keep the percentage
            text = text[: max(width - 3, 0)] + "..."
        text += pct
        pad = max(self._shown - len(text), 0)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._shown = len(text)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def _columns(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    return max(columns, 20) if columns > 0 else 80  # a pty without a size reports 0
