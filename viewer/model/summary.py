"""The summary report behind ``vramscope summary`` (plain data, JSON-ready)."""

from __future__ import annotations

from typing import Any

from . import analysis
from .oom import oom_reports
from .snapshot import Snapshot
from .units import format_address, format_bytes

EXPANDABLE_NOTE = (
    "the allocator does not count expandable segments in segment_count and "
    "inactive_split_bytes; vramscope's own figures for them are "
    "expandable_segment_count and expandable_free_bytes"
)


def summarize(snap: Snapshot) -> dict[str, Any]:
    """Everything ``vramscope summary --json`` prints."""
    total = analysis.memory_stats(snap)
    reports = oom_reports(snap)
    out: dict[str, Any] = {"file": snap.path, "format": snap.source_format}
    out.update(total.to_dict())
    out["oom"] = reports[-1].to_dict() if reports else None
    out["ooms"] = [r.to_dict() for r in reports]
    out["devices"] = []
    for device in snap.devices:
        d = {"device": device}
        d.update(analysis.memory_stats(snap, analysis.Selection(device=device)).to_dict())
        d["pools"] = [
            {
                "pool_id": list(snap.pools[key.pool]),
                "stream": key.stream,
                "segment_type": "small" if key.is_small else "large",
                **analysis.memory_stats(snap, key.selection()).to_dict(),
            }
            for key in analysis.pool_keys(snap)
            if key.device == device
        ]
        out["devices"].append(d)
    out["trace_events"] = len(snap.trace)
    out["stacks"] = len(snap.stacks)
    out["frames"] = len(snap.frames)
    out["allocator_settings"] = snap.allocator_settings
    notes = []
    if total.expandable_segment_count:
        notes.append(EXPANDABLE_NOTE)
    out["notes"] = notes
    out["warnings"] = list(snap.warnings)
    return out


def format_text(summary: dict[str, Any]) -> str:
    """A short human-readable report."""
    fb = format_bytes
    lines = [f"{summary['file']} ({summary['format']})"]
    lines.append(
        f"reserved {fb(summary['reserved_bytes'])} in {summary['segment_count']} segments"
        + (f" + {summary['expandable_segment_count']} expandable"
           if summary["expandable_segment_count"] else "")
    )
    lines.append(
        f"allocated {fb(summary['allocated_bytes'])}, active {fb(summary['active_bytes'])}, "
        f"requested {fb(summary['requested_bytes'])}"
    )
    lines.append(
        f"free in segments {fb(summary['free_bytes'])} in {summary['gap_count']} gaps, "
        f"largest free block {fb(summary['largest_free_block_bytes'])}, "
        f"fragmentation {summary['fragmentation']:.1%}"
    )
    lines.append(
        f"inactive split {fb(summary['inactive_split_bytes'])}, "
        f"rounding waste {fb(summary['rounding_waste_bytes'])}, "
        f"pending free {fb(summary['pending_free_bytes'])}"
    )
    if len(summary["devices"]) > 1:
        for d in summary["devices"]:
            lines.append(f"  device {d['device']}: reserved {fb(d['reserved_bytes'])}, "
                         f"allocated {fb(d['allocated_bytes'])}")
    oom = summary["oom"]
    if oom:
        lines.append(
            f"OOM on device {oom['device']}: {fb(oom['requested_bytes'])} requested "
            f"({oom['pool_kind']} pool, stream {format_address(oom['stream'])})"
        )
        lines.append(f"  {oom['verdict']}")
    for note in summary["notes"]:
        lines.append(f"note: {note}")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
