"""The "What would fix it?" button beside the main window's OOM banner.

Apart from :mod:`.panel` so that the window builds it without importing the panel and
the model's remedies (~0.1 s that every window start would otherwise pay before its
first paint): the panel is imported when the button (Tools > Diagnosis) opens it.
"""

from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QPushButton


def banner_button(diagnosis_action: QAction) -> QPushButton:
    """The "What would fix it?" button the main window puts beside its OOM banner
    (:meth:`~..main_window.header.SummaryHeader.add_beside_banner`): it triggers the
    window's Tools > Diagnosis action, which opens the panel."""
    button = QPushButton("What would fix it?")
    button.setObjectName("diagnoseButton")
    button.setToolTip(
        "Rank the changes that would make this run fit, by predicted peak "
        "memory (Tools > Diagnosis…, Ctrl+Shift+D)"
    )
    button.clicked.connect(diagnosis_action.trigger)
    return button
