"""The summary report behind ``vramscope summary`` (plain data, JSON-ready)."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..analysis import figures as analysis
from ..analysis import focus
from ..analysis.calltree import site_frames, top_sites
from ..analysis.gpu_accounting import format_lines as gpu_lines
from ..analysis.gpu_accounting import gpu_accounting
from ..analysis.oom import oom_reports, outside_oom
from ..categories.lean import column_at
from ..core.snapshot import HOST_DEVICE, Snapshot
from ..core.units import event_of, format_address, format_bytes, plural
from ..replay import integrity
from ..replay.recorded_window import recorded_window
from ..replay.timeline import Timeline, at_event

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
        t = int(rep.time_us[k]) if rep is not None and k >= 0 else -1
        out[f"peak_{curve}_bytes"] = value
        out[f"peak_{curve}_event"] = k if k >= 0 else None
        out[f"peak_{curve}_time_us"] = t if t >= 0 else None
    return out


def answered_device(snap: Snapshot, device_peaks: dict[int, dict[str, Any]]) -> int | None:
    """The device a report answers for when none is given: the last OOM's, else the one
    with the highest reserved peak (:mod:`..analysis.focus`); ``device_peaks``: the
    :func:`peaks` of each device with trace events."""
    device = focus.default_trace_device(snap) if device_peaks else None
    return focus.default_device(snap) if device is None else device


def peak_device_of(device: int | None, device_peaks: dict[int, dict[str, Any]]) -> int | None:
    """The device whose peaks (and split at the peak) a report gives for ``device``:
    itself (several devices: summing would mix GPUs); one with no trace events: the
    device with the highest reserved peak.  None when no device has events."""
    if not device_peaks:
        return None
    if device in device_peaks:
        return device
    return max(device_peaks, key=lambda d: device_peaks[d]["peak_reserved_bytes"] or 0)


def _oom_dict(snap: Snapshot, report) -> dict[str, Any]:
    """An OOM report plus ``event``: its index among its device's events (what --at takes)."""
    d = report.to_dict()
    d["event"] = int(np.count_nonzero(snap.trace.device[: report.event_index] == report.device))
    return d


