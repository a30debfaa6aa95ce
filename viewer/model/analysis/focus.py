"""Which device a command, a panel or a report answers for when the user did not say.

One rule for every view, so the CLI and the GUI never answer for different GPUs:
the device of the last OOM (that is what the user came for), else the device whose
reserved memory peaked highest, else the first device with trace events, else the
first device with segments.

The peak is found from the columns without a replay: the reserved bytes at the end
(the segments of the snapshot) minus what the trace mapped after each event.
"""

from __future__ import annotations

import numpy as np

from ..core.snapshot import Action, Snapshot

#: Trace actions that change a device's reserved bytes, and the sign of the change.
_RESERVE_SIGN = {
    Action.SEGMENT_ALLOC: 1,
    Action.SEGMENT_MAP: 1,
    Action.SEGMENT_FREE: -1,
    Action.SEGMENT_UNMAP: -1,
}


def trace_devices(snap: Snapshot) -> list[int]:
    """Every device the trace has events of, ascending (one pass when a single device
    holds them all, as most recordings do)."""
    found = snap.trace.device_range()
    if found is None:
        return []
    if found[0] == found[1]:
        return [found[0]]
    return sorted(set(np.unique(snap.trace.device).tolist()))


def devices_of(snap: Snapshot) -> list[int]:
    """Every device the snapshot holds segments or trace events of, ascending."""
    return sorted(set(snap.segments.device.tolist()) | set(trace_devices(snap)))


def last_oom_device(snap: Snapshot) -> int | None:
    """The device of the last ``oom`` trace event, or None."""
    rows = np.flatnonzero(snap.trace.action == Action.OOM)
    return int(snap.trace.device[rows[-1]]) if len(rows) else None


def peak_reserved_by_device(snap: Snapshot) -> dict[int, int]:
    """Highest reserved bytes of each device over its trace (the final reserved bytes
    where it has no trace).  Segments mapped before recording started count: the
    walk goes backwards from the reserved bytes at the end."""
    trace, seg = snap.trace, snap.segments
    # Only segment events change reserved bytes: the walk reads those alone (the other
    # events repeat the running total, and the peak counts from at least zero anyway).
    reserving = np.flatnonzero(
        (trace.action >= min(_RESERVE_SIGN)) & (trace.action <= max(_RESERVE_SIGN))
    )
    seg_device, seg_action = trace.device[reserving], trace.action[reserving]
    seg_size = trace.size[reserving]
    out: dict[int, int] = {}
    for dev in devices_of(snap):
        final = int(seg.total_size[seg.device == dev].sum())
        on = seg_device == dev
        act, size = seg_action[on], seg_size[on]
        delta = np.zeros(len(act), np.int64)
        for action, sign in _RESERVE_SIGN.items():
            hit = act == action
            delta[hit] = sign * size[hit]
        after = np.cumsum(delta)  # reserved after each segment event, relative to the start
        start = final - (int(after[-1]) if len(after) else 0)
        out[dev] = start + max(0, int(after.max()) if len(after) else 0)
    return out


def default_device(snap: Snapshot) -> int | None:
    """The device to answer for: the last OOM's, else the highest reserved peak's
    (ties: the lowest device), else None for a snapshot with no device at all."""
    oom = last_oom_device(snap)
    if oom is not None:
        return oom
    peaks = peak_reserved_by_device(snap)
    if not peaks:
        return None
    return min(peaks, key=lambda d: (-peaks[d], d))


def default_trace_device(snap: Snapshot) -> int | None:
    """:func:`default_device` among the devices with trace events (what a replay, a
    what-if or a breakdown needs); None when no device has any."""
    with_events = set(trace_devices(snap))
    if not with_events:
        return None
    if len(with_events) == 1 and not np.any(snap.segments.device != next(iter(with_events))):
        # One device in the whole snapshot: the rules can only choose it (no peaks walked).
        return next(iter(with_events))
    best = default_device(snap)
    if best in with_events:
        return best
    peaks = peak_reserved_by_device(snap)
    return min(with_events, key=lambda d: (-peaks.get(d, 0), d))


def why_default(snap: Snapshot, device: int | None) -> str:
    """Why :func:`default_device` chose ``device``, in words a report can print after
    the device's name: "the last OOM's", "the highest reserved peak" or "the only one"."""
    if device is None:
        return "no device"
    if last_oom_device(snap) == device:
        return "the last OOM's"
    if len(devices_of(snap)) == 1:
        return "the only one"
    return "the highest reserved peak"


def device_phrase(snap: Snapshot, device: int | None, chosen_by_default: bool) -> str:
    """How a report names the device it answers for: "device 1 (the last OOM's)" when
    it was chosen for the user, "device 1" when the user asked for it."""
    if device is None:
        return "no device"
    if not chosen_by_default or len(devices_of(snap)) < 2:
        return f"device {device}"
    return f"device {device} ({why_default(snap, device)})"


def chosen_by(snap: Snapshot, device: int | None, given: bool) -> str:
    """Why a report answers for ``device``, as a JSON value: ``"given"`` (the user named
    it), ``"only"`` (the snapshot has no other), ``"last_oom"`` (:func:`default_device`'s
    first rule), ``"highest_peak"`` (its second) or ``"none"`` (no device at all)."""
    if given:
        return "given"
    if device is None:
        return "none"
    if len(devices_of(snap)) < 2:
        return "only"
    return "last_oom" if last_oom_device(snap) == device else "highest_peak"
