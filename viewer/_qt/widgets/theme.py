"""Colours: block states on a fixed scheme, chrome from the system palette."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from ...model.core.snapshot import BlockState
from ...model.view import map_layout as _map_layout
from ...model.view.view_state import HIGHLIGHT_SEARCH

# Drawing categories of the segment map (a block state, or the waste tail).
CAT_ALLOCATED = int(BlockState.ALLOCATED)
CAT_PENDING = int(BlockState.PENDING_FREE)
CAT_FREE = int(BlockState.FREE)
CAT_UNKNOWN = int(BlockState.UNKNOWN)
CAT_WASTE = _map_layout.CAT_WASTE  # (one definition: the draw list is the model's)

STATE_COLORS = {
    CAT_ALLOCATED: "#2f6db5",
    CAT_WASTE: "#9cc2ee",
    CAT_PENDING: "#f08c00",
    CAT_FREE: "#ff8a80",
    CAT_UNKNOWN: "#9e9e9e",
}
CAT_LABELS = {
    CAT_ALLOCATED: "allocated",
    CAT_WASTE: "rounding waste",
    CAT_PENDING: "pending free",
    CAT_FREE: "free gap",
    CAT_UNKNOWN: "unknown",
}
# Draw order: the waste tail sits on top of its allocated block.
DRAW_ORDER = (CAT_FREE, CAT_UNKNOWN, CAT_PENDING, CAT_ALLOCATED, CAT_WASTE)

OOM_RED = "#c62828"
# Search matches and the selected call-tree node: a colour no block state, curve or
# marker uses (orange would read as "pending free"), filled, not outlined.
SEARCH = "#d500f9"
SEARCH_DARK = "#ea80fc"
SEARCH_LABEL = HIGHLIGHT_SEARCH  # the legends' name of a search's highlight
LEGEND_CHARS = 36  # longer highlight names are cut in the legends


def palette() -> QPalette:
    app = QApplication.instance()
    return app.palette() if app is not None else QPalette()


def is_dark() -> bool:
    return palette().color(QPalette.ColorRole.Window).lightness() < 128


def background() -> QColor:
    return palette().color(QPalette.ColorRole.Base)


def foreground() -> QColor:
    return palette().color(QPalette.ColorRole.Text)


def muted() -> QColor:
    c = palette().color(QPalette.ColorRole.PlaceholderText)
    return c if c.isValid() else palette().color(QPalette.ColorRole.Mid)


def row_background() -> QColor:
    base = background()
    return base.lighter(135) if is_dark() else base.darker(108)


def gap_outline() -> QColor:
    return QColor("#ff5252") if is_dark() else QColor(OOM_RED)


def color(cat: int) -> QColor:
    return QColor(STATE_COLORS[cat])


def swatch_html(cat: int) -> str:
    return f'<span style="color:{STATE_COLORS[cat]}">&#9632;</span>&nbsp;{CAT_LABELS[cat]}'


def search_color() -> QColor:
    """The one colour of highlighted (search / call-tree) blocks and allocations."""
    return QColor(SEARCH_DARK if is_dark() else SEARCH)


def search_swatch_html(label: str | None = None) -> str:
    """The legends' entry of the highlight, named ``label`` (what it is: a search's
    matches, a category, what a remedy acts on; see ``ViewState.highlight_label``)."""
    text = label or SEARCH_LABEL
    if len(text) > LEGEND_CHARS:  # (a remedy's title: the legends' rows have little room)
        text = text[: LEGEND_CHARS - 1].rstrip() + "…"
    # One piece: a legend that wraps does so between its entries, not inside this one.
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    return (
        f'<span style="white-space:nowrap"><span style="color:{search_color().name()}">'
        f"&#9632;</span>&nbsp;<b>{text}</b></span>"
    )


# --------------------------------------------------------------------------- readable text
MIN_CONTRAST = 4.5  # WCAG AA for normal text: captions are small, they need it most


def _luminance(c: QColor) -> float:
    def channel(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())


def contrast_ratio(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio of two colours (1: the same, 21: black on white)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def caption_color(background: QColor | None = None) -> QColor:
    """Muted text (the header's captions) on ``background`` (default: the window's):
    the text colour blended toward the background as far as a contrast of
    :data:`MIN_CONTRAST` allows - muted, never unreadable (a disabled label's grey is
    1.6:1 on the light Fusion palette), in light and dark themes alike."""
    pal = palette()
    bg = background if background is not None else pal.color(QPalette.ColorRole.Window)
    fg = pal.color(QPalette.ColorRole.WindowText)
    if contrast_ratio(fg, bg) < MIN_CONTRAST:  # (a palette whose own text is faint)
        fg = QColor("#000000") if _luminance(bg) > 0.18 else QColor("#ffffff")
    for t in (0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1, 0.05):
        c = QColor.fromRgbF(
            fg.redF() + (bg.redF() - fg.redF()) * t,
            fg.greenF() + (bg.greenF() - fg.greenF()) * t,
            fg.blueF() + (bg.blueF() - fg.blueF()) * t,
        )
        if contrast_ratio(c, bg) >= MIN_CONTRAST + 0.1:  # (a margin for rounding)
            return c
    return fg


def caption_style(size_pt: int = 8) -> str:
    """The stylesheet of a caption: small, in :func:`caption_color`."""
    return f"font-size: {size_pt}pt; color: {caption_color().name()};"