def summarize(
    snap: Snapshot,
    timeline: Timeline | None = None,
    at: tuple[int, int] | None = None,
    prepared: Future | None = None,
    device: int | None = None,
    chosen_by: str | None = None,
) -> dict[str, Any]:
    """Everything ``vramscope summary --json`` prints.

    With ``at=(device, k)`` the figures are those after event ``k`` of that
    device (replayed), and ``"at"`` describes the event.  ``prepared``: the breakdown's
    first part, made while the replay ran (:func:`summary_timeline`).

    ``device``: the device the peaks, the breakdown and the sites at the peak are of
    (``"device"``; ``chosen_by`` says why, ``"device_chosen_by"``); default: the
    last OOM's, else the highest reserved peak's (:mod:`..analysis.focus`).
    """
    # The categories' breakdown (the slowest part) on a second thread from the start when the
    # device it is for is known already (one device with events): the peaks, windows and
    # pools below run meanwhile; joined where its fields are written.
    early = None
    peaks_found: tuple[int, Future] | None = None
    if timeline is not None and len(timeline.devices) == 1 and (os.cpu_count() or 1) > 1:
        only = next(iter(timeline.devices))
        early_pool = ThreadPoolExecutor(2)
        early = (only, early_pool.submit(_build_breakdown, snap, timeline, only, prepared))
        # The peaks (a C pass over the events) on a third thread meanwhile too.
        peaks_found = (only, early_pool.submit(peaks, timeline, only))
        early_pool.shutdown(wait=False)
    # Stretches of the timeline that are not exact (integrity.Untrusted), with why: while
    # the breakdown's thread runs (both are mostly C passes without the GIL); before the
    # OOM reports, which it marks (an OOM inside a stretch is not exact).
    found = integrity.check(timeline) if timeline else []
    reports = oom_reports(snap, timeline, untrusted=found)
    state = snap
    if at is not None and timeline is not None:
        state = timeline.snapshot_at(*at)
    total = analysis.memory_stats(state)
    out: dict[str, Any] = {"file": snap.path, "format": snap.source_format}
    out.update(total.to_dict())
    out["at"] = at_event(timeline, *at) if at is not None and timeline is not None else None
    if peaks_found is not None:
        device_peaks = {peaks_found[0]: peaks_found[1].result()}
    else:
        device_peaks = {d: peaks(timeline, d) for d in timeline.devices} if timeline else {}
    given = device is not None
    if device is None:
        device = answered_device(snap, device_peaks)
    out["device"] = device
    out["device_chosen_by"] = chosen_by or focus.chosen_by(snap, device, given)
    out["device_phrase"] = focus.device_phrase(snap, device, out["device_chosen_by"] != "given")
    top = peak_device_of(device, device_peaks)
    if top is not None:
        out.update(device_peaks[top])
        out["peak_device"] = top
    # What each device's trace window cannot show (a wrapped ring buffer, a late start).
    reps = [timeline.replay(d) for d in timeline.devices] if timeline else []
    windows = [recorded_window(rep) for rep in reps if rep is not None]
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
    # An OOM outside the allocator (cuBLAS, NCCL, ...) has no trace event: the sidecar's.
    outside = outside_oom(snap)
    out["outside_oom"] = outside.to_dict() if outside is not None else None
    out["devices"] = []
    if timeline is not None:  # its devices are the trace's (no second pass over the trace)
        devices = (
            set(timeline.devices)
            | set(np.unique(snap.segments.device).tolist())
            | set(np.unique(state.segments.device).tolist())
        )
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
    # The whole GPU at the dump's instant (the sidecar's record; not --at's instant).
    out["gpu_accounting"] = gpu_accounting(snap).to_dict()
    notes = []
    if total.expandable_segment_count:
        notes.append(EXPANDABLE_NOTE)
    for w in windows:
        if w.started_late:
            notes.append(w.describe() + "; peaks are over the window only")
    overflow = snap.trace_integrity_note()
    if overflow:
        notes.append(overflow)
    out["notes"] = notes
    untrusted = [u.to_dict() for u in found]  # (checked above, before breakdown_fields)
    # What the memory is (before the warnings are copied: a trace it cannot read adds one).
    made: dict = {}
    out.update(
        breakdown_fields(
            snap, timeline, at, out.get("peak_device"), out.get("peak_requested_event"), early, made
        )
    )
    out.update(site_fields(snap, timeline, out, made))
    out["warnings"] = list(snap.warnings)
    out["untrusted"] = untrusted
    return out


# --- what the memory is: categories at the peak, iterations, leaks ---------------------
def summary_timeline(
    snap: Snapshot, emit: dict[int, list[int]] | None = None
) -> tuple[Timeline, Future | None]:
    """``build_timeline`` as a report needs it (no keyframes; the layouts after ``emit``
    kept), with the first part of the memory breakdown made beside the replay where that
    pays: :func:`categories.breakdown.replay_and_prepare`; pass the future to
    :func:`summarize` (``prepared``)."""
    from ..categories.breakdown import replay_and_prepare

    return replay_and_prepare(snap, emit)


def _build_breakdown(
    snap: Snapshot, timeline: Timeline, device: int | None, prepared: Future | None = None
):
    """The :class:`categories.MemoryBreakdown` of ``device``; None (and a warning) where
    the trace is inconsistent.  ``prepared``: see :func:`summary_timeline`."""
    from ..categories import MemoryBreakdown

    if device is None or timeline.replay(device) is None:
        return None
    try:
        part = prepared.result() if prepared is not None else None
        return MemoryBreakdown.build(snap, timeline, device, prepared=part)
    except (ValueError, IndexError, KeyError) as exc:  # an inconsistent trace: say so
        snap.warnings.append(f"memory categories of device {device} skipped: {exc}")
        return None


