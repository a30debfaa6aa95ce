"""One way to run model work off the GUI thread: :class:`Job`, a QThread with progress,
Cancel and one-line errors.

The work is a function of the job (``work(job)``) that reports through
:meth:`Job.progress` (a model :class:`Progress` whose cancel event is the job's) and
returns a result; the job emits ``done(result)``, ``failed(one line)`` or
``cancelled()``.  The thread object lives in the GUI thread, so slots of GUI objects get
its signals queued.  Loading a snapshot (:class:`~.loader.LoadThread`), a directory of
ranks, a what-if run and a diagnosis are all jobs (the last two run by a
:class:`~.job_panel.JobPanel`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from PySide6.QtCore import QThread, Signal

from ...model.core.errors import LoadCancelled, SnapshotError
from ...model.core.progress import Progress


class Job(QThread):
    """``Job(work)``: run ``work(job)`` on a worker thread (subclasses override :meth:`work`)."""

    progressed = Signal(str, float)  # stage, fraction 0..1
    done = Signal(object)  # the result
    failed = Signal(str)  # one line for the user
    cancelled = Signal()
    memory_error = "not enough memory for it"

    def __init__(self, work: Callable[["Job"], Any] | None = None, parent=None) -> None:
        super().__init__(parent)
        self._work = work
        self.cancel_event = threading.Event()
        self.result: Any = None
        self.error: str | None = None

    def cancel(self) -> None:
        """Ask the work to stop at its next checkpoint (it raises ``LoadCancelled``)."""
        self.cancel_event.set()

    def report(self, stage: str, fraction: float) -> None:
        """(any thread) progress of the work."""
        self.progressed.emit(stage, float(fraction))

    def progress(self) -> Progress:
        """A model progress callback reporting here and cancelled by :meth:`cancel`."""
        return Progress(self.report, self.cancel_event)

    def work(self) -> Any:  # worker thread
        return self._work(self)

    def after_done(self, result: Any) -> None:  # worker thread, after ``done``
        """Work that may follow the result (a cache write), off the GUI thread."""

    def run(self) -> None:  # worker thread
        try:
            result = self.work()
            if self.cancel_event.is_set():
                raise LoadCancelled()
        except LoadCancelled:
            # No gc.collect() here: a full collection on this worker thread may destroy Qt
            # objects of the GUI (garbage of closed windows) and deadlock against the GUI
            # thread (seen: ~QObject here waiting for the GIL, ~QMenu there for Qt's lock).
            # The owners collect on the GUI thread (the main window after a cancelled load).
            self.cancelled.emit()
            return
        except SnapshotError as exc:
            error = str(exc)
        except MemoryError:
            error = self.memory_error
        except OSError as exc:
            error = exc.strerror or str(exc)
        except Exception as exc:  # a bug; still one line for the user, never a traceback
            error = f"unexpected error: {type(exc).__name__}: {' '.join(str(exc).split())}"
        else:
            self.result = result
            self.done.emit(result)
            self.after_done(result)
            return
        self.error = error
        self.failed.emit(error)
