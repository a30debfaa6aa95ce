"""Progress reporting and cancellation for long model work.

The model stays free of Qt: a GUI worker passes a :class:`Progress` whose
callback forwards to a Qt signal, and sets :attr:`Progress.cancel_event` when
the user presses Cancel.  Work calls :meth:`Progress.update`, which raises
:class:`LoadCancelled` at the next checkpoint after a cancel.
"""

from __future__ import annotations

import threading
from typing import Callable

from .errors import LoadCancelled

ProgressCallback = Callable[[str, float], None]

# Each stage of a load owns a slice of the overall progress bar.
STAGES = {"read": (0.0, 0.25), "parse": (0.25, 0.80), "columns": (0.80, 1.0)}

#: What a long model step is doing, by the stage name it reports: the command line's
#: progress line, the MCP server's progress messages and the GUI's progress dialogs say
#: these words.
STAGE_WORDS = {
    "self_check": "self-check at the recorded settings",
    "judge": "judging how each allocation scales with the batch",
    "search": "searching the largest batch that fits",
    "allocator": "simulating allocator settings",
    "summary": "top allocation sites",
    "categories": "what the memory is",
    "write": "writing the report",
}


def stage_words(stage: str) -> str:
    """A stage's name in words (:data:`STAGE_WORDS`; an unknown stage as it is named)."""
    return STAGE_WORDS.get(stage, stage)


class Progress:
    """Forwards ``(stage, overall fraction)`` to a callback and checks for cancel."""

    def __init__(
        self,
        callback: ProgressCallback | None = None,
        cancel_event: threading.Event | None = None,
    ) -> None:
        self.callback = callback
        self.cancel_event = cancel_event or threading.Event()
        self._last = -1.0

    def update(self, stage: str, fraction: float) -> None:
        if self.cancel_event.is_set():
            raise LoadCancelled()
        if self.callback is None:
            return
        lo, hi = STAGES.get(stage, (0.0, 1.0))
        overall = lo + (hi - lo) * min(max(fraction, 0.0), 1.0)
        # Throttle: a progress bar has a few hundred distinguishable positions.
        if overall - self._last >= 0.002 or overall >= 1.0:
            self._last = overall
            self.callback(stage, overall)

    def cancel(self) -> None:
        self.cancel_event.set()
