"""Help > Keyboard shortcuts, Help > How to record a snapshot and Help > About.

The shortcuts dialog is generated from the window's actions (its menus walked, then the
actions outside any menu), so it can never list a key the window does not bind or miss
one it does.  The recording dialog shows the two ways to get a snapshot, each with a
Copy button.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...early.install_hint import pip_install

# ``python -m vramscope.capture`` (capture/runner.py): a snapshot when the script ends,
# at every OOM and on SIGUSR1.
CAPTURE_COMMAND = "python -m vramscope.capture your_script.py"
TORCH_CALLS = (
    "import torch\n"
    "\n"
    "# before the code to look at: keep the last 100,000 allocations and frees\n"
    "torch.cuda.memory._record_memory_history(max_entries=100_000)\n"
    "\n"
    "...  # your training / inference code\n"
    "\n"
    "# after it (or in an `except torch.cuda.OutOfMemoryError:` block)\n"
    'torch.cuda.memory._dump_snapshot("snap.pickle")\n'
    "torch.cuda.memory._record_memory_history(enabled=None)  # stop recording\n"
)


def _clean(text: str) -> str:
    """A menu text as read: no mnemonic ampersand, no trailing ellipsis."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").rstrip()


def shortcut_rows(window) -> list[tuple[str, str, str]]:
    """(where, action, key sequence) of every action of ``window`` with a shortcut: the
    menus' actions in menu order ("View › Show only category"), then the window's own
    actions that are in no menu ("Window")."""
    rows: list[tuple[str, str, str]] = []
    seen: set[int] = set()

    def walk(menu, path: str) -> None:
        for a in menu.actions():
            sub = a.menu()
            if sub is not None:
                walk(sub, f"{path} \u203a {_clean(a.text())}")
                continue
            if a.isSeparator():
                continue
            seen.add(id(a))
            keys = [k for k in a.shortcuts() if not k.isEmpty()]
            if keys:
                rows.append(
                    (
                        path,
                        _clean(a.text()),
                        ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in keys),
                    )
                )

    for top in window.menuBar().actions():
        if top.menu() is not None:
            walk(top.menu(), _clean(top.text()))
    for a in window.actions():  # (Esc: cancel loading)
        if id(a) in seen or not isinstance(a, QAction):
            continue
        keys = [k for k in a.shortcuts() if not k.isEmpty()]
        if keys:
            rows.append(
                (
                    "Window",
                    _clean(a.text()),
                    ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in keys),
                )
            )
    return rows


def _wrapped_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    return label


def _close_buttons(dialog: QDialog) -> QDialogButtonBox:
    """A Close button that closes ``dialog`` (as Escape does)."""
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    return buttons


class ShortcutsDialog(QDialog):
    """Every shortcut of a window's actions in one table (see :func:`shortcut_rows`)."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.setWindowTitle("Keyboard shortcuts — vramscope")
        self.rows = shortcut_rows(window)
        self.table = QTableWidget(len(self.rows), 3)
        self.table.setHorizontalHeaderLabels(("Menu", "Action", "Shortcut"))
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for r, row in enumerate(self.rows):
            for c, text in enumerate(row):
                self.table.setItem(r, c, QTableWidgetItem(text))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        note = _wrapped_label(
            "In the timeline: ←/→ one event (Shift: 100), Home/End, wheel "
            "zooms. In the segment map: wheel zooms, drag pans."
        )
        buttons = _close_buttons(self)
        lay = QVBoxLayout(self)
        lay.addWidget(self.table, 1)
        lay.addWidget(note)
        lay.addWidget(buttons)
        self.resize(640, 620)


class _CopyBlock(QWidget):
    """Read-only text with a Copy button under a caption."""

    def __init__(self, caption: str, text: str, parent=None) -> None:
        super().__init__(parent)
        self.text = text
        label = _wrapped_label(caption)
        self.edit = QPlainTextEdit(text)
        self.edit.setReadOnly(True)
        font = QGuiApplication.font()
        font.setFamily("monospace")
        font.setStyleHint(font.StyleHint.Monospace)
        self.edit.setFont(font)
        lines = text.count("\n") + 1
        self.edit.setFixedHeight(self.edit.fontMetrics().lineSpacing() * (lines + 1) + 12)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy this to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        row = QHBoxLayout()
        row.addWidget(self.edit, 1)
        row.addWidget(self.copy_button, 0, Qt.AlignmentFlag.AlignTop)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(label)
        lay.addLayout(row)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text)


class RecordDialog(QDialog):
    """How to record a snapshot: the capture one-liner and the plain torch calls."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("How to record a snapshot — vramscope")
        intro = _wrapped_label(
            "A snapshot is a PyTorch CUDA memory snapshot: the allocator's "
            "segments and blocks, and the history of allocations and frees "
            "(the timeline) when recording was on."
        )
        self.capture = _CopyBlock(
            "<b>Without changing your script</b> (in its environment, from a clone of "
            f"vramscope: <tt>{pip_install('capture')}</tt>). Snapshots go to <tt>snapshots/</tt> "
            "when the script ends, at every CUDA out-of-memory error and on "
            "<tt>kill -USR1 PID</tt>:",
            CAPTURE_COMMAND,
        )
        self.torch = _CopyBlock("<b>Or with plain torch calls</b> in your script:", TORCH_CALLS)
        outro = _wrapped_label(
            "Then open the file here (Ctrl+O) or drop it on the window. "
            "A larger <tt>max_entries</tt> keeps more of the history."
        )
        buttons = _close_buttons(self)
        lay = QVBoxLayout(self)
        for w in (intro, self.capture, self.torch, outro):
            lay.addWidget(w)
        lay.addStretch(1)
        lay.addWidget(buttons)
        self.resize(720, 480)


def about_text() -> str:
    """Help > About: the version and those of the libraries it runs on."""
    import numpy
    import pyqtgraph
    import PySide6
    from PySide6.QtCore import qVersion

    from ... import __version__

    return (
        f"<h3>vramscope {__version__}</h3>"
        "<p>See why your GPU ran out of memory: free memory scattered in gaps too small "
        "for the request.</p>"
        f"<p>Qt {qVersion()}<br>PySide6 {PySide6.__version__}<br>pyqtgraph {pyqtgraph.__version__}"
        f"<br>numpy {numpy.__version__}<br>Python {sys.version.split()[0]}</p>"
    )
