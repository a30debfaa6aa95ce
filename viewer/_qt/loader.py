"""Load snapshots off the GUI thread, with progress and cancel.

:class:`LoadThread` runs :func:`load_snapshot` (and the derived
:class:`Document`) in a QThread.  Its :class:`Progress` callback emits a Qt
signal; since the thread object lives in the GUI thread, receivers that are
methods of GUI objects get it queued.  :meth:`LoadThread.cancel` sets the
cancel event; the model raises ``LoadCancelled`` at its next checkpoint.
"""

from __future__ import annotations

import gc
import os
import threading

from PySide6.QtCore import QThread, Signal

from ..model.errors import LoadCancelled, SnapshotError
from ..model.load import load_snapshot
from ..model.progress import Progress
from ..model.document import Document

STAGE_TEXT = {"read": "Reading", "parse": "Parsing", "columns": "Building columns",
              "replay": "Replaying the trace"}
# The load's own stages fill the bar up to LOAD_SHARE; the replay the rest.
LOAD_SHARE = 0.85


class LoadThread(QThread):
    progressed = Signal(str, float)  # stage, overall fraction 0..1
    loaded = Signal(object)  # Document
    failed = Signal(str)  # one-line message
    cancelled = Signal()

    def __init__(self, path: str, parent=None) -> None:
        super().__init__(parent)
        self.path = os.fspath(path)
        self.cancel_event = threading.Event()
        self.result: Document | None = None
        self.error: str | None = None

    def cancel(self) -> None:
        self.cancel_event.set()

    def run(self) -> None:  # worker thread
        try:
            progress = Progress(self._emit_progress, self.cancel_event)
            snap = load_snapshot(self.path, progress)
            if self.cancel_event.is_set():
                raise LoadCancelled()
            # A fresh Progress: its throttle restarts for the replay stage.
            doc = Document.build(snap, Progress(self._emit_progress, self.cancel_event))
            del snap
            if self.cancel_event.is_set():
                raise LoadCancelled()
        except LoadCancelled:
            gc.collect()
            self.cancelled.emit()
            return
        except SnapshotError as exc:
            self.error = str(exc)
        except MemoryError:
            self.error = "not enough memory to load it"
        except OSError as exc:  # pragma: no cover - read_file maps most to SnapshotError
            self.error = exc.strerror or str(exc)
        except Exception as exc:  # a bug; still one line for the user
            self.error = f"unexpected error: {type(exc).__name__}: {' '.join(str(exc).split())}"
        if self.error is not None:
            gc.collect()
            self.failed.emit(self.error)
            return
        self.result = doc
        self.loaded.emit(doc)

    def _emit_progress(self, stage: str, fraction: float) -> None:
        f = float(fraction)
        f = LOAD_SHARE + (1 - LOAD_SHARE) * f if stage == "replay" else LOAD_SHARE * f
        self.progressed.emit(stage, f)
