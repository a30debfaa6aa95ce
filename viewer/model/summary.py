"""The summary report behind ``vramscope summary`` (plain data, JSON-ready)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import analysis
from .oom import oom_reports
from .snapshot import HOST_DEVICE, Action, Snapshot
from .timeline import Timeline
from .units import format_address, format_bytes

CURVES = ("requested", "allocated", "active", "reserved")

EXPANDABLE_NOTE = (
    "the allocator does not count expandable segments in segment_count and "
    "inactive_split_bytes; vramscope's own figures for them are "
    "expandable_segment_count and expandable_free_bytes"
)


def peaks(timeline: Timeline, device: int) -> dict[str, Any]:
    """Peaks of the four curves over the recorded window, with where they happen."""
    rep = timeline.replay(device)
    out: dict[str, Any] = {}
    for curve in CURVES:
        value, k = rep.peak(curve) if rep is not None and len(rep) else (None, -1)
        out[f"peak_{curve}_bytes"] = value
        out[f"peak_{curve}_event"] = k if k >= 0 else None
        out[f"peak_{curve}_time_us"] = int(rep.time_us[k]) if k >= 0 and rep.time_us[k] >= 0 \
            else None
    return out


def at_event(timeline: Timeline, device: int, k: int) -> dict[str, Any]:
    """Facts of event ``k`` of ``device`` (what the state is "after")."""
    rep = timeline.replay(device)
    return {
        "device": device,
        "event": k,
        "events": len(rep),
        "action": Action(int(rep.action[k])).name.lower(),
        "addr": int(rep.addr[k]),
        "size": int(rep.size[k]),
        "stream": int(rep.stream[k]),
        "time_us": int(rep.time_us[k]) if rep.time_us[k] >= 0 else None,
    }


def summarize(snap: Snapshot, timeline: Timeline | None = None,
              at: tuple[int, int] | None = None) -> dict[str, Any]:
    """Everything ``vramscope summary --json`` prints.

    With ``at=(device, k)`` the figures are those after event ``k`` of that
    device (replayed), and ``"at"`` describes the event.
    """
    reports = oom_reports(snap, timeline)
    state = snap
    if at is not None and timeline is not None:
        state = timeline.snapshot_at(*at)
    total = analysis.memory_stats(state)
    out: dict[str, Any] = {"file": snap.path, "format": snap.source_format}
    out.update(total.to_dict())
    out["at"] = at_event(timeline, *at) if at is not None and timeline is not None else None
    device_peaks = {d: peaks(timeline, d) for d in timeline.devices} if timeline else {}
    if device_peaks:
        # One device: its peaks.  Several: the device with the highest reserved peak.
        top = max(device_peaks, key=lambda d: device_peaks[d]["peak_reserved_bytes"] or 0)
        out.update(device_peaks[top])
        out["peak_device"] = top
    out["oom"] = reports[-1].to_dict() if reports else None
    out["ooms"] = [r.to_dict() for r in reports]
    out["devices"] = []
    if timeline is not None:  # its devices are the trace's (no second pass over the trace)
        devices = set(timeline.devices) | set(np.unique(snap.segments.device).tolist()) \
            | set(np.unique(state.segments.device).tolist())
    else:
        devices = set(snap.devices) | set(state.devices)
    for device in sorted(devices):
        d = {"device": device}
        d.update(analysis.memory_stats(state, analysis.Selection(device=device)).to_dict())
        d.update(device_peaks.get(device, {}))
        d["pools"] = [
            {
                "pool_id": list(state.pools[key.pool]),
                "stream": key.stream,
                "segment_type": "small" if key.is_small else "large",
                **analysis.memory_stats(state, key.selection()).to_dict(),
            }
            for key in analysis.pool_keys(state)
            if key.device == device
        ]
        out["devices"].append(d)
    out["trace_events"] = len(snap.trace)
    out["stacks"] = len(snap.stacks)
    out["frames"] = len(snap.frames)
    out["allocator_settings"] = snap.allocator_settings
    out.update(newer_fields(snap))
    notes = []
    if total.expandable_segment_count:
        notes.append(EXPANDABLE_NOTE)
    overflow = snap.trace_integrity_note()
    if overflow:
        notes.append(overflow)
    out["notes"] = notes
    out["warnings"] = list(snap.warnings)
    return out


def newer_fields(snap: Snapshot) -> dict[str, Any]:
    """What newer torch records beside the allocator state: the trace ring's overflow,
    allocation annotations, forward stacks and pinned host memory (its own device,
    never part of the GPU figures above it)."""
    host = None
    if snap.host is not None:
        host = {
            "device": HOST_DEVICE,
            "reserved_bytes": snap.host.reserved_bytes,
            "allocated_bytes": snap.host.allocated_bytes,
            "segment_count": len(snap.host.segments),
            "trace_events": len(snap.host.trace),
        }
    return {
        "trace_overflowed": snap.trace_overflowed,
        "trace_max_entries": snap.trace_max_entries,
        "allocation_annotations": len(snap.alloc_annotations),
        "forward_stacks": int((snap.trace.forward_stack >= 0).sum()),
        "host_memory": host,
    }


def format_text(summary: dict[str, Any]) -> str:
    """A short human-readable report."""
    fb = format_bytes
    lines = [f"{summary['file']} ({summary['format']})"]
    at = summary.get("at")
    if at:
        lines.append(f"after event {at['event']} of {at['events']} on device {at['device']}: "
                     f"{at['action']} {fb(at['size'])}")
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
    if summary.get("peak_reserved_bytes") is not None:
        lines.append(
            f"peak over the recording: reserved {fb(summary['peak_reserved_bytes'])} "
            f"(event {summary['peak_reserved_event']}), requested "
            f"{fb(summary['peak_requested_bytes'])} (event {summary['peak_requested_event']})"
        )
    if len(summary["devices"]) > 1:
        for d in summary["devices"]:
            lines.append(f"  device {d['device']}: reserved {fb(d['reserved_bytes'])}, "
                         f"allocated {fb(d['allocated_bytes'])}")
    oom = summary["oom"]
    if oom:
        lines.append(
            f"OOM on device {oom['device']}: {fb(oom['requested_bytes'])} requested "
            f"({oom['pool_kind']} pool, stream {oom['stream'] and format_address(oom['stream'])})"
        )
        lines.append(f"  {oom['verdict']}")
    host = summary.get("host_memory")
    if host:
        lines.append(f"pinned host memory (device 'host', not in the figures above): reserved "
                     f"{fb(host['reserved_bytes'])} in {host['segment_count']} segments, "
                     f"allocated {fb(host['allocated_bytes'])}")
    if summary.get("allocation_annotations"):
        lines.append(f"{summary['allocation_annotations']} allocation annotations "
                     "(torch.cuda.memory._annotate_memory)")
    for note in summary["notes"]:
        lines.append(f"note: {note}")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
