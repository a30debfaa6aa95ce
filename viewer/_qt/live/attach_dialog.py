"""File ▸ Attach…: the processes that can be watched live.

Lists every agent in the registry (attachable) and every GPU process NVML
sees (marked "no agent", with the one-line opt-in to copy).  Refresh (F5)
reads both again; double-click or Attach opens the live window.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from ... import live_protocol as proto
from ...model.core.units import format_bytes
from ...model.live.targets import Target, list_targets, opt_in_hint

COLUMNS = ("PID", "Status", "Rank", "GPU", "GPU memory", "Command")


class AttachDialog(QDialog):
    attachRequested = Signal(str)  # a PID or endpoint

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Attach to a running process")
        self.resize(820, 420)
        self.targets: list[Target] = []
        self.tree = QTreeWidget()
        self.tree.setRootIsDecorated(False)
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setAlternatingRowColors(True)
        self.tree.setToolTip(
            "Processes with a vramscope agent can be attached; GPU processes "
            "without one are listed so you know what runs"
        )
        self.tree.itemSelectionChanged.connect(self._on_selection)
        self.tree.itemDoubleClicked.connect(lambda *_: self.attach())
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.nvml_label = QLabel()
        self.nvml_label.setEnabled(False)
        self.endpoint = QLineEdit()
        self.endpoint.setPlaceholderText(
            "or an endpoint: unix:/path/agent-PID.sock, tcp:127.0.0.1:PORT, ssh://user@host/PID"
        )
        self.endpoint.setToolTip(
            "Attach to an agent by its endpoint (e.g. one printed by "
            "the training process), or to a process on another machine "
            "through your ssh: ssh://user@host/PID (`vramscope attach "
            "ssh://user@host --list` lists them)"
        )
        self.endpoint.textChanged.connect(lambda _t: self._on_selection())
        refresh = QPushButton("Refresh")
        refresh.setToolTip("List the processes again (F5)")
        refresh.clicked.connect(self.refresh)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Refresh), self, activated=self.refresh)
        self.copy_button = QPushButton("Copy opt-in")
        self.copy_button.setToolTip("Copy the one line that makes a script attachable")
        self.copy_button.clicked.connect(self.copy_opt_in)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.attach_button = self.buttons.addButton(
            "Attach", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.attach_button.setToolTip("Watch the selected process live (Enter)")
        self.attach_button.clicked.connect(self.attach)
        self.buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.endpoint, 1)
        row.addWidget(refresh)
        row.addWidget(self.copy_button)
        lay = QVBoxLayout(self)
        lay.addWidget(self.tree, 1)
        lay.addWidget(self.hint)
        lay.addWidget(self.nvml_label)
        lay.addLayout(row)
        lay.addWidget(self.buttons)
        self.refresh()

    def refresh(self) -> None:
        self.targets, info = list_targets()
        self.tree.clear()
        for t in self.targets:
            item = QTreeWidgetItem(
                [
                    str(t.pid),
                    "attachable" if t.attachable else "no agent",
                    "" if t.rank is None else str(t.rank),
                    "" if t.device is None else str(t.device),
                    "" if t.gpu_bytes is None else format_bytes(t.gpu_bytes),
                    t.command,
                ]
            )
            item.setToolTip(
                1, "A vramscope agent answers in this process" if t.attachable else opt_in_hint()
            )
            if not t.attachable:
                for c in range(len(COLUMNS)):
                    item.setForeground(c, self.palette().placeholderText())
            self.tree.addTopLevelItem(item)
        for c in range(len(COLUMNS) - 1):
            self.tree.resizeColumnToContents(c)
        self.nvml_label.setText(info.error or f"NVML: {len(info.devices)} GPU(s)")
        first = next((i for i, t in enumerate(self.targets) if t.attachable), None)
        if first is not None:
            self.tree.setCurrentItem(self.tree.topLevelItem(first))
        if not self.targets:
            self.hint.setText(
                "No attachable process. Make a script attachable with: " + proto.OPT_IN
            )
        self._on_selection()

    def selected(self) -> Target | None:
        items = self.tree.selectedItems()
        if not items:
            return None
        i = self.tree.indexOfTopLevelItem(items[0])
        return self.targets[i] if 0 <= i < len(self.targets) else None

    def _on_selection(self) -> None:
        t = self.selected()
        typed = self.endpoint.text().strip()
        self.attach_button.setEnabled(bool(typed) or (t is not None and t.attachable))
        if t is not None and not t.attachable:
            self.hint.setText(f"Process {t.pid} has {opt_in_hint()}")
        elif t is not None:
            self.hint.setText(f"{t.label()}  —  {t.endpoint}")

    def copy_opt_in(self) -> None:
        QGuiApplication.clipboard().setText(proto.OPT_IN.split("  ")[0])

    def attach(self) -> None:
        typed = self.endpoint.text().strip()
        t = self.selected()
        if typed:
            target = typed
        elif t is not None and t.attachable:
            target = str(t.pid)
        else:
            return
        self.attachRequested.emit(target)
        self.accept()
