"""The summary report behind ``vramscope summary`` (plain data, JSON-ready)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import analysis, integrity
from .oom import oom_reports
from .recorded_window import recorded_window
from .snapshot import Action, Snapshot
from .timeline import Timeline
from .units import format_address, format_bytes, plural

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
        "trace_row": int(rep.rows[k]),  # index in the whole trace (all devices)
    }


def _oom_dict(snap: Snapshot, report) -> dict[str, Any]:
    """An OOM report plus ``event``: its index among its device's events (what --at takes)."""
    d = report.to_dict()
    d["event"] = int(np.count_nonzero(snap.trace.device[:report.event_index] == report.device))
    return d


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
    # What each device's trace window cannot show (a wrapped ring buffer, a late start).
    windows = [recorded_window(rep) for rep in
               (timeline.replay(d) for d in (timeline.devices if timeline else []))
               if rep is not None]
    out["windows"] = [w.to_dict() for w in windows]
    ooms = [_oom_dict(snap, r) for r in reports]
    if out["at"] is not None:
        # The state after --at: only the OOMs up to that event explain it.
        row = out["at"]["trace_row"]
        before = [o for o in ooms if o["event_index"] <= row]
        out["ooms_after_at"] = len(ooms) - len(before)
        out["oom"] = before[-1] if before else None
    else:
        out["oom"] = ooms[-1] if ooms else None
    out["ooms"] = ooms
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
    notes = []
    if total.expandable_segment_count:
        notes.append(EXPANDABLE_NOTE)
    for w in windows:
        if w.started_late:
            notes.append(w.describe() + "; peaks are over the window only")
    out["notes"] = notes
    out["warnings"] = list(snap.warnings)
    # Stretches of the timeline that are not exact (integrity.Untrusted), with why.
    out["untrusted"] = [u.to_dict() for u in integrity.check(timeline)] if timeline else []
    return out


def format_text(summary: dict[str, Any]) -> str:
    """A short human-readable report."""
    fb = format_bytes
    lines = [f"{summary['file']} ({summary['format']})"]
    at = summary.get("at")
    if at:
        lines.append(f"after event {at['event']} of {at['events']} on device {at['device']}: "
                     f"{at['action']} {fb(at['size'])}")
    lines.append(
        f"reserved {fb(summary['reserved_bytes'])} in {plural(summary['segment_count'], 'segment')}"
        + (f" + {summary['expandable_segment_count']} expandable"
           if summary["expandable_segment_count"] else "")
    )
    lines.append(
        f"allocated {fb(summary['allocated_bytes'])}, active {fb(summary['active_bytes'])}, "
        f"requested {fb(summary['requested_bytes'])}"
    )
    lines.append(
        f"free inside segments (all pools) {fb(summary['free_bytes'])} in "
        f"{plural(summary['gap_count'], 'gap')}, "
        f"largest free block {fb(summary['largest_free_block_bytes'])}, "
        f"fragmentation {summary['fragmentation']:.1%}"
    )
    lines.append(
        f"inactive split {fb(summary['inactive_split_bytes'])}, "
        f"rounding waste {fb(summary['rounding_waste_bytes'])}, "
        f"pending free {fb(summary['pending_free_bytes'])}"
    )
    if summary.get("peak_reserved_bytes") is not None:
        window = next((w for w in summary.get("windows") or []
                       if w["device"] == summary.get("peak_device")), None)
        late = bool(window and window["started_late"])
        where = f"event {summary['peak_reserved_event']}"
        # Several devices: the totals above are summed, the peak is one device's; say which.
        device = (f" on device {summary['peak_device']}"
                  if len(summary["devices"]) > 1 and summary.get("peak_device") is not None else "")
        if late and summary["peak_reserved_bytes"] == window["reserved_before"]:
            where = "already at the window's start"  # not an event of the window
        lines.append(
            f"peak over the {'recorded window' if late else 'recording'}{device}: reserved "
            f"{fb(summary['peak_reserved_bytes'])} ({where}), requested "
            f"{fb(summary['peak_requested_bytes'])} (event {summary['peak_requested_event']})"
        )
    if len(summary["devices"]) > 1:
        for d in summary["devices"]:
            lines.append(f"  device {d['device']}: reserved {fb(d['reserved_bytes'])}, "
                         f"allocated {fb(d['allocated_bytes'])}")
    lines.extend(_oom_lines(summary))
    for note in summary["notes"]:
        lines.append(f"note: {note}")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    for u in summary.get("untrusted", []):
        lines.append(("warning: " if u["kind"] == "inconsistent" else "note: ")
                     + integrity.Untrusted(**u).line())
    return "\n".join(lines)


def _oom_lines(summary: dict[str, Any]) -> list[str]:
    """Every OOM of the recording (up to the --at event when one is given), two lines each."""
    fb = format_bytes
    ooms = summary.get("ooms") or []
    at = summary.get("at")
    if at:
        ooms = [o for o in ooms if o["event_index"] <= at["trace_row"]]
    lines = []
    if len(ooms) > 1:
        lines.append(f"{len(ooms)} OOMs{' up to this event' if at else ''}:")
    for oom in ooms:
        event = oom.get("event", oom["event_index"])
        lines.append(
            f"OOM on device {oom['device']} at event {event}: {fb(oom['requested_bytes'])} "
            f"requested ({oom['pool_kind']} pool, stream "
            f"{oom['stream'] and format_address(oom['stream'])})"
        )
        lines.append(f"  {oom['verdict']}")
    later = summary.get("ooms_after_at") or 0
    if at and later:
        lines.append(f"({later} later {'OOM' if later == 1 else 'OOMs'} after this event "
                     "not shown: run without --at for all)")
    return lines
