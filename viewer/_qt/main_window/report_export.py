"""File > Export report…: one self-contained HTML file to attach to a bug report.

First it waits (never blocking: a timer polls, progress and Cancel in a dialog) for the
analyses the page shows to end - the file's load and what the memory is, built off the
GUI thread after the window opens: grabbed before, the page lacked its categories and
had a timeline and a segment map not yet laid out.  Then, on the GUI thread, what the
window shows for its device (the header's figures as drawn, the OOM banner, the split
at the cursor, the leaks, PNG images of the timeline and the segment map) and, for
every other device of the file, the same figures from the model
(:func:`gather`).  Off it (a :class:`~..widgets.jobs.Job`): each device's top
allocation sites, what its memory is, its remedies (the Diagnosis panel's when one is
open with its result, else computed), the page
(:func:`vramscope.viewer.model.reports.html_report.build_html`) and the file.  One
section per device, the device that ran out of memory first.  ``vramscope report``
runs the same export in a window never shown on a screen (``_qt/report_shot.py``).  The
folder last written to is remembered (settings).
"""

from __future__ import annotations

import datetime
import os

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QApplication, QProgressDialog

from ...model.analysis.figures import Selection, memory_stats
from ...model.core.progress import Progress, stage_words
from ...model.reports.html_report import (
    DeviceSection,
    ReportParts,
    build_html,
    complete_section,
    report_devices,
)
from ..widgets import settings as st
from ..widgets.jobs import Job
from ..widgets.png import png_bytes
from .header import figure_text, oom_where

KEY_DIR = "export/reportDir"
POLL_MS = 50  # how often the export looks whether the analyses it shows have ended


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


def pending(window) -> str:
    """What the page shows that is still being computed ("" when nothing is): the file's
    load, what the memory is (off the GUI thread after the window opens)."""
    if window.is_loading():
        return "Loading the file"
    # Settled, not the build's thread ended: its result reaches the GUI thread queued,
    # after the thread has finished, and only then is it drawn.
    wiring = getattr(window, "categories_wiring", None)
    if wiring is not None and not wiring.settled():
        return "Computing what the memory is"
    return ""


def shown_device(window) -> int | None:
    """The device whose figures the header counts (None: all devices, or none told
    apart)."""
    device = window.vs.selection.device
    return device if isinstance(device, int) and device >= 0 else None


def gather(window, devices: list[int] | None = None) -> ReportParts:
    """What the window shows, for the report (GUI thread: grabs the views): one section
    per device (``devices``: those only, else every device of the file), the OOM's
    first.  The window's own device gets the header as drawn and the views; the others
    their figures at the end of the recording, in the header's words."""
    from ... import __version__

    doc = window.vs.doc
    root = doc.root
    snap = root.snap
    header = window.header
    parts = ReportParts(
        title=doc.name,
        path=snap.path or "",
        generated=f"vramscope {__version__}, {datetime.datetime.now():%Y-%m-%d %H:%M}",
    )
    parts.facts = header.facts.text() if not header.facts.isHidden() else ""
    order = report_devices(snap)
    parts.all_devices = sorted(order)
    if devices is not None:
        order = [d for d in order if d in devices]
    shown = shown_device(window)
    # The window's figures are of one device, or of the only one there is.
    mine = (
        shown
        if shown is not None
        else (order[0] if len(parts.all_devices) == 1 and order else None)
    )
    cursor_dev = window.vs.cursor_device if window.vs.origin != "host" else None
    sections = [DeviceSection(device=d) for d in order] or [DeviceSection(device=None)]
    for sec in sections:
        d = sec.device
        if d is None or d == mine:
            sec.figures = [
                (header.titles[k].text(), header.values[k].text()) for k in header.values
            ]
            sec.scope = header.scope.text() if not header.scope.isHidden() else ""
            sec.verdict = header.oom_text() or None
        else:
            stats = memory_stats(snap, Selection(device=d))
            sec.figures = [(header.titles[k].text(), figure_text(stats, k)) for k in header.values]
            traced = root.timeline is not None and d in root.timeline.devices
            sec.scope = f"device {d} · as recorded" + (" (the end of its trace)" if traced else "")
            oom = next((r for r in reversed(root.ooms) if r.device == d), None)
            sec.verdict = (
                f"CUDA out of memory ({oom_where(oom)}): {oom.verdict}" if oom is not None else None
            )
        if d is not None and d == cursor_dev:
            _window_views(window, sec, shown)
    if cursor_dev is None and sections:
        _window_views(window, sections[0], shown)
    parts.devices = sections
    notes = [t for t in (header.integrity_text(), header.exactness_text()) if t]
    if snap.warnings:
        notes.append(f"{len(snap.warnings)} kinds of entries were skipped while reading the file")
    parts.notes = notes
    return parts


