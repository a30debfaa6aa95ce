"""Colours of the memory categories as Qt colours (the scheme itself is the model's
CATEGORY_COLORS, which the HTML report uses too), readable on light and
dark backgrounds, for every view that colours by category (timeline, segment map,
allocations table, the split bar, the leaks view)."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor

from ...model.categories import CATEGORY_COLORS, CATEGORY_LABELS, CATEGORY_NAMES
from ...model.categories.leaks import LEAK_LABEL

# What a leaking line keeps (MemoryBreakdown.leaks): its own colour index past the
# categories, so that colour-by-category views show a leak as a leak, not as "unknown".
LEAK = len(CATEGORY_NAMES)
LEAK_COLOR = "#8c564b"

# The Leaks view's bars and the category timeline's cursor (theirs, not the theme's:
# the category views keep working whatever the shared theme renames).
ACCENT = "#ff6f00"


def color(category: int | str) -> QColor:
    """The colour of a category (index into CATEGORY_NAMES, or its name; :data:`LEAK`
    or "leak": what leaking lines keep)."""
    if category in (LEAK, LEAK_LABEL):
        return QColor(LEAK_COLOR)
    name = CATEGORY_NAMES[category] if isinstance(category, (int, np.integer)) else category
    return QColor(CATEGORY_COLORS[name])


def rgba_table(alpha: int = 255) -> np.ndarray:
    """(N + 1, 4) uint8 RGBA per colour index (the N categories, then :data:`LEAK`): for
    batched drawing (one colour lookup per allocation, ``table[category]``)."""
    out = np.zeros((len(CATEGORY_NAMES) + 1, 4), np.uint8)
    for i in range(len(CATEGORY_NAMES) + 1):
        c = color(i)
        out[i] = (c.red(), c.green(), c.blue(), alpha)
    return out


def swatch_html(category: int) -> str:
    """A coloured square and the category's label (:data:`LEAK`: "leak"), for tooltips
    and legends; one piece: a legend that wraps does so between entries."""
    label = LEAK_LABEL if category == LEAK else CATEGORY_LABELS[category]
    return (
        f'<span style="white-space:nowrap"><span style="color:{color(category).name()}">'
        f"&#9632;</span>&nbsp;{label}</span>"
    )
