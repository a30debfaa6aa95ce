"""The public entry: :class:`MemoryBreakdown`, what one device's memory is.

    bd = MemoryBreakdown.build(snap, timeline, device)
    bd.split_at(k)        # {"parameter": bytes, ...}: requested bytes live after event k
    bd.iterations         # [Iteration]: start/end event, peak, phase of the peak
    bd.leaks              # [Leak]: largest growth first
    bd.category, bd.reason  # per allocation (bd.intervals), int8 columns

All columns; the only Python loops run over interned stacks, frames,
iterations and leak candidates, never over events or allocations.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..core.progress import Progress
from ..core.snapshot import Snapshot
from ..replay import DeviceReplay
from ..replay.curves import curve_starts, native_requested_chunk, requested_curve_of
from ..replay.incremental import is_live
from ..replay.timeline import Intervals, Timeline, build_timeline
from . import native_passes as _native
from . import stack_kinds as sk
from .classify import classify
from .frameworks import mark_frameworks
from .generation import Generation, find_generation, merge_requests
from .graph_pools import CaptureOutputs
from .iterations import PHASE_NAMES, Iteration, Phases, find_phases
from .leaks import Leak, find_leaks, leak_frames
from .lean import lean_intervals
from .reasons import (
    CATEGORY_NAMES,
    COMMUNICATION,
    KV_CACHE,
    PARAMETER_GATHERED,
    REASONS,
    reason_id,
)
from .sharded import SHARDED, Sharding, is_sharded, world_size

N_CATEGORIES = len(CATEGORY_NAMES)
# Below this many events a second thread costs more than it saves.
OVERLAP_MIN_EVENTS = 1 << 20


def requested_curve(iv: Intervals, n: int, rep: DeviceReplay | None = None) -> np.ndarray:
    """Requested bytes after each of ``n`` events: the replay's own curve - reused when the
    views already made it, else only this one of its four curves (the C pass), else from
    the allocations' lifetimes (the same numbers; tests check they agree)."""
    if rep is not None:
        made = requested_curve_of(rep)
        if made is not None:
            return made
    if n == 0:
        return np.zeros(0, np.int64)
    s = np.maximum(iv.start, 0)
    w = iv.requested.astype(np.float64)  # exact below 2**53 bytes
    d = np.bincount(s, weights=w, minlength=n + 1)[: n + 1]
    d -= np.bincount(np.minimum(iv.end, n), weights=w, minlength=n + 1)[: n + 1]
    return np.cumsum(d[:n]).astype(np.int64)


