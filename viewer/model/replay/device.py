"""One device's replay: :class:`DeviceReplay` (event columns, curves, lifetimes,
layouts at any event) and :func:`replay_device`, which builds it.

Seeking is keyframes plus partial replay: the layout is stored every
``keyframe_every`` events, and :meth:`DeviceReplay.layout_after` replays at
most that many events from the nearest keyframe.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core.progress import Progress
from ..core.snapshot import Snapshot
from .curves import CurveIndex, _peaks, curves
from .layout import Layout
from .native_loop import (
    _core,
    _known_arrays,
    _layout_columns,
    _layout_from_columns,
    _native_rules,
    _run_native,
    native_available,
    use_native,
)
from .seed import _seed
from .state import Known, _apply, _State

KEYFRAME_BUDGET_BLOCKS = 20_000_000  # total block rows kept in keyframes
# The C loop replays ~50M events/s, so a seek can afford a longer stretch
# between keyframes: fewer of them, less memory.
NATIVE_KEYFRAME_MIN = 16_384
NATIVE_KEYFRAME_BUDGET_BLOCKS = 4_000_000
CHUNK_EVENTS = 1 << 20  # progress / cancel checkpoints of the native replay


@dataclass
class DeviceReplay:
    """Everything known about one device over the recorded window.

    Index ``k`` is the position of an event in this device's trace; the
    curves hold values *after* event ``k``; ``initial`` is the layout before
    event 0.  The event columns are views of the trace when one device has
    all the events (no copies); curves and lifetimes are computed on first
    use, so a headless summary of 10M events needs neither.
    """

    device: int
    rows: np.ndarray  # rows of Snapshot.trace for this device, in order
    action: np.ndarray  # the trace columns of those rows
    addr: np.ndarray
    size: np.ndarray  # requested bytes (trace events carry requested sizes)
    stream: np.ndarray
    stack: np.ndarray
    time_us: np.ndarray
    block_size: np.ndarray  # rounded size of the block an alloc/free touched
    pool: np.ndarray  # index into Snapshot.pools of the segment an event happened in (-1: none)
    initial: Layout
    keyframe_every: int
    keyframes: list[Layout] = field(repr=False, default_factory=list)  # after events K-1, 2K-1..
    settings: dict = field(default_factory=dict, repr=False)
    known: Known = field(default_factory=Known, repr=False)  # segment facts (see Known)
    inconsistencies: int = 0  # events (and seeded guesses) that could not be applied exactly
    seed_inconsistencies: int = 0  # of those: the final snapshot's own overlaps, in the seed
    native: bool = False  # seeks use the C loop
    # Layouts kept after chosen events (e.g. the OOMs), when there are no keyframes.
    emitted: dict = field(default_factory=dict, repr=False)
    _derived: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.rows)

    def derived(self, name: str):
        """What was already derived from the events under ``name`` ("curves",
        "lifetimes", "intervals"), or None: callers reuse it instead of computing again,
        and choose a cheaper path while it is not made."""
        return self._derived.get(name)

    @property
    def uses_native_loop(self) -> bool:
        """Whether this replay's passes can run in the compiled loop."""
        return self.native and native_available()

    # -- curves: bytes after each event, computed on first use ---------------
    def _curves(self) -> dict[str, np.ndarray]:
        c = self._derived.get("curves")
        if c is None:
            c = self._derived["curves"] = curves(self)
        return c

    @property
    def requested(self) -> np.ndarray:
        return self._curves()["requested"]

    @property
    def allocated(self) -> np.ndarray:
        return self._curves()["allocated"]

    @property
    def active(self) -> np.ndarray:
        return self._curves()["active"]

    @property
    def reserved(self) -> np.ndarray:
        return self._curves()["reserved"]

    # -- lifetimes: every free paired with its allocation ------------------------
    def _lifetimes(self) -> dict[str, np.ndarray]:
        c = self._derived.get("lifetimes")
        if c is None:
            pending = self._derived.pop("lifetimes_pending", None)
            c = pending.result() if pending is not None else None
            if c is None:
                c = link_lifetimes(self.action, self.addr, self.native)
            self._derived["lifetimes"] = c
        return c

    def start_lifetimes(self, executor) -> None:
        """Pair the frees with their allocations on ``executor`` (a thread: the C pass
        lets go of the GIL) while the caller goes on, e.g. with the replay's events: they
        read only the event columns.  :attr:`alloc_of` and the rest wait for it; until
        then :meth:`derived` says "lifetimes" are not made (callers that choose a path by
        it choose as if none had started)."""
        if self._derived.get("lifetimes") is None and "lifetimes_pending" not in self._derived:
            self._derived["lifetimes_pending"] = executor.submit(
                link_lifetimes, self.action, self.addr, self.native
            )

    @property
    def alloc_of(self) -> np.ndarray:
        """For free events: the alloc's index, -1 before recording."""
        return self._lifetimes()["alloc_of"]

    @property
    def freed_at(self) -> np.ndarray:
        """For alloc events: free_completed index, n if alive at the end."""
        return self._lifetimes()["freed_at"]

    @property
    def free_requested_at(self) -> np.ndarray:
        """For alloc events: free_requested index, n if none."""
        return self._lifetimes()["free_requested_at"]

    def layout_after(self, k: int) -> Layout:
        """The layout after event ``k`` (``k = -1``: before the first event)."""
        n = len(self.rows)
        k = min(max(int(k), -1), n - 1)
        hit = self.emitted.get(k)
        if hit is not None:
            return hit
        last = self._derived.get("last")  # the layout after the last event, kept by the build
        if last is not None and last[0] == k:
            return last[1]
        j = min((k + 1) // self.keyframe_every, len(self.keyframes))
        if j == 0:
            base, start = self.initial, 0
        else:  # keyframes[j - 1] is after event j*K - 1
            base, start = self.keyframes[j - 1], j * self.keyframe_every
        if start > k:
            return base
        if self.native:
            cap = self._native_state(base)
            _run_native(cap, self, start, k + 1)
            return _layout_from_columns(_core.layout(cap))
        st = _State.from_layout(base, self.settings, self.known)
        _apply(st, self, start, k + 1)
        return st.layout()

    def _native_state(self, layout: Layout):
        known = self._derived.get("known")
        if known is None:
            known = self._derived["known"] = _known_arrays(self.known)
        return _core.new_state(
            *_layout_columns(layout),
            *known,
            _native_rules(self.settings),
        )

    def peak(self, curve: str) -> tuple[int, int]:
        """(value, event index) of a curve's maximum; the first event that reaches it."""
        peaks = self._derived.get("peaks")
        if peaks is None:
            index = self._derived.get("curve_index")
            peaks = self._derived["peaks"] = (
                index.peaks if index is not None and len(self) else _peaks(self)
            )
        return peaks.get(curve, (0, -1))

    def curve_index(self):
        """The curves summarised for views (:class:`.curves.CurveIndex`), built once."""
        index = self._derived.get("curve_index")
        if index is None:
            index = self._derived["curve_index"] = CurveIndex(self)
        return index


def replay_device(
    snap: Snapshot,
    device: int,
    progress: Progress | None = None,
    keyframe_every: int | None = None,
    keyframes: bool = True,
    emit_at=(),
    native: bool | None = None,
    live: bool = False,
    on_seeded: Callable[[DeviceReplay], None] | None = None,
) -> DeviceReplay:
    """Replay ``device``'s trace of ``snap`` (see the module docstring).

    ``keyframes=False`` keeps no keyframes (a headless summary seeks at most
    to the events in ``emit_at``, whose layouts are kept); ``native`` picks
    the C loop or the Python one (``None``: the C loop when built).
    ``live=True`` keeps the replay state after the last event, so
    :func:`.incremental.extend_device` can apply events that arrive later.
    ``on_seeded(rep)`` is called once the replay's event columns and ``initial`` layout
    exist, before its events are applied: work that reads only those (the memory
    categories' lifetimes and phases) can start on another thread meanwhile (the C loop
    lets go of the GIL).  ``block_size``/``pool`` are filled only after it returns.
    """
    keyframes = keyframes or live
    progress = progress or Progress()
    trace = snap.trace
    native = use_native(native)
    if trace.single_device() == device:
        # One device holds every event: its columns are the trace's (views, no copies).
        n = len(trace.device)
        rows: np.ndarray = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
        cols = {
            c: getattr(trace, c) for c in ("action", "addr", "size", "stream", "stack", "time_us")
        }
    else:
        rows = np.flatnonzero(trace.device == device)
        if len(trace.device) < 2**31:
            rows = rows.astype(np.int32)
        n = len(rows)
        cols = {
            c: getattr(trace, c)[rows]
            for c in ("action", "addr", "size", "stream", "stack", "time_us")
        }
    settings = snap.allocator_settings
    initial_state = _seed(
        snap, device, cols["action"], cols["addr"], cols["size"], cols["stream"], native
    )
    initial = initial_state.layout()
    if keyframe_every is None:
        per_frame = max(initial.n_blocks, 64)
        if native:
            keyframe_every = max(
                NATIVE_KEYFRAME_MIN, int(n * per_frame // NATIVE_KEYFRAME_BUDGET_BLOCKS) + 1
            )
        else:
            keyframe_every = max(1024, int(n * per_frame // KEYFRAME_BUDGET_BLOCKS) + 1)
    rep = DeviceReplay(
        device=device,
        rows=rows,
        **cols,
        block_size=np.zeros(n, np.int64),
        pool=np.full(n, -1, np.int32),
        initial=initial,
        keyframe_every=keyframe_every,
        settings=settings,
        native=native,
    )
    rep.known = initial_state.known
    rep.seed_inconsistencies = initial_state.inconsistencies
    if on_seeded is not None:
        on_seeded(rep)
    # (a handful of moments: a set, not np.unique, whose first call imports numpy.ma)
    emit = np.asarray(sorted({int(k) for k in emit_at if 0 <= k < n}), dtype=np.int64)
    every = keyframe_every if keyframes else 0
    if native:
        cap = rep._native_state(initial)
        budget = 2 * NATIVE_KEYFRAME_BUDGET_BLOCKS
        start = 0
        while start < n:
            step = max(every, CHUNK_EVENTS // every * every) if every else CHUNK_EVENTS
            stop = min(n, start + step)
            kfs, layouts = _run_native(cap, rep, start, stop, every, emit, rep.block_size, rep.pool)
            rep.keyframes.extend(_layout_from_columns(c) for c in kfs)
            for k, cols_k in zip(emit[(emit >= start) & (emit < stop)].tolist(), layouts):
                rep.emitted[k] = _layout_from_columns(cols_k)
            # Layouts that grow far beyond the first one (odd or hostile traces): keep
            # every other keyframe, so their memory stays bounded.
            while every and sum(kf.n_blocks for kf in rep.keyframes) > budget:
                rep.keyframes = rep.keyframes[1::2]
                every *= 2
                rep.keyframe_every = every
            progress.update("replay", stop / n if n else 1.0)
            start = stop
        rep.inconsistencies = _core.inconsistencies(cap) + rep.seed_inconsistencies
        if n:
            rep._derived["last"] = (n - 1, _layout_from_columns(_core.layout(cap)))
        if live:
            rep._derived["state"] = cap
        del cap
    else:
        st = _State.from_layout(initial, settings, rep.known)
        stops = set(emit.tolist())
        cuts = sorted(
            {0, n}
            | {k + 1 for k in stops}
            | (set(range(every, n + 1, every)) if every else set())
            | set(range(0, n, 1 << 16))
        )
        for start, stop in itertools.pairwise(cuts):
            _apply(st, rep, start, stop, rep.block_size, rep.pool)
            if every and stop % every == 0:
                rep.keyframes.append(st.layout())
            if stop - 1 in stops:
                rep.emitted[stop - 1] = st.layout()
            progress.update("replay", stop / n if n else 1.0)
        rep.inconsistencies = st.inconsistencies + rep.seed_inconsistencies
        if n:
            rep._derived["last"] = (n - 1, st.layout())
        if live:
            rep._derived["state"] = st
    if not keyframes:
        # Seeks replay from the start: make the keyframe stride say so.
        rep.keyframe_every = max(n, 1)
    return rep


def link_lifetimes(
    action: np.ndarray, addr: np.ndarray, native: bool | None = None
) -> dict[str, np.ndarray]:
    """Pair every free with its allocation (by address, in order): ``alloc_of`` per
    free (-1: allocated before recording), ``freed_at`` / ``free_requested_at`` per
    alloc (n: never)."""
    n = len(action)
    dt = np.int32 if n < 2**31 - 1 else np.int64
    if use_native(native) and dt == np.int32 and hasattr(_core, "link_lifetimes_fill"):
        # The C pass writes every entry: fresh memory is touched once, not memset first.
        out = {
            "alloc_of": np.empty(n, dt),
            "freed_at": np.empty(n, dt),
            "free_requested_at": np.empty(n, dt),
        }
        _core.link_lifetimes_fill(
            np.ascontiguousarray(action, np.int8),
            np.ascontiguousarray(addr, np.int64),
            out["alloc_of"],
            out["freed_at"],
            out["free_requested_at"],
        )
        return out
    out = {
        "alloc_of": np.full(n, -1, dt),
        "freed_at": np.full(n, n, dt),
        "free_requested_at": np.full(n, n, dt),
    }
    if use_native(native) and dt == np.int32:
        _core.link_lifetimes(
            np.ascontiguousarray(action, np.int8),
            np.ascontiguousarray(addr, np.int64),
            out["alloc_of"],
            out["freed_at"],
            out["free_requested_at"],
        )
        return out
    alloc_of, freed_at, freq_at = out["alloc_of"], out["freed_at"], out["free_requested_at"]
    live: dict[int, int] = {}
    touch = np.flatnonzero(action <= 2)
    for k, act, a in zip(touch.tolist(), action[touch].tolist(), addr[touch].tolist()):
        if act == 0:
            live[a] = k
        elif act == 1:
            x = live.get(a, -1)
            alloc_of[k] = x
            if x >= 0:
                freq_at[x] = k
        else:
            x = live.pop(a, -1)
            alloc_of[k] = x
            if x >= 0:
                freed_at[x] = k
    return out
