"""Explain out-of-memory events: fragmentation or capacity?

For each ``oom`` trace event the allocator recorded the rounded request, the
stream and the device's free memory (``cudaMemGetInfo``).  Before raising, the
allocator already released every cached segment it could; what is still free
sits in partly used segments.  So:

* free bytes in the request's pool add up to the request but no single block
  does -> **fragmentation**;
* otherwise -> **capacity**: the cache has too little free memory, and a new
  segment could not be had, because the GPU is full or because the process is
  at a memory limit (``set_per_process_memory_fraction``) while the device
  still had room.

When the device itself was full and the file is an OOM dump whose sidecar
recorded the whole GPU at that instant (:mod:`.gpu_accounting`), the verdict
names who held it.  Where the request would have fitted without other processes
(or without this process's memory outside the allocator) that comes first, with
what the allocator could have had (its reserved plus the device's free memory),
and the fragmentation or capacity judgement follows within that: ``the GPU was
full because of another process: pid 4121 `python train_old.py` holds 18.20 GiB,
...; the allocator could have had ...``.  Otherwise the holders follow the
judgement: ``...; the GPU had too little left: 18.20 GiB held by ...``.  Never from
a dump taken later.

An OOM outside the allocator (cuBLAS, cuDNN, NCCL, an extension's ``cudaMalloc``)
leaves no ``oom`` trace event; the capture's sidecar says so
(``outside_allocator_oom``) with the whole GPU at that moment, and
:func:`outside_oom` explains it the same way.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..core.snapshot import Action, BlockState, Snapshot
from ..core.units import format_bytes as fb
from ..core.units import plural
from ..replay.integrity import Untrusted, check, untrusted_at
from .figures import Selection, fit_request, memory_stats
from .gpu_accounting import (
    SIDECAR_KEY,
    at_oom,
    from_record,
    holders_words,
    other_device,
    run_need_bytes,
    shortfall,
)

if TYPE_CHECKING:
    from ..replay.timeline import Timeline


@dataclass(frozen=True)
class OomReport:
    event_index: int  # row in Snapshot.trace
    device: int
    stream: int
    time_us: int
    requested_bytes: int  # the rounded block size the allocator looked for
    pool_kind: str  # "small" or "large"
    pool: int | None  # index into Snapshot.pools of the pool searched (the ordinary one)
    new_segment_bytes: int  # the cudaMalloc the allocator then attempted
    device_free_bytes: int  # free on the device per cudaMemGetInfo, -1 unknown
    free_in_pool_bytes: int  # free inside segments of the request's pool and stream
    free_segments: int  # how many of those segments hold free blocks
    largest_free_block_bytes: int
    reserved_bytes: int
    allocated_bytes: int
    events_after: int  # trace events on this device after the OOM
    kind: str  # "fragmentation" | "capacity" | "changed"
    verdict: str  # one line, for people
    is_last: bool
    # False when the OOM's event lies in a stretch of its device's timeline that is not
    # exact (integrity.Untrusted): the layout judged is estimated or inconsistent there,
    # so are the verdict's figures; not_exact_reason says why (the stretch's reason).
    exact: bool = True
    not_exact_reason: str | None = None
    # The device was full because of other processes (or this process's memory outside
    # the allocator) and the request would have fitted without them:
    # GpuShortfall.to_dict() (who, their bytes, what the allocator could have had).
    gpu_shortfall: dict | None = None
    # There: the freest other device and whether the run fits on it
    # (:func:`.gpu_accounting.other_device`), where the capture listed every device.
    other_device: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def concerns(self, selection: Selection) -> bool:
        """Is this OOM's request about segments in ``selection`` (its device, stream,
        pool kind and pool)?  Views show the request only beside the memory it concerns."""
        return not (
            (selection.device is not None and selection.device != self.device)
            or (selection.stream is not None and selection.stream != self.stream)
            or (
                selection.is_small is not None and selection.is_small != (self.pool_kind == "small")
            )
            or (selection.pool is not None and selection.pool != self.pool)
        )


def oom_reports(
    snap: Snapshot, timeline: "Timeline | None" = None, untrusted: "list[Untrusted] | None" = None
) -> list[OomReport]:
    """One report per ``oom`` trace event, in recorded order.

    Each verdict is judged on the block layout at the moment of its OOM:
    replayed from the trace when ``timeline`` is given; otherwise the final
    layout, which is exact for the last event (snapshots dumped from the OOM
    observer end with it) and marked ``changed`` when the layout moved on.

    With ``timeline``, a report whose event lies in an untrusted stretch
    (:func:`integrity.check`) is marked ``exact=False`` with the stretch's reason.
    ``untrusted``: that check's result when the caller has it already; otherwise it is
    run here, on the devices with an OOM only, and only when there is one.
    """
    trace = snap.trace
    rows = np.flatnonzero(trace.action == Action.OOM)
    if timeline is not None and untrusted is None and len(rows):
        untrusted = _check(timeline, set(np.unique(trace.device[rows]).tolist()))
    reports = []
    for i, row in enumerate(rows.tolist()):
        state = snap
        rep = timeline.replay(int(trace.device[row])) if timeline is not None else None
        if timeline is not None and rep is not None:
            k = int(np.searchsorted(rep.rows, row))
            state = timeline.snapshot_at(rep.device, k)
        report = _report(snap, state, row, is_last=i == len(rows) - 1, exact=rep is not None)
        if rep is not None and untrusted:
            u = untrusted_at(untrusted, rep.device, k)
            if u is not None:
                report = replace(report, exact=False, not_exact_reason=u.reason)
        reports.append(report)
    if reports:
        reports[-1] = _name_holders(snap, reports[-1])
    return reports


def _name_holders(snap: Snapshot, report: OomReport) -> OomReport:
    """``report`` with the device's holders named when the GPU itself was full, from the
    sidecar's record of the whole GPU taken at this OOM (an OOM dump's, nothing later):
    first when the request would have fitted without them (:func:`.gpu_accounting.shortfall`),
    the fragmentation or capacity judgement then within what the allocator could have
    had; after it otherwise."""
    if report.kind == "changed" or report.events_after:
        return report
    acc = at_oom(snap, report.device, report.device_free_bytes)
    if acc is None:
        return report
    free = report.device_free_bytes if report.device_free_bytes >= 0 else acc.free_bytes
    if free >= report.new_segment_bytes:
        return report  # the process was at its limit; the device was not full
    short = shortfall(acc, free, report.new_segment_bytes)
    elsewhere = other_device(
        snap,
        run_need_bytes(snap, report.device, acc, report.reserved_bytes + report.new_segment_bytes),
    )
    there = f"; {elsewhere['words']}" if elsewhere is not None else ""
    if short is not None:
        return replace(
            report,
            verdict=f"{short.words()}{there}; within the "
            f"{fb(short.could_have_bytes)}: {report.verdict}",
            gpu_shortfall=short.to_dict(),
            other_device=elsewhere,
        )
    verdict = f"{report.verdict}; the GPU had too little left: {acc.holders_phrase()}"
    others = acc.others_bytes + max(acc.outside_allocator_bytes or 0, 0)
    if others:
        verdict += (
            f"; without them {fb(free + others)} would have been free, still less "
            f"than the new {fb(report.new_segment_bytes)} segment"
        )
    return replace(report, verdict=verdict + there, other_device=elsewhere)


def _check(timeline: "Timeline", devices: set[int]) -> "list[Untrusted]":
    """integrity.check of ``devices``; a check that cannot run leaves every OOM of them
    marked not exact (never shown as exact on a trace that could not be checked)."""
    try:
        return check(timeline, devices)
    except (ValueError, KeyError, IndexError) as exc:
        return [
            Untrusted(
                d,
                0,
                len(timeline.devices[d]) - 1,
                "inconsistent",
                f"the integrity check could not run ({exc})",
            )
            for d in sorted(devices)
            if d in timeline.devices
        ]


def last_oom(snap: Snapshot, timeline: "Timeline | None" = None) -> OomReport | None:
    """The OOM that matters most: the last one recorded."""
    reports = oom_reports(snap, timeline)
    return reports[-1] if reports else None


def _report(snap: Snapshot, state: Snapshot, row: int, is_last: bool, exact: bool) -> OomReport:
    """``state`` holds the layout to judge (the final one, or replayed to the OOM)."""
    trace = snap.trace
    device = int(trace.device[row])
    stream = int(trace.stream[row])
    size = int(trace.size[row])
    events_after = int(np.count_nonzero(trace.device[row + 1 :] == device))
    fit = fit_request(state, size, device=device, stream=stream, rounded=True)
    pool = snap.ordinary_pool
    sel = Selection(device=device, pool=pool, stream=stream, is_small=fit.pool_kind == "small")
    seg_mask = sel.segment_mask(state) if pool is not None else np.zeros(len(state.segments), bool)
    blocks = state.blocks
    free_blocks = (
        (blocks.state == BlockState.FREE) & seg_mask[blocks.segment]
        if len(blocks)
        else np.zeros(0, bool)
    )
    free_segments = int(len(np.unique(blocks.segment[free_blocks])))
    dev_stats = memory_stats(state, Selection(device=device))
    device_free = int(trace.device_free[row])
    kind, verdict = _verdict(fit, free_segments, device_free, 0 if exact else events_after)
    return OomReport(
        event_index=row,
        device=device,
        stream=stream,
        time_us=int(trace.time_us[row]),
        requested_bytes=size,
        pool_kind=fit.pool_kind,
        pool=pool,
        new_segment_bytes=fit.new_segment_bytes,
        device_free_bytes=device_free,
        free_in_pool_bytes=fit.free_bytes,
        free_segments=free_segments,
        largest_free_block_bytes=fit.largest_free_block_bytes,
        reserved_bytes=dev_stats.reserved_bytes,
        allocated_bytes=dev_stats.allocated_bytes,
        events_after=events_after,
        kind=kind,
        verdict=verdict,
        is_last=is_last,
    )


def _verdict(fit, free_segments: int, device_free: int, events_after: int) -> tuple[str, str]:
    req = fit.rounded_bytes
    if events_after and fit.fits:
        return (
            "changed",
            "the layout changed after this OOM "
            f"({plural(events_after, 'later event')}): "
            f"a {fb(req)} block would fit now, so the map shows a later state",
        )
    if fit.free_bytes >= req:
        return (
            "fragmentation",
            f"fragmentation: {fb(fit.free_bytes)} is free inside {free_segments} "
            f"segment{'s' if free_segments != 1 else ''} of the {fit.pool_kind} pool, "
            f"but the largest free block is "
            f"{fb(fit.largest_free_block_bytes)} < {fb(req)} requested",
        )
    if fit.free_bytes == 0:
        head = "capacity: every segment is full"
    else:
        head = (
            f"capacity: only {fb(fit.free_bytes)} is free in the cache, "
            f"less than the {fb(req)} requested"
        )
    if device_free < 0:
        tail = f"and no new {fb(fit.new_segment_bytes)} segment could be allocated"
    elif device_free >= fit.new_segment_bytes:
        tail = (
            f"and the process is at its memory limit (the GPU still had {fb(device_free)} "
            f"free, but a new {fb(fit.new_segment_bytes)} segment was refused)"
        )
    else:
        tail = (
            f"and the GPU has too little free memory ({fb(device_free)} free on the device, "
            f"a new segment needs {fb(fit.new_segment_bytes)})"
        )
    return "capacity", f"{head} {tail}"


# A frame of an installed package (torch, transformers, ...), not the program's own code.
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
#: The sidecar's field the capture writes for an OOM outside the allocator.
OUTSIDE_KEY = "outside_allocator_oom"
# What each library failed to make, by a call named in its error (else its memory).
_WHAT_FAILED = (
    ("cublasLtCreate", "cuBLASLt could not create its handle"),
    ("cublasCreate", "cuBLAS could not create its handle"),
    ("cudnnCreate", "cuDNN could not create its handle"),
)
_LIBRARY_FAILED = {
    "cuBLAS": "cuBLAS could not allocate its memory",
    "cuBLASLt": "cuBLASLt could not allocate its workspace",
    "cuDNN": "cuDNN could not allocate its workspace",
    "NCCL": "NCCL could not allocate its buffers",
    "CUDA": "a CUDA allocation outside PyTorch's allocator failed",
}


@dataclass(frozen=True)
class OutsideOom:
    """An out-of-memory error raised outside PyTorch's caching allocator (a library's
    handle or workspace, NCCL's buffers, an extension's ``cudaMalloc``), from the
    capture's sidecar: the trace holds no ``oom`` event for it."""

    library: str  # cuBLAS, cuBLASLt, cuDNN, NCCL, CUDA
    error: str  # the exception's first line
    exception_type: str | None
    stack: tuple[str, ...]  # "file.py:123 function", innermost last
    device: int | None
    device_free_bytes: int | None  # free on the GPU at that moment (None: not recorded)
    reserved_bytes: int | None  # PyTorch's allocator on that device then
    allocated_bytes: int | None
    verdict: str  # one line, for people: what failed, the GPU's free memory, who held it
    # The freest other device and whether the run fits on it (gpu_accounting.other_device)
    other_device: dict | None = None

    @property
    def where(self) -> str | None:
        """Where the program died: its innermost frame outside installed packages (torch's
        own frames say little about which line to change), else the innermost."""
        own = [f for f in self.stack if not _INSTALLED.search(f)]
        return own[-1] if own else self.stack[-1] if self.stack else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stack"] = list(self.stack)
        d["where"] = self.where
        return d


