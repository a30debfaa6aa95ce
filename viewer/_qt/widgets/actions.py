"""QAction construction in one line: text, slot, shortcut and tip (as tooltip and status
tip), the way the main window's menus and the live window's list them."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence


def make_action(
    parent: QObject, text: str, slot: Callable, shortcut=None, tip: str | None = None
) -> QAction:
    """A QAction of ``parent`` triggering ``slot``; ``shortcut``: a key sequence (text or
    a ``QKeySequence.StandardKey``); ``tip``: its tooltip and status-bar tip."""
    action = QAction(text, parent)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    if tip:
        action.setToolTip(tip)
        action.setStatusTip(tip)
    action.triggered.connect(slot)
    return action
