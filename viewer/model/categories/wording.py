"""The words every view uses for a split of the memory by category (the header,
``summary``, ``advise``, the panels, the HTML report, MCP, the API): one place, so the same
memory reads the same everywhere.  Light on purpose (no numpy, no replay): the window
imports it before any breakdown exists."""

from __future__ import annotations

from ..core.units import format_bytes
from .reasons import CATEGORY_LABELS, CATEGORY_NAMES


def split_total(split: dict[str, int], guessed: int = 0) -> str:
    """'9.95 GiB (7.45 GiB guessed)': what ``split`` adds up to and how much of it was
    placed by a guess (``guessed`` bytes), in the words of the window's split line and of
    ``vramscope summary``."""
    return format_bytes(sum(split.values())) + (
        f" ({format_bytes(guessed)} guessed)" if guessed else ""
    )


#: Why graph-held memory is beside the split (for tooltips and reports' footnotes).
HELD_WHY = (
    "the outputs a CUDA graph's replays write in its private pool: the program holds "
    "them, the allocator (and its counters) does not"
)


def held_words(held: dict[str, int]) -> str:
    """The words every view uses for :meth:`MemoryBreakdown.graph_held_at`'s answer
    (empty: nothing held)."""
    if not held:
        return ""
    parts = [
        f"{label} {format_bytes(held[name])}"
        for name, label in zip(CATEGORY_NAMES, CATEGORY_LABELS)
        if held.get(name)
    ]
    where = "in CUDA graph pools, counted free by the allocator"
    if len(parts) == 1:
        return f"{parts[0]} {where}"
    return f"{format_bytes(sum(held.values()))} {where}: {', '.join(parts)}"


def format_split(split: dict[str, int]) -> str:
    """'parameters 1.2 GiB (20%), gradients ..., ' (zero categories left out)."""
    total = sum(split.values())
    parts = []
    for name, label in zip(CATEGORY_NAMES, CATEGORY_LABELS):
        b = split.get(name, 0)
        if b:
            parts.append(
                f"{label} {format_bytes(b)} ({b / total:.0%})"
                if total
                else f"{label} {format_bytes(b)}"
            )
    return ", ".join(parts) if parts else "nothing live"