def _window_views(window, sec: DeviceSection, shown: int | None) -> None:
    """The split at the window's cursor and the images of its views, into ``sec``."""
    wiring = getattr(window, "categories_wiring", None)
    bd = wiring.cv.bd if wiring is not None else None
    k = window.vs.cursor_k
    if bd is not None and bd.device == sec.device and k is not None and 0 <= k < bd.n_events:
        sec.categories = bd.split_at(k)
        sec.categories_caption = f"device {bd.device}, after event {k:,}"
        sec.leaked_bytes = bd.leaked_bytes_at(k)
        sec.graph_held = bd.graph_held_at(k)
        sec.leaks = [lk.to_dict() for lk in bd.leaks]
    elif wiring is not None and wiring.panel.status.text().strip() and sec.device is not None:
        sec.categories_note = wiring.panel.status.text().strip()
    window.timeline.flush()  # its stacked allocations for this size, not after a debounce
    QApplication.processEvents()
    which = (
        "all devices"
        if shown is None and len(window.vs.device_choices()) > 2
        else f"device {sec.device}"
        if sec.device is not None
        else ""
    )
    if window.vs.cursor_device is not None:
        sec.images.append(
            (
                f"Timeline of device {window.vs.cursor_device} ({window.timeline.position.text()})",
                _png(window.timeline),
            )
        )
    sec.images.append(("Segment map" + (f" ({which})" if which else ""), _png(window.map)))


def _panel_advice(window):
    """The advice of a Diagnosis panel open over this document (None if none finished)."""
    for w in getattr(window, "aux_windows", []):
        advice = getattr(w, "advice", None)
        if advice is not None and getattr(w, "snap", None) is window.vs.doc.root.snap:
            return advice
    return None


def report_job(window, path: str, parts: ReportParts, remedies: bool = True) -> Job:
    """The job that completes ``parts`` (each device's top sites, split, remedies) and
    writes ``path``; ``done(path)``."""
    doc = window.vs.doc
    snap, timeline = doc.root.snap, doc.root.timeline
    advice = _panel_advice(window)
    wiring = getattr(window, "categories_wiring", None)
    bd = wiring.cv.bd if wiring is not None else None

    def work(job: Job) -> str:
        n = len(parts.devices)
        for i, sec in enumerate(parts.devices):

            def report(stage: str, f: float, i=i) -> None:
                job.report(f"{i}:{stage}", (i + min(max(f, 0.0), 1.0)) / n)

            progress = Progress(report, job.cancel_event)
            mine = advice if advice is not None and advice.device == sec.device else None
            complete_section(
                sec,
                snap,
                timeline,
                mine,
                bd if bd is not None and bd.device == sec.device else None,
                remedies,
                progress,
            )
        job.report("write", 1.0)
        text = build_html(parts)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    return Job(work, window)


class ReportExport(QObject):
    """One export in flight: the wait for the analyses the page shows, then the job;
    one progress dialog (Cancel stops either)."""

    finished = Signal(str, str)  # outcome ("done" | "failed" | "cancelled"), path or error

    def __init__(
        self, window, path: str, remedies: bool = True, devices: list[int] | None = None
    ) -> None:
        super().__init__(window)
        self.window = window
        self.path = path
        self.remedies = remedies
        self.devices = devices
        self.job: Job | None = None
        self._ended = False
        self.dialog = QProgressDialog("Gathering the report…", "Cancel", 0, 1000, window)
        self.dialog.setWindowTitle("Export report")
        self.dialog.setWindowModality(Qt.WindowModality.WindowModal)
        self.dialog.setMinimumDuration(300)
        self.dialog.setAutoClose(False)
        self.dialog.setAutoReset(False)
        self.dialog.canceled.connect(self.cancel)
        self.timer = QTimer(self, interval=POLL_MS)
        self.timer.timeout.connect(self._poll)

    def start(self) -> None:
        """Begin: at once when what the page shows is drawn, else once it is (polled;
        the GUI thread keeps running meanwhile)."""
        what = pending(self.window)
        if not what:
            self._begin()
            return
        self.dialog.setLabelText(f"{what}…")
        self.dialog.setRange(0, 0)  # (busy: the window's analysis has its own pace)
        self.dialog.show()
        self.timer.start()

    def _poll(self) -> None:
        if self._ended:
            self.timer.stop()
            return
        what = pending(self.window)
        if what:
            self.dialog.setLabelText(f"{what}…")
            return
        self.timer.stop()
        if self.window.vs.doc is None:
            self._end("failed", "the file is no longer open")
            return
        self.dialog.setRange(0, 1000)
        self._begin()

    def _begin(self) -> None:
        self.job = report_job(
            self.window, self.path, gather(self.window, self.devices), self.remedies
        )
        self.job.progressed.connect(self._progress)
        self.job.done.connect(lambda p: self._end("done", str(p)))
        self.job.failed.connect(lambda e: self._end("failed", e))
        self.job.cancelled.connect(lambda: self._end("cancelled", ""))
        self.job.start()

    def cancel(self) -> None:
        """Stop the export (the wait or the job); ``finished("cancelled")`` follows."""
        if self.job is not None:
            self.job.cancel()
        elif not self._ended:
            self.timer.stop()
            self._end("cancelled", "")

    def _progress(self, stage: str, fraction: float) -> None:
        idx, _, name = stage.partition(":") if ":" in stage else ("", "", stage)
        words = stage_words(name)
        text = f"{words[:1].upper()}{words[1:]}…"
        if idx.isdigit() and self.job is not None:
            n = len(self.devices) if self.devices is not None else None
            text = f"Device section {int(idx) + 1}" + (f" of {n}" if n else "") + f": {text}"
        self.dialog.setLabelText(text)
        self.dialog.setValue(int(1000 * min(max(fraction, 0.0), 1.0)))

    def _end(self, outcome: str, detail: str) -> None:
        if self._ended:
            return
        self._ended = True
        self.dialog.hide()
        self.dialog.deleteLater()
        if self.job is not None:
            self.job.wait()
        self.finished.emit(outcome, detail)