def breakdown_fields(
    snap: Snapshot,
    timeline: Timeline | None,
    at: tuple[int, int] | None,
    peak_device: int | None,
    peak_event: int | None,
    early: tuple[int, Future] | None = None,
    made: dict | None = None,
) -> dict[str, Any]:
    """``categories_at_peak`` / ``iterations`` / ``leaks`` of the peak device (so the split
    adds up to ``peak_requested_bytes``) and ``categories_at`` of ``--at``'s device, from
    :class:`categories.MemoryBreakdown` (``early``: (device, the build of it already
    started on a thread); ``made``: filled with device -> breakdown, for reuse)."""
    out: dict[str, Any] = {
        "categories_device": None,
        "categories_at_peak": None,
        "categories_at": None,
        "iterations": [],
        "leaks": [],
    }
    if timeline is None or not timeline.devices:
        if early is not None:
            early[1].result()
        return out
    made = {} if made is None else made
    if early is not None:
        made[early[0]] = early[1].result()

    def build(device):
        if device not in made:
            made[device] = _build_breakdown(snap, timeline, device)
        return made[device]

    bd = build(peak_device)
    if bd is not None:
        out.update(bd.summary_dict(peak_event))
        if peak_event is not None and bd.n_events:
            sh = bd.sharding(peak_event)
            if sh is not None:
                out["sharding"] = sh.to_dict()
                out["sharding_note"] = sh.note()
    if at is not None:
        bd_at = bd if at[0] == peak_device else build(at[0])
        if bd_at is not None:
            out["categories_at"] = bd_at.split_at(at[1])
            out["categories_guessed_bytes_at"] = bd_at.guessed_bytes_at(at[1])
            out["graph_held_at"] = bd_at.graph_held_at(at[1])
            out["categories_at_device"] = at[0]
    return out


SITES = 5  # allocation sites listed at the peak and at each OOM


def site_fields(
    snap: Snapshot, timeline: Timeline | None, out: dict[str, Any], made: dict
) -> dict[str, Any]:
    """``top_sites_at_peak``: the frames (the user's line where the stack has one) holding
    the most allocated bytes at the answered device's allocated peak; ``top_sites_at_oom``:
    the same at each OOM of ``out["ooms"]`` (one entry per OOM: device, event, sites).
    From the allocations' lifetime columns, grouped with numpy: no block objects."""
    res: dict[str, Any] = {"top_sites_at_peak": None, "top_sites_at_oom": []}
    if timeline is None or not timeline.devices:
        return res
    sites_of_stack: list = []
    lifetimes: dict = {}

    def sites_at(device: int, k: int | None) -> list[dict] | None:
        if k is None or k < 0 or timeline.replay(device) is None:
            return None
        if device not in lifetimes:
            bd = made.get(device)
            lifetimes[device] = bd.intervals if bd is not None else timeline.intervals(device)
        iv = lifetimes[device]
        if not sites_of_stack:
            sites_of_stack.append(site_frames(snap))
        live = np.flatnonzero((iv.start <= k) & (iv.end > k))
        # Only the live allocations' sizes: the whole lazy column is millions of gathers.
        size = column_at(iv, "size", live)
        return [
            s.to_dict() for s in top_sites(snap, iv.stack[live], size, SITES, sites_of_stack[0])
        ]

    peak_device = out.get("peak_device")
    if peak_device is not None:
        got = sites_at(peak_device, out.get("peak_allocated_event"))
        if got is not None:
            res["top_sites_at_peak"] = {
                "device": peak_device,
                "event": out["peak_allocated_event"],
                "sites": got,
            }
    for oom in out.get("ooms") or []:
        got = sites_at(oom["device"], oom.get("event"))
        res["top_sites_at_oom"].append(
            {"device": oom["device"], "event": oom.get("event"), "sites": got or []}
        )
    return res


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
        lines.append(
            f"after {event_of(at['event'], at['events'])} on device {at['device']}: "
            f"{at['action']} {fb(at['size'])}"
        )
    devices = summary["devices"]
    if len(devices) > 1:
        # Several GPUs: each its own figures (a sum beside one GPU's OOM would mislead:
        # the free bytes of another GPU cannot serve its request), the answered one first.
        lines.append(
            f"{plural(len(devices), 'device')}; answering for {summary.get('device_phrase')}"
        )
        first = [d for d in devices if d["device"] == summary.get("device")]
        for d in first + [d for d in devices if d["device"] != summary.get("device")]:
            lines.append(f"device {d['device']}:")
            lines.extend("  " + line for line in _figure_lines(d))
            lines.extend("  " + line for line in _peak_lines(summary, d))
    else:
        lines.extend(_figure_lines(summary))
        lines.extend(_peak_lines(summary, summary))
    lines.extend(_oom_lines(summary))
    if summary.get("gpu_accounting"):
        lines.extend(gpu_lines(summary["gpu_accounting"]))
    lines.extend(site_lines(summary))
    lines.extend(breakdown_lines(summary))
    host = summary.get("host_memory")
    if host:
        lines.append(
            f"pinned host memory (device 'host', not in the figures above): reserved "
            f"{fb(host['reserved_bytes'])} in {plural(host['segment_count'], 'segment')}, "
            f"allocated {fb(host['allocated_bytes'])}"
        )
    if summary.get("allocation_annotations"):
        lines.append(
            f"{plural(summary['allocation_annotations'], 'allocation annotation')} "
            "(torch.cuda.memory._annotate_memory)"
        )
    for note in summary["notes"]:
        lines.append(f"note: {note}")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    for u in summary.get("untrusted", []):
        lines.append(
            ("warning: " if u["kind"] == "inconsistent" else "note: ")
            + integrity.Untrusted(**u).line()
        )
    return "\n".join(lines)


