"""File > Export report…: one self-contained HTML file to attach to a bug report.

On the GUI thread: what the window shows (the header's figures as drawn, the OOM
banner, the split at the cursor, the leaks) and PNG images of the timeline and the
segment map, grabbed from the widgets.  Off it (a :class:`~..widgets.jobs.Job`, progress
and Cancel in a progress dialog): the summary's top allocation sites (when the summary
has them), the remedies (the Diagnosis panel's, when one is open with its result, else
computed), the page (:func:`vramscope.viewer.model.reports.html_report.build_html`) and
the file.  The folder last written to is remembered (settings).
"""

from __future__ import annotations

import datetime
import os

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QProgressDialog

from ...model.core.errors import LoadCancelled
from ...model.reports.html_report import ReportParts, build_html
from ..widgets import settings as st
from ..widgets.jobs import Job
from ..widgets.png import png_bytes

KEY_DIR = "export/reportDir"
STAGES = {"summary": "Top allocation sites", "judge": "Judging what scales with the batch",
          "search": "Searching the largest batch that fits",
          "allocator": "Simulating allocator settings", "write": "Writing the report"}


def last_folder() -> str:
    """The folder a report was last written to ("" if none, or gone)."""
    d = str(st.settings().value(KEY_DIR, "") or "")
    return d if d and os.path.isdir(d) else ""


def remember_folder(path: str) -> None:
    s = st.settings()
    s.setValue(KEY_DIR, os.path.dirname(os.path.abspath(path)))
    s.sync()


def _png(widget) -> bytes:
    return png_bytes(widget.grab().toImage())


def gather(window) -> ReportParts:
    """What the window shows, for the report (GUI thread: grabs the views)."""
    from ... import __version__

    doc = window.doc
    header = window.header
    parts = ReportParts(title=doc.name, path=doc.snap.path or "",
                        generated=f"vramscope {__version__}, "
                                  f"{datetime.datetime.now():%Y-%m-%d %H:%M}")
    parts.figures = [(header.titles[k].text(), header.values[k].text()) for k in header.values]
    parts.scope = header.scope.text() if not header.scope.isHidden() else ""
    parts.facts = header.facts.text() if not header.facts.isHidden() else ""
    parts.verdict = header.oom_text() or None
    wiring = getattr(window, "categories_wiring", None)
    bd = wiring.cv.bd if wiring is not None else None
    k = window.cursor_k
    if bd is not None and k is not None and 0 <= k < bd.n_events:
        parts.categories = bd.split_at(k)
        parts.categories_caption = f"device {bd.device}, after event {k:,}"
        parts.leaked_bytes = bd.leaked_bytes_at(k)
        parts.leaks = [lk.to_dict() for lk in bd.leaks]
    notes = [t for t in (header.integrity_text(), header.exactness_text()) if t]
    if doc.snap.warnings:
        notes.append(f"{len(doc.snap.warnings)} kinds of entries were skipped while reading "
                     "the file")
    parts.notes = notes
    if window.cursor_device is not None:
        parts.images.append((f"Timeline ({window.timeline.position.text()})",
                             _png(window.timeline)))
    parts.images.append(("Segment map", _png(window.map)))
    return parts


def _panel_advice(window):
    """The advice of a Diagnosis panel open over this document (None if none finished)."""
    for w in getattr(window, "aux_windows", []):
        advice = getattr(w, "advice", None)
        if advice is not None and getattr(w, "snap", None) is window.doc.root.snap:
            return advice
    return None


def report_job(window, path: str, parts: ReportParts, remedies: bool = True) -> Job:
    """The job that completes ``parts`` (top sites, remedies) and writes ``path``;
    ``done(path)``."""
    doc = window.doc
    snap, timeline = doc.root.snap, doc.root.timeline
    advice = _panel_advice(window)
    device = window.cursor_device if window.vs.origin != "host" else None

    def work(job: Job) -> str:
        job.report("summary", 0.0)
        try:
            from ...model.reports.summary import summarize

            parts.top_sites = summarize(snap, timeline).get("top_sites")
        except (ValueError, IndexError, KeyError) as exc:  # (an inconsistent trace)
            parts.notes.append(f"top allocation sites unavailable: {exc}")
        if job.cancel_event.is_set():
            raise LoadCancelled()
        found = advice
        if found is None and remedies and timeline is not None and timeline.devices:
            from ...model.remedies.advise import advise
            from ...model.whatif import prepare

            try:
                found = advise(prepare(snap, device), progress=job.progress())
            except LoadCancelled:
                raise
            except (ValueError, IndexError, KeyError) as exc:
                parts.advice_note = f"The remedies could not be computed: {exc}"
        if found is not None:
            parts.advice = found.to_dict()
        elif not parts.advice_note:
            parts.advice_note = ("No remedies: the snapshot has no allocation history "
                                 "(record with torch.cuda.memory._record_memory_history())."
                                 if timeline is None or not timeline.devices
                                 else "Remedies not computed.")
        if job.cancel_event.is_set():
            raise LoadCancelled()
        job.report("write", 1.0)
        text = build_html(parts)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    return Job(work, window)


class ReportExport(QObject):
    """One export in flight: the job and its progress dialog (Cancel stops the job)."""

    finished = Signal(str, str)  # outcome ("done" | "failed" | "cancelled"), path or error

    def __init__(self, window, path: str, remedies: bool = True) -> None:
        super().__init__(window)
        self.window = window
        self.path = path
        self.dialog = QProgressDialog("Gathering the report…", "Cancel", 0, 1000, window)
        self.dialog.setWindowTitle("Export report")
        self.dialog.setWindowModality(Qt.WindowModality.WindowModal)
        self.dialog.setMinimumDuration(300)
        self.dialog.setAutoClose(False)
        self.dialog.setAutoReset(False)
        self.job = report_job(window, path, gather(window), remedies)
        self.job.progressed.connect(self._progress)
        self.job.done.connect(lambda p: self._end("done", str(p)))
        self.job.failed.connect(lambda e: self._end("failed", e))
        self.job.cancelled.connect(lambda: self._end("cancelled", ""))
        self.dialog.canceled.connect(self.job.cancel)

    def start(self) -> None:
        self.job.start()

    def _progress(self, stage: str, fraction: float) -> None:
        self.dialog.setLabelText(f"{STAGES.get(stage, stage)}…")
        self.dialog.setValue(int(1000 * min(max(fraction, 0.0), 1.0)))

    def _end(self, outcome: str, detail: str) -> None:
        self.dialog.hide()
        self.dialog.deleteLater()
        self.job.wait()
        self.finished.emit(outcome, detail)
