"""The header's memory figures in words: their titles, how each value reads, and which
memory an OOM verdict counts.

One rule for every place that shows them: the window's header, the HTML report's
Figures and the notebook display (``vramscope.open(...)``).
"""

from __future__ import annotations

from ..analysis.figures import MemoryStats
from ..core.units import format_bytes
from .document import stream_label

#: key (a :class:`MemoryStats` field) -> title, in the order they are shown.
FIGURE_TITLES: dict[str, str] = {
    "reserved_bytes": "Reserved",
    "allocated_bytes": "Allocated",
    "active_bytes": "Active",
    "requested_bytes": "Requested",
    "free_bytes": "Free in segments",
    "largest_free_block_bytes": "Largest free block",
    "fragmentation": "Fragmentation",
    "segment_count": "Segments",
    "rounding_waste_bytes": "Rounding waste",
    "pending_free_bytes": "Pending free",
}


def figure_text(stats: MemoryStats, key: str) -> str:
    """The value of figure ``key`` of ``stats`` as shown ("10.44 GiB", "95.5%", ...)."""
    if key == "fragmentation":
        pct = stats.fragmentation * 100
        # Never round a scattered-but-not-total figure up to "100.0%".
        return f"{min(pct, 99.9) if pct < 100 else pct:.1f}%"
    if key == "segment_count":
        text = f"{stats.segment_count:,}"
        if stats.expandable_segment_count:
            text += f" + {stats.expandable_segment_count} exp."
        return text
    if key == "free_bytes":
        gaps = stats.gap_count
        return f"{format_bytes(stats.free_bytes)} in {gaps:,} gap{'s' if gaps != 1 else ''}"
    return format_bytes(getattr(stats, key))


def oom_where(oom) -> str:
    """Which memory an OOM verdict counts: its "free inside N segments" is of the request's
    pool kind and stream on one device, not the header's figures (which may sum devices,
    pools and streams: said next to the verdict, the two never read as a contradiction)."""
    return f"device {oom.device}, {oom.pool_kind} pool, {stream_label(int(oom.stream))}"