def _figure_lines(stats: dict[str, Any]) -> list[str]:
    """The figures of one scope (the whole snapshot, or one device's entry)."""
    fb = format_bytes
    return [
        f"reserved {fb(stats['reserved_bytes'])} in {plural(stats['segment_count'], 'segment')}"
        + (
            f" + {stats['expandable_segment_count']} expandable"
            if stats["expandable_segment_count"]
            else ""
        ),
        f"allocated {fb(stats['allocated_bytes'])}, active {fb(stats['active_bytes'])}, "
        f"requested {fb(stats['requested_bytes'])}",
        f"free inside segments (all pools) {fb(stats['free_bytes'])} in "
        f"{plural(stats['gap_count'], 'gap')}, "
        f"largest free block {fb(stats['largest_free_block_bytes'])}, "
        f"fragmentation {stats['fragmentation']:.1%}",
        f"inactive split {fb(stats['inactive_split_bytes'])}, "
        f"rounding waste {fb(stats['rounding_waste_bytes'])}, "
        f"pending free {fb(stats['pending_free_bytes'])}",
    ]


def _peak_lines(summary: dict[str, Any], stats: dict[str, Any]) -> list[str]:
    """The peak line of one scope (``stats``: the summary itself, or a device's entry)."""
    fb = format_bytes
    if stats.get("peak_reserved_bytes") is None:
        return []
    device = stats.get("device") if stats is not summary else summary.get("peak_device")
    window = next((w for w in summary.get("windows") or [] if w["device"] == device), None)
    late = bool(window and window["started_late"])
    where = f"event {stats['peak_reserved_event']}"
    if late and window and stats["peak_reserved_bytes"] == window["reserved_before"]:
        where = "already at the window's start"  # not an event of the window
    return [
        f"peak over the {'recorded window' if late else 'recording'}: reserved "
        f"{fb(stats['peak_reserved_bytes'])} ({where}), requested "
        f"{fb(stats['peak_requested_bytes'])} (event {stats['peak_requested_event']})"
    ]


def site_lines(summary: dict[str, Any]) -> list[str]:
    """Where the memory was allocated: the top sites at the peak and at each OOM."""
    fb = format_bytes
    lines = []

    def block(head: str, sites: list[dict]) -> None:
        if not sites:
            return
        lines.append(head)
        width = max(len(fb(s["bytes"])) for s in sites)
        for s in sites:
            lines.append(
                f"  {fb(s['bytes']):>{width}}  {plural(s['count'], 'block')}  {s['frame']}"
            )

    several = len(summary.get("devices") or []) > 1
    peak = summary.get("top_sites_at_peak")
    if peak:
        on = f" on device {peak['device']}" if several else ""
        block(
            f"allocated at the peak{on} (event {peak['event']}), by where it was made:",
            peak["sites"],
        )
    at_oom = summary.get("top_sites_at_oom") or []
    at = summary.get("at")
    if at:  # after --at: only the OOMs up to that event (as the OOM lines)
        at_oom = [
            e
            for e, o in zip(at_oom, summary.get("ooms") or [])
            if o["event_index"] <= at["trace_row"]
        ]
    for entry in at_oom[-SITE_OOMS:]:
        block(
            f"allocated at the OOM on device {entry['device']} (event {entry['event']}), "
            "by where it was made:",
            entry["sites"],
        )
    if len(at_oom) > SITE_OOMS:
        lines.append(
            f"  (the sites at {plural(len(at_oom) - SITE_OOMS, 'earlier OOM')} are in --json)"
        )
    return lines


SITE_OOMS = 3  # OOMs whose sites the text lists (the last ones; --json has every one)


# --- the split and leaks in words ------------------------------------------------------
def graph_held_line(held: dict[str, int], when: str) -> str:
    """One line for what CUDA graphs' outputs hold beside the split (not part of it)."""
    from ..categories.wording import held_words

    return f"  + {when}: {held_words(held)}"


