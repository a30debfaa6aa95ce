"""Panels stacked top to bottom in one call: :func:`column` (the margins, spacing and
stretch a QVBoxLayout otherwise takes a line each to set)."""

from __future__ import annotations

from PySide6.QtWidgets import QLayout, QVBoxLayout, QWidget


def column(
    parent: QWidget,
    *items: QWidget | QLayout | tuple[QWidget, int],
    margins: tuple[int, int, int, int] = (0, 0, 0, 0),
    spacing: int = 0,
) -> QVBoxLayout:
    """A vertical layout on ``parent`` holding ``items`` top to bottom: a widget, a
    layout, or ``(widget, stretch)``."""
    lay = QVBoxLayout(parent)
    lay.setContentsMargins(*margins)
    lay.setSpacing(spacing)
    for item in items:
        if isinstance(item, tuple):
            lay.addWidget(item[0], item[1])
        elif isinstance(item, QLayout):
            lay.addLayout(item)
        else:
            lay.addWidget(item)
    return lay
