"""The split at the cursor: one stacked bar of what the live memory is (parameters,
gradients, optimizer state, activations, temporaries, inputs, unknown), with bytes
and percentages; hover a part for its figure and how much of it is a guess."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from ...model.categories.reasons import CATEGORY_LABELS, CATEGORY_NAMES
from ...model.categories.wording import format_split
from ...model.core.units import format_bytes
from ..widgets import theme
from ..widgets.category_colors import color


class CategorySplitBar(QWidget):
    """Draws ``split`` (category name -> bytes) as one bar; set with :meth:`set_split`."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.split: dict[str, int] = {}
        self.guessed = 0
        self.caption = ""
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(18)

    def sizeHint(self) -> QSize:
        return QSize(400, 20)

    def set_split(self, split: dict[str, int] | None, guessed: int = 0, caption: str = "") -> None:
        """Show ``split`` (None: nothing); ``guessed``: bytes of it whose category is a
        guess; ``caption``: the moment (e.g. 'after event 1234')."""
        self.split = dict(split or {})
        self.guessed = guessed
        self.caption = caption
        total = sum(self.split.values())
        text = format_split(self.split) if total else "nothing live"
        self.setToolTip(
            f"{caption + ': ' if caption else ''}{text}"
            + (
                f"\n{format_bytes(guessed)} of it placed by a guess (see each allocation's reason)"
                if guessed
                else ""
            )
        )
        self.update()

    def parts(self) -> list[tuple[str, float, float]]:
        """(category, x0, x1) of each drawn part in widget pixels."""
        total = sum(self.split.values())
        out = []
        if not total:
            return out
        x = 0.0
        w = float(self.width())
        for name in CATEGORY_NAMES:
            b = self.split.get(name, 0)
            if b <= 0:
                continue
            dx = w * b / total
            out.append((name, x, x + dx))
            x += dx
        return out

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), theme.row_background())
        h = float(self.height())
        for name, x0, x1 in self.parts():
            p.fillRect(QRectF(x0, 0, x1 - x0, h), color(name))
            label = CATEGORY_LABELS[CATEGORY_NAMES.index(name)]
            if x1 - x0 > p.fontMetrics().horizontalAdvance(label) + 6:
                p.setPen(Qt.GlobalColor.white)
                p.drawText(
                    QRectF(x0 + 3, 0, x1 - x0 - 6, h),
                    Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                    label,
                )
        p.end()

    def mouseMoveEvent(self, event) -> None:
        x = event.position().x()
        total = sum(self.split.values())
        for name, x0, x1 in self.parts():
            if x0 <= x < x1:
                b = self.split[name]
                QToolTip.showText(
                    event.globalPosition().toPoint(),
                    f"{CATEGORY_LABELS[CATEGORY_NAMES.index(name)]}: "
                    f"{format_bytes(b)} ({b / total:.1%})",
                    self,
                )
                return
        super().mouseMoveEvent(event)