def breakdown_lines(summary: dict[str, Any]) -> list[str]:
    """The split at the peak (and at ``--at``) in one line each, every leak in words."""
    from ..categories.iterations import describe_iterations
    from ..categories.wording import format_split, split_total

    fb = format_bytes
    lines = []
    if summary.get("categories_at_peak"):
        leaked = summary.get("leaked_bytes_at_peak") or 0
        split = summary["categories_at_peak"]
        guessed = summary.get("categories_guessed_bytes_at_peak") or 0
        lines.append(
            f"at the peak: {split_total(split, guessed)} = {format_split(split)}"
            + (
                f"; {fb(leaked)} of it kept by the "
                f"{'leaks' if len(summary.get('leaks') or []) > 1 else 'leak'} below"
                if leaked
                else ""
            )
        )
        if summary.get("graph_held_at_peak"):
            lines.append(graph_held_line(summary["graph_held_at_peak"], "at the peak"))
    if summary.get("sharding_note"):
        lines.append(summary["sharding_note"])
    if summary.get("categories_at"):
        split = summary["categories_at"]
        guessed = summary.get("categories_guessed_bytes_at") or 0
        lines.append(
            f"after event {summary['at']['event']:,}: {split_total(split, guessed)} = "
            f"{format_split(split)}"
        )
        if summary.get("graph_held_at"):
            lines.append(
                graph_held_line(summary["graph_held_at"], f"after event {summary['at']['event']:,}")
            )
    its = summary.get("iterations") or []
    if its:
        top = max(its, key=lambda it: it["peak_bytes"])
        lines.append(
            f"{describe_iterations(its)}; the highest, #{top['index']}, peaks at "
            f"{fb(top['peak_bytes'])} in its {top['peak_phase']} phase"
        )
    leaks = summary.get("leaks") or []
    if len(leaks) > 1:
        lines.append(
            f"leaks: {plural(len(leaks), 'line')} keep "
            f"{fb(sum(lk['bytes_per_iteration'] for lk in leaks))} per iteration "
            f"together ({fb(sum(lk['live_bytes'] for lk in leaks))} now)"
        )
    for lk in leaks[:LEAK_LINES]:
        via = f", called from {lk['caller']}" if lk.get("caller") else ""
        lines.append(
            f"leak: {lk['frame']} ({lk['function']}{via}) keeps "
            f"{fb(lk['bytes_per_iteration'])} per iteration "
            f"({plural(lk['iterations'], 'iteration')}, {fb(lk['live_bytes'])} now)"
        )
    if len(leaks) > LEAK_LINES:
        lines.append(f"  ... and {len(leaks) - LEAK_LINES} more (--json lists them all)")
    return lines


LEAK_LINES = 5  # leaks named in the text summary (JSON has them all)


def _oom_lines(summary: dict[str, Any]) -> list[str]:
    """Every OOM of the recording (up to the --at event when one is given), two lines each."""
    fb = format_bytes
    ooms = summary.get("ooms") or []
    at = summary.get("at")
    if at:
        ooms = [o for o in ooms if o["event_index"] <= at["trace_row"]]
    lines = []
    if len(ooms) > 1:
        lines.append(f"{plural(len(ooms), 'OOM')}{' up to this event' if at else ''}:")
    for oom in ooms:
        event = oom.get("event", oom["event_index"])
        lines.append(
            f"OOM on device {oom['device']} at event {event}: {fb(oom['requested_bytes'])} "
            f"requested ({oom['pool_kind']} pool, stream "
            f"{oom['stream'] and format_address(oom['stream'])})"
        )
        lines.append(
            f"  {oom['verdict']}"
            + ("" if oom.get("exact", True) else f" (not exact: {oom['not_exact_reason']})")
        )
    outside = summary.get("outside_oom")
    if outside:
        dev = f" on device {outside['device']}" if outside.get("device") is not None else ""
        where = f" at {outside['where']}" if outside.get("where") else ""
        lines.append(f"OOM outside PyTorch's allocator{dev} ({outside['library']}){where}")
        lines.append(f"  {outside['verdict']}")
    later = summary.get("ooms_after_at") or 0
    if at and later:
        lines.append(
            f"({plural(later, 'later OOM')} after this event not shown: run without --at for all)"
        )
    return lines