class RequestedCurve:
    """The requested-bytes curve of one device, materialised only when asked
    (:attr:`MemoryBreakdown.requested`, files without frames): the classification needs
    only each iteration's peak, found in chunks of the C pass (an 8 MB buffer reused, not
    80 MB of fresh memory at 10M events)."""

    CHUNK = 1 << 20

    def __init__(self, iv: Intervals, n: int, rep: DeviceReplay | None = None) -> None:
        self._args = (iv, n, rep)
        self._array: np.ndarray | None = None

    def array(self) -> np.ndarray:
        """Requested bytes after each event (int64), see :func:`requested_curve`."""
        if self._array is None:
            self._array = requested_curve(*self._args)
        return self._array

    def span_peaks(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(maximum, first event reaching it) of each span ``[lo_i, hi_i)`` (sorted,
        non-overlapping, non-empty)."""
        _iv, n, rep = self._args
        top = np.empty(len(lo), np.int64)
        peak = np.empty(len(lo), np.int64)
        if (
            rep is not None
            and self._array is None
            and len(lo)
            and rep.derived("curves") is None
            and _native.available()
        ):
            # One C pass from event 0 to the last span's end, no buffer of the curve.
            return _native.span_peaks(rep.action, rep.size, curve_starts(rep)["requested"], lo, hi)
        native = rep is not None and rep.uses_native_loop and rep.derived("curves") is None
        if self._array is not None or not native or not len(lo) or rep is None:
            req = self.array()
            for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
                k = a + int(np.argmax(req[a:b]))  # argmax: the first event at the maximum
                peak[i] = k
                top[i] = req[k]
            return top, peak
        carry = curve_starts(rep)["requested"]
        buf = np.empty(min(self.CHUNK, n), np.int64)
        act = np.ascontiguousarray(rep.action, np.int8)
        bsz = np.ascontiguousarray(rep.block_size, np.int64)
        size = np.ascontiguousarray(rep.size, np.int64)
        top[:] = np.iinfo(np.int64).min
        i, los, his = 0, lo.tolist(), hi.tolist()
        end = his[-1]
        for c0 in range(0, end, self.CHUNK):  # from event 0: the curve is a running sum
            c1 = min(c0 + self.CHUNK, n)
            out = buf[: c1 - c0]
            native_requested_chunk(act[c0:c1], bsz[c0:c1], size[c0:c1], carry, out)
            carry = int(out[-1])
            # Every span that overlaps [c0, c1): its part in this chunk.
            j = i
            while j < len(los) and los[j] < c1:
                a, b = max(los[j], c0), min(his[j], c1)
                if b > a:
                    k = a - c0 + int(np.argmax(out[a - c0 : b - c0]))
                    if out[k] > top[j]:  # strictly: the first event keeps it
                        top[j] = out[k]
                        peak[j] = c0 + k
                if his[j] <= c1:
                    i = j + 1  # done with this span
                j += 1
        return top, peak


@dataclass
class MemoryBreakdown:
    """Categories of every allocation of one device, its iterations and leaks."""

    snap: Snapshot
    device: int
    n_events: int
    intervals: Intervals  # every allocation of the device (timeline.intervals order)
    category: np.ndarray  # int8 per interval: index into CATEGORY_NAMES
    reason: np.ndarray  # int8 per interval: index into REASONS
    phases: Phases  # per event: phase, iteration, evidence
    leaks: list[Leak]
    curve: RequestedCurve  # the requested bytes after each event (= the replay's curve)
    _by_start: dict = field(default_factory=dict, repr=False)
    _capture_outputs: CaptureOutputs | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        snap: Snapshot,
        timeline: Timeline,
        device: int | None = None,
        progress: Progress | None = None,
        intervals_of_device: Intervals | None = None,
        prepared: "Prepared | None" = None,
    ) -> "MemoryBreakdown":
        """Classify every allocation of ``device`` (default: the first with events).

        ``intervals_of_device``: ``timeline.intervals(replay)`` when the caller has it
        already (the GUI's Document caches it): not computed twice.  ``prepared``: the
        part made while the replay ran (:func:`prepare` on this device's replay)."""
        progress = progress or Progress()
        if device is None:
            device = min(timeline.devices) if timeline.devices else 0
        rep = timeline.replay(device)
        if rep is None:
            raise KeyError(f"device {device} has no trace events")
        progress.update("categories", 0.0)
        if prepared is None or prepared.rep is not rep:
            prepared = prepare(snap, rep, intervals_of_device)
        iv, ph, curve, n = prepared.intervals, prepared.phases, prepared.curve, len(rep)
        gen = find_generation(iv, ph, n)
        if gen is not None:  # the requests replace their per-token iterations
            ph = merge_requests(ph, gen.requests)
        progress.update("categories", 0.6)
        category, reason = classify(iv, ph, n)
        mark_frameworks(snap, rep.rows, iv, ph, category, reason)
        if gen is not None:
            _mark_kv_cache(gen, category, reason)
        progress.update("categories", 0.9)
        leaks = (
            find_leaks(
                snap,
                iv,
                ph.iterations,
                ph.iteration,
                n - 1,
                leak_frames(snap),
                exclude=category == KV_CACHE if gen is not None else None,
            )
            if n
            else []
        )
        _mark_leaked(leaks, category, reason)
        progress.update("categories", 1.0)
        return cls(
            snap=snap,
            device=device,
            n_events=n,
            intervals=iv,
            category=category,
            reason=reason,
            phases=ph,
            leaks=leaks,
            curve=curve,
        )

    # -- queries ------------------------------------------------------------------------
    @property
    def requested(self) -> np.ndarray:
        """Requested bytes after each event (int64; made on first read)."""
        return self.curve.array()

    @property
    def iterations(self) -> list[Iteration]:
        return self.phases.iterations

    def live(self, k: int) -> np.ndarray:
        """Interval ids live after event ``k``."""
        iv = self.intervals
        return np.flatnonzero((iv.start <= k) & (iv.end > k))

    def bytes_at(self, k: int) -> np.ndarray:
        """Requested bytes live after event ``k``, per category (int64, CATEGORY_NAMES order);
        they add up to the requested curve at ``k``."""
        iv = self.intervals
        live = (iv.start <= k) & (iv.end > k)
        return np.bincount(
            self.category[live], weights=iv.requested[live], minlength=N_CATEGORIES
        ).astype(np.int64)

    def split_at(self, k: int) -> dict[str, int]:
        """``bytes_at`` as a dict: category name -> bytes."""
        return dict(zip(CATEGORY_NAMES, self.bytes_at(k).tolist()))

    def guessed_bytes_at(self, k: int) -> int:
        """Of the bytes live after ``k``, those whose category is a guess."""
        iv = self.intervals
        live = (iv.start <= k) & (iv.end > k)
        guess = np.array([r.guess for r in REASONS], bool)[self.reason[live]]
        return int(iv.requested[live][guess].sum())

    def reasons_at(self, k: int) -> dict[str, int]:
        """Bytes live after ``k`` per reason code (how each was decided)."""
        iv = self.intervals
        live = (iv.start <= k) & (iv.end > k)
        b = np.bincount(self.reason[live], weights=iv.requested[live], minlength=len(REASONS))
        return {REASONS[i].code: int(v) for i, v in enumerate(b.tolist()) if v}

    def categories_of_addresses(self, k: int, addrs: np.ndarray) -> np.ndarray:
        """Category (int8, -1: no allocation starts there) of the allocation live after
        event ``k`` at each block address of ``addrs`` - to colour a segment map or the
        allocations table of the layout at ``k`` by category."""
        addrs = np.asarray(addrs, np.int64)
        live = self.live(k)
        out = np.full(len(addrs), -1, np.int8)
        if not len(live) or not len(addrs):
            return out
        order = np.argsort(self.intervals.addr[live], kind="stable")
        keys = self.intervals.addr[live][order]
        pos = np.minimum(np.searchsorted(keys, addrs), len(keys) - 1)
        hit = keys[pos] == addrs
        out[hit] = self.category[live[order[pos[hit]]]]
        return out

    def explain(self, i: int) -> str:
        """One line: allocation ``i``'s category, how it was decided, whether it is a guess."""
        r = REASONS[int(self.reason[i])]
        return f"{CATEGORY_NAMES[r.category]}: {r.text}" + (
            " (a guess)" if r.guess and "guess" not in r.text else ""
        )

    def leaked_bytes_at(self, k: int) -> int:
        """Of the bytes live after ``k``, those kept by a leaking line (see ``leaks``)."""
        if not self.leaks:
            return 0
        ids = np.concatenate([lk.allocations for lk in self.leaks])
        iv = self.intervals
        live = (iv.start[ids] <= k) & (iv.end[ids] > k)
        return int(iv.requested[ids[live]].sum())

    def category_curves(self, events: np.ndarray) -> np.ndarray:
        """Requested bytes per category after each of ``events`` (shape (N_CATEGORIES,
        len(events))),
        in O((allocations + len(events)) log allocations): for the stacked timeline."""
        events = np.asarray(events, np.int64)
        out = np.zeros((N_CATEGORIES, len(events)), np.int64)
        for c in range(N_CATEGORIES):
            out[c] = self.category_curve(c, events)
        return out

    def category_curve(self, c: int, events: np.ndarray) -> np.ndarray:
        """Requested bytes of category ``c`` after each of ``events`` (its allocations
        sorted by start and by end once, then kept)."""
        cached = self._by_start.get(c)
        if cached is None:
            iv = self.intervals
            ids = np.flatnonzero(self.category == c)
            s_order = np.argsort(iv.start[ids], kind="stable")
            e_order = np.argsort(iv.end[ids], kind="stable")
            req = iv.requested[ids]
            cached = self._by_start[c] = (
                iv.start[ids][s_order],
                np.concatenate(([0], np.cumsum(req[s_order]))),
                iv.end[ids][e_order],
                np.concatenate(([0], np.cumsum(req[e_order]))),
            )
        starts, s_cum, ends, e_cum = cached
        born = s_cum[np.searchsorted(starts, events, "right")]
        gone = e_cum[np.searchsorted(ends, events, "right")]
        return born - gone

    def most_live(self, c: int) -> int:
        """The most requested bytes of category ``c`` live at once (after one of its
        allocations: the curve only rises there)."""
        starts = self.intervals.start[self.category == c]
        if not len(starts):
            return 0
        return int(self.category_curve(c, np.unique(np.maximum(starts, 0))).max())

    def sharding(self, event: int) -> Sharding | None:
        """What this rank of a sharded (FSDP) run holds at ``event``; None: not sharded."""
        if not is_sharded(self.category, self.reason):
            return None
        split = self.split_at(event)
        return Sharding(
            world_size=world_size(self.snap.sidecar),
            event=event,
            shards={k: int(split.get(k, 0)) for k in SHARDED},
            gathered_peak=self.most_live(PARAMETER_GATHERED),
            communication_peak=self.most_live(COMMUNICATION),
        )

    def capture_outputs(self) -> CaptureOutputs:
        """The CUDA graphs' capture outputs of this device (:mod:`.graph_pools`; kept)."""
        if self._capture_outputs is None:
            self._capture_outputs = CaptureOutputs(
                self.intervals, self.n_events, self.snap.pools, self.phases, self.category
            )
        return self._capture_outputs

    def graph_held_at(self, k: int) -> dict[str, int]:
        """Bytes CUDA graphs' outputs hold after event ``k`` in their private pools while
        the allocator counts them free, per category (not part of :meth:`split_at`)."""
        held = self.capture_outputs().held_at(k)
        return {name: int(v) for name, v in zip(CATEGORY_NAMES, held.tolist()) if v}

    def phase_at(self, k: int) -> str:
        return PHASE_NAMES[int(self.phases.phase[k])]

    # -- reports ------------------------------------------------------------------------
    def summary_dict(self, peak_event: int | None, at: int | None = None) -> dict:
        """The ``vramscope summary --json`` fields of what the memory is."""
        out = {
            "categories_device": self.device,
            "categories_at_peak": self.split_at(peak_event)
            if peak_event is not None and self.n_events
            else None,
            "categories_at": self.split_at(at) if at is not None else None,
            "graph_held_at_peak": self.graph_held_at(peak_event)
            if peak_event is not None and self.n_events
            else {},
            "graph_held_at": self.graph_held_at(at) if at is not None else {},
            "categories_at_device": self.device if at is not None else None,
            "categories_guessed_bytes_at_peak": self.guessed_bytes_at(peak_event)
            if peak_event is not None and self.n_events
            else None,
            "leaked_bytes_at_peak": self.leaked_bytes_at(peak_event)
            if peak_event is not None and self.n_events
            else 0,
            "iterations": [it.to_dict() for it in self.iterations],
            "leaks": [lk.to_dict() for lk in self.leaks],
        }
        return out


@dataclass
class Prepared:
    """The part of a breakdown that reads only a replay's event columns and its layout
    before the first event: the allocations (lean intervals) and the phases.  Made by
    :func:`prepare`, possibly while the replay applies its events (its ``on_seeded``);
    the sizes the replay fills in (``block_size``, ``pool``) are read lazily, later."""

    rep: DeviceReplay
    intervals: Intervals
    phases: Phases
    curve: RequestedCurve


def prepare(
    snap: Snapshot, rep: DeviceReplay, intervals_of_device: Intervals | None = None
) -> Prepared:
    """The allocations and phases of ``rep`` (see :class:`Prepared`)."""
    kinds = sk.stack_kinds(snap)
    n = len(rep)
    if intervals_of_device is None and _overlap(rep):
        # The lifetimes (the C pass, which lets go of the GIL) and the intervals on a
        # second thread while this one finds the phases: they read only the replay's
        # event columns (the curve's peaks come from the C pass, not the intervals).
        # The intervals arrive from the thread below; set before anything reads them.
        curve = RequestedCurve(cast(Intervals, None), n, rep)
        with ThreadPoolExecutor(1) as pool:
            job = pool.submit(lean_intervals, rep)
            ph = find_phases(snap, rep, kinds, curve)
            iv = job.result()
        curve._args = (iv, n, rep)
    else:
        iv = intervals_of_device if intervals_of_device is not None else lean_intervals(rep)
        curve = RequestedCurve(iv, n, rep)
        ph = find_phases(snap, rep, kinds, curve)
    return Prepared(rep, iv, ph, curve)


def replay_and_prepare(
    snap: Snapshot, emit: dict[int, list[int]] | None = None, progress: Progress | None = None
) -> tuple[Timeline, Future | None]:
    """``build_timeline(snap, keyframes=False, emit=emit)`` and, for a trace of one device
    on a machine of several cores, the first part of its breakdown (:func:`prepare`: the
    allocations and phases, which read only the event columns) made on another thread
    while the replay applies the events, the frees' pairing with their allocations on a
    third meanwhile (the integrity check's first need after the replay); the future's
    answer is :meth:`MemoryBreakdown.build`'s ``prepared`` (None: made there)."""
    trace = snap.trace
    one_device = trace.single_device() is not None
    if not one_device or (os.cpu_count() or 1) < 2 or len(trace.device) < OVERLAP_MIN_EVENTS:
        return build_timeline(snap, progress, keyframes=False, emit=emit), None
    pool = ThreadPoolExecutor(1)
    pairs = ThreadPoolExecutor(1)
    started: list[Future] = []

    def on_seeded(rep) -> None:
        started.append(pool.submit(prepare, snap, rep))
        rep.start_lifetimes(pairs)

    try:
        timeline = build_timeline(snap, progress, keyframes=False, emit=emit, on_seeded=on_seeded)
    finally:
        pool.shutdown(wait=False)
        pairs.shutdown(wait=False)
    return timeline, (started[0] if started else None)


def _overlap(rep: DeviceReplay) -> bool:
    """Whether the intervals can be made on a second thread while the phases are found:
    several cores, a large trace, the native curve pass (the phases then never read the
    intervals) and lifetimes not made yet (the work that overlaps)."""
    return (
        (os.cpu_count() or 1) > 1
        and len(rep) >= OVERLAP_MIN_EVENTS
        and rep.uses_native_loop
        and rep.derived("curves") is None
        and rep.derived("lifetimes") is None
        and rep.derived("intervals") is None
        and not is_live(rep)
    )


def _mark_kv_cache(gen: Generation, category: np.ndarray, reason: np.ndarray) -> None:
    """The generation requests' key/value cache (library workspaces stay what they are)."""
    keep = {reason_id("workspace_cublas"), reason_id("workspace_guess")}
    for ids, code in ((gen.carried, "kv_cache_carried"), (gen.last_step, "kv_cache_last_step")):
        ids = ids[~np.isin(reason[ids], list(keep))]
        reason[ids] = reason_id(code)
        category[ids] = KV_CACHE


def _mark_leaked(leaks: list[Leak], category: np.ndarray, reason: np.ndarray) -> None:
    """What a leaking line keeps and the lifetimes could not place (an input that never
    goes, a 'temporary' alive at the end) is named for what it is: kept by the leak."""
    if not leaks:
        return
    from .reasons import INPUT, TEMPORARY, UNKNOWN, reason_id

    ids = np.concatenate([lk.allocations for lk in leaks])
    ids = ids[np.isin(category[ids], (INPUT, TEMPORARY, UNKNOWN))]
    reason[ids] = reason_id("leak_kept")
    category[ids] = UNKNOWN
