"""Colours of the memory categories: one fixed scheme, readable on light and
dark backgrounds, for every view that colours by category (timeline, segment map,
allocations table, the split bar, the leaks view)."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor

from ...model.categories import CATEGORY_LABELS, CATEGORY_NAMES

CATEGORY_COLORS = {
    "parameter": "#1f77b4",
    "gradient": "#9467bd",
    "optimizer_state": "#2ca02c",
    "activation": "#ff7f0e",
    "temporary": "#bcbd22",
    "input": "#17becf",
    "unknown": "#9e9e9e",
}

# The Leaks view's bars and the category timeline's cursor (theirs, not the theme's:
# the category views keep working whatever the shared theme renames).
ACCENT = "#ff6f00"


def color(category: int | str) -> QColor:
    """The colour of a category (index into CATEGORY_NAMES, or its name)."""
    name = CATEGORY_NAMES[category] if isinstance(category, (int, np.integer)) else category
    return QColor(CATEGORY_COLORS[name])


def rgba_table(alpha: int = 255) -> np.ndarray:
    """(7, 4) uint8 RGBA per category index: for batched drawing (one colour lookup per
    allocation, ``table[category]``)."""
    out = np.zeros((len(CATEGORY_NAMES), 4), np.uint8)
    for i, name in enumerate(CATEGORY_NAMES):
        c = QColor(CATEGORY_COLORS[name])
        out[i] = (c.red(), c.green(), c.blue(), alpha)
    return out


def swatch_html(category: int) -> str:
    """A coloured square and the category's label, for tooltips and legends."""
    return (f'<span style="color:{CATEGORY_COLORS[CATEGORY_NAMES[category]]}">&#9632;</span>'
            f"&nbsp;{CATEGORY_LABELS[category]}")