def outside_oom(snap: Snapshot) -> OutsideOom | None:
    """The OOM outside the allocator that ``snap``'s dump was taken at, explained from the
    sidecar (``outside_allocator_oom`` and the whole GPU at that moment); None when the
    dump was not taken at one."""
    side = snap.sidecar
    if not isinstance(side, Mapping) or side.get("reason") != "oom":
        return None
    o = side.get(OUTSIDE_KEY)
    if not isinstance(o, Mapping) or not isinstance(o.get("error"), str):
        return None
    library = str(o.get("library") or "CUDA")
    error = " ".join(o["error"].split())
    what = next((w for call, w in _WHAT_FAILED if call in error), None) or _LIBRARY_FAILED.get(
        library, f"{library} could not allocate GPU memory"
    )
    g = side.get(SIDECAR_KEY)
    acc = from_record(g, snap, "oom") if isinstance(g, Mapping) else None
    device = (
        acc.device
        if acc is not None and acc.known
        else side.get("device")
        if isinstance(side.get("device"), int)
        else None
    )
    parts = [f"{what} ({error})"]
    free = reserved = allocated = None
    if device is not None:
        stats = memory_stats(snap, Selection(device=device))
        reserved, allocated = stats.reserved_bytes, stats.allocated_bytes
    if acc is not None and acc.known:
        free = acc.free_bytes
        parts.append(f"{fb(free)} free on the GPU")
        others = acc.holders_by_size()
        if others:
            parts.append(holders_words(others))
        unused = f"{fb(acc.reserved_bytes - (allocated or 0))} of it unused"
        whole = releasable_bytes(snap, acc.device) if acc.device is not None else 0
        if whole:
            unused += (
                f", {fb(whole)} in wholly free segments that "
                "torch.cuda.empty_cache() returns to the GPU"
            )
        mine = f"this process {fb(acc.reserved_bytes)} reserved by PyTorch ({unused})"
        if acc.outside_allocator_bytes is not None:
            mine += f", {fb(acc.outside_allocator_bytes)} outside the allocator"
        parts.append(mine)
        if others:
            held = sum(h.used_bytes or 0 for h in others)
            who = f"pid {others[0].pid}" if len(others) == 1 else "them"
            parts.append(f"without {who} the GPU would have had {fb(free + held)} free")
    else:
        why = acc.reason if acc is not None else "its sidecar has no record of the whole GPU"
        parts.append(f"the GPU's free memory is not known ({why})")
    elsewhere = (
        other_device(snap, run_need_bytes(snap, acc.device, acc, acc.reserved_bytes))
        if acc is not None and acc.known and acc.device is not None
        else None
    )
    if elsewhere is not None:
        parts.append(elsewhere["words"])
    stack = tuple(str(f) for f in o.get("stack") or () if isinstance(f, str))
    return OutsideOom(
        library,
        error,
        o.get("exception_type") if isinstance(o.get("exception_type"), str) else None,
        stack,
        device,
        free,
        reserved,
        allocated,
        "; ".join(parts),
        elsewhere,
    )


def releasable_bytes(snap: Snapshot, device: int) -> int:
    """Bytes of ``device``'s segments with no block in use (every block free): what
    ``torch.cuda.empty_cache()`` would hand back to the GPU at the dump's instant."""
    segs, blocks = snap.segments, snap.blocks
    on = segs.device == device
    if not on.any():
        return 0
    busy = np.zeros(len(segs), bool)
    if len(blocks):
        busy[blocks.segment[blocks.state != BlockState.FREE]] = True
    return int(segs.total_size[on & ~busy].sum())
