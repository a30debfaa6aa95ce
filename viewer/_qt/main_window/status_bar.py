"""The main window's status bar: a load's progress and Cancel (driven by ``loading``),
the open file's name and format, the allocator settings it was recorded with, and a
button listing what was skipped while reading it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QProgressBar, QPushButton, QToolButton

from ...model.core.units import format_count

# The permanent labels: at most this wide, elided (the whole text in the tooltip), so
# that a long file name never runs into the allocator settings beside it.
FILE_LABEL_WIDTH = 320
SETTINGS_LABEL_WIDTH = 360


def build_status_bar(window) -> None:
    """The status bar's permanent widgets, as attributes of ``window``: ``progress``,
    ``cancel_button`` (hidden until a load), ``file_label``, ``format_label``,
    ``settings_label`` and ``warnings_button``."""
    w = window
    w.progress = QProgressBar()
    w.progress.setRange(0, 1000)
    w.progress.setMaximumWidth(260)
    w.progress.setTextVisible(True)
    w.progress.setToolTip("Loading: reading bytes, parsing, building columns")
    w.cancel_button = QPushButton("Cancel")
    w.cancel_button.setToolTip("Stop loading (Esc)")
    w.cancel_button.clicked.connect(w.loading.cancel_clicked)
    w.file_label = QLabel()
    w.file_label.setToolTip("The open snapshot")
    w.format_label = QLabel()
    w.format_label.setToolTip("File format as detected from its content")
    w.settings_label = QLabel()
    w.warnings_button = QToolButton()
    w.warnings_button.setAutoRaise(True)
    w.warnings_button.clicked.connect(lambda: show_warnings(w))
    for widget in (
        w.progress,
        w.cancel_button,
        w.file_label,
        w.format_label,
        w.settings_label,
        w.warnings_button,
    ):
        w.statusBar().addPermanentWidget(widget)
    w.progress.hide()
    w.cancel_button.hide()


def update_status_labels(window) -> None:
    """The labels and the warnings button for the window's document (empty: none)."""
    w = window
    doc = w.vs.doc
    if doc is None:
        for label in (w.file_label, w.format_label, w.settings_label):
            label.setText("")
        w.warnings_button.hide()
        return
    snap = doc.snap
    set_elided(w.file_label, doc.name, FILE_LABEL_WIDTH, snap.path or doc.name)
    w.format_label.setText(snap.source_format)
    conf = str(snap.allocator_settings.get("PYTORCH_CUDA_ALLOC_CONF") or "").strip()
    text = f"PYTORCH_CUDA_ALLOC_CONF={conf}" if conf else "default allocator settings"
    detail = "\n".join(
        f"{k}: {v}" for k, v in snap.allocator_settings.items() if k != "roundup_power2_divisions"
    )
    set_elided(
        w.settings_label,
        text,
        SETTINGS_LABEL_WIDTH,
        f"{text}\n\nAllocator settings recorded in the snapshot\n{detail}",
    )
    n = len(snap.warnings)
    w.warnings_button.setVisible(n > 0)
    w.warnings_button.setText(f"⚠ {format_count(n)} warning{'s' if n != 1 else ''}")
    w.warnings_button.setToolTip(
        "Skipped while reading (click for the list):\n" + "\n".join(snap.warnings[:30])
    )


def show_warnings(window) -> None:
    """The warnings button: every kind of entry skipped while reading the file."""
    doc = window.vs.doc
    if doc is None:
        return
    box = QMessageBox(
        QMessageBox.Icon.Warning,
        "Snapshot warnings",
        f"{len(doc.snap.warnings)} kinds of entries were skipped while reading {doc.name}.",
        QMessageBox.StandardButton.Ok,
        window,
    )
    box.setDetailedText("\n".join(doc.snap.warnings))
    box.open()


def set_elided(label: QLabel, text: str, width: int, tip: str | None = None) -> None:
    """``text`` in ``label``, cut in the middle (the end of a file name stays) to at most
    ``width`` pixels; the whole of it in the tooltip (``tip`` when given)."""
    label.setMaximumWidth(width)
    shown = label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, width - 4)
    label.setText(shown)
    label.setToolTip(tip if tip is not None else text)
    label.setAccessibleName(text)
