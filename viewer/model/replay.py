"""Replay an allocator trace: the block layout and memory curves at every event.

Trace events carry *requested* sizes and addresses; the block sizes follow
from the caching allocator's rules (:mod:`.allocator_rules`): an allocation
takes the start of a free block, rounded, and splits off the rest only when
the remainder is worth keeping (``should_split``); a completed free merges
with free neighbours.  Replaying those rules over the known addresses gives
the exact layout at every moment.

The recording may have started late or its ring buffer may have wrapped.
The state before the first event is therefore seeded from the final
snapshot, walking back: segments created or freed inside the window are
undone, blocks freed inside the window without an allocation there were
"allocated before recording", and blocks alive at the end without an
allocation in the window were alive throughout.  Blocks allocated inside the
window are exact; a block allocated before the window and freed inside it
has its size inferred by rounding (marked ``alloc_event == -1``).

Seeking is keyframes plus partial replay: the layout is stored every
``keyframe_every`` events, and :meth:`DeviceReplay.layout_after` replays at
most that many events from the nearest keyframe.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from . import allocator_rules as rules
from .progress import Progress
from .snapshot import Action, Blocks, BlockState, Segments, Snapshot

from ._native import native_module, pure_python_requested

# The C inner loop (viewer/model/_native/replay_core.c); the Python one is the
# reference and the fallback (no compiler, or VRAMSCOPE_PURE_PYTHON=1).
_core = native_module("replay_core")

ALLOCATED, PENDING, FREE = int(BlockState.ALLOCATED), int(BlockState.PENDING_FREE), int(BlockState.FREE)
BEFORE_RECORDING = -1
KEYFRAME_BUDGET_BLOCKS = 20_000_000  # total block rows kept in keyframes
# The C loop replays ~50M events/s, so a seek can afford a longer stretch
# between keyframes: fewer of them, less memory.
NATIVE_KEYFRAME_MIN = 16_384
NATIVE_KEYFRAME_BUDGET_BLOCKS = 4_000_000
CHUNK_EVENTS = 1 << 20  # progress / cancel checkpoints of the native replay
_LAYOUT_DTYPES = (np.int64, np.int64, np.int64, np.bool_, np.int32, np.bool_,
                  np.int64, np.int64, np.int64, np.int8, np.int32, np.int64)


def native_available() -> bool:
    """Whether the compiled replay loop is importable."""
    return _core is not None


def use_native(native: bool | None = None) -> bool:
    """Replay with the C loop? ``None``: yes when built, unless ``VRAMSCOPE_PURE_PYTHON=1``."""
    if native is None:
        native = not pure_python_requested()
    return bool(native) and _core is not None


@dataclass
class Layout:
    """Segments and blocks at one instant, sorted by address (numpy columns)."""

    seg_addr: np.ndarray
    seg_size: np.ndarray
    seg_stream: np.ndarray
    seg_small: np.ndarray
    seg_pool: np.ndarray
    seg_expandable: np.ndarray
    blk_addr: np.ndarray
    blk_size: np.ndarray
    blk_requested: np.ndarray
    blk_state: np.ndarray
    blk_stack: np.ndarray
    blk_alloc: np.ndarray  # local event index of the allocation, -1: before recording

    @property
    def n_blocks(self) -> int:
        return len(self.blk_addr)


class _State:
    """Mutable allocator state of one device during a replay."""

    def __init__(self, settings: dict) -> None:
        self.settings = settings
        self.segs: dict[int, list] = {}  # addr -> [size, stream, small, pool, expandable]
        self.seg_starts: list[int] = []
        self.seg_blocks: dict[int, list[int]] = {}  # seg addr -> sorted block addrs
        self.blocks: dict[int, list] = {}  # addr -> [size, state, requested, stack, alloc, seg]
        self.inconsistencies = 0
        self._round_cache: dict[int, int] = {}
        # Segment facts the trace does not carry (pool, small/large of an
        # expandable segment), from the final snapshot, by address.
        self.known: dict[int, tuple[bool, int]] = {}

    # -- segments ---------------------------------------------------------
    def add_segment(self, addr, size, stream, small, pool, expandable) -> None:
        if addr in self.segs:
            self.remove_segment(addr)
        # Segments never overlap (cudaMalloc'd ranges): an inconsistent trace's segment
        # inside another is not added, one running into the next is cut short.
        i = bisect.bisect_left(self.seg_starts, addr)
        if i > 0 and self.seg_starts[i - 1] + self.segs[self.seg_starts[i - 1]][0] > addr:
            self.inconsistencies += 1
            return
        if i < len(self.seg_starts) and addr + size > self.seg_starts[i]:
            self.inconsistencies += 1
            size = self.seg_starts[i] - addr
        self.segs[addr] = [size, stream, small, pool, expandable]
        bisect.insort(self.seg_starts, addr)
        self.seg_blocks[addr] = []
        if size:
            self._put_block(addr, [size, FREE, 0, -1, BEFORE_RECORDING, addr])

    def remove_segment(self, addr) -> None:
        seg = self.segs.pop(addr, None)
        if seg is None:
            self.inconsistencies += 1
            return
        for b in self.seg_blocks.pop(addr):
            block = self.blocks.pop(b)
            if block[1] != FREE:
                self.inconsistencies += 1
        i = bisect.bisect_left(self.seg_starts, addr)
        del self.seg_starts[i]

    def segment_containing(self, addr: int) -> int | None:
        i = bisect.bisect_right(self.seg_starts, addr) - 1
        if i < 0:
            return None
        start = self.seg_starts[i]
        return start if addr < start + self.segs[start][0] else None

    def _expandable_ending_at(self, addr: int) -> int | None:
        """The expandable segment whose mapped range ends at ``addr`` (it grows there)."""
        i = bisect.bisect_right(self.seg_starts, addr) - 1
        if i < 0:
            return None
        start = self.seg_starts[i]
        seg = self.segs[start]
        return start if seg[4] and start + seg[0] == addr else None

    # -- blocks -----------------------------------------------------------
    def _put_block(self, addr, block) -> None:
        if addr in self.blocks:  # only in inconsistent traces: the newer block wins
            self._drop_block(addr)
        self.blocks[addr] = block
        bisect.insort(self.seg_blocks[block[5]], addr)

    def _drop_block(self, addr) -> list:
        block = self.blocks.pop(addr)
        lst = self.seg_blocks.get(block[5], [])
        i = bisect.bisect_left(lst, addr)
        if i < len(lst) and lst[i] == addr:
            del lst[i]
        return block

    def _block_at_or_around(self, addr: int):
        """The block starting at ``addr``, else the one containing it (split off)."""
        block = self.blocks.get(addr)
        if block is not None:
            return block
        seg = self.segment_containing(addr)
        if seg is None:
            return None
        lst = self.seg_blocks[seg]
        i = bisect.bisect_right(lst, addr) - 1
        if i < 0:
            return None
        start = lst[i]
        outer = self.blocks[start]
        if addr >= start + outer[0]:
            return None
        # addr lies inside a block: the seed was imperfect; split it there.
        self.inconsistencies += 1
        head = addr - start
        tail = outer[0] - head
        outer[0] = head
        block = [tail, outer[1], 0, -1, BEFORE_RECORDING, seg]
        self._put_block(addr, block)
        return block

    def round(self, size: int) -> int:
        r = self._round_cache.get(size)
        if r is None:
            r = self._round_cache[size] = rules.round_size(size, self.settings)
        return r

    def alloc(self, addr, requested, stack, event) -> int:
        """Carve an allocation at ``addr``; returns the block size."""
        block = self._block_at_or_around(addr)
        want = self.round(requested)
        if block is None:
            self.inconsistencies += 1
            return want
        if block[1] != FREE:
            self.inconsistencies += 1
        seg = self.segs[block[5]]
        remaining = block[0] - want
        if remaining < 0:
            self.inconsistencies += 1
        elif self._should_split(remaining, want, seg):
            self._put_block(addr + want, [remaining, FREE, 0, -1, BEFORE_RECORDING, block[5]])
            block[0] = want
        block[1] = ALLOCATED
        block[2] = requested
        block[3] = stack
        block[4] = event
        return block[0]

    def _should_split(self, remaining: int, size: int, seg) -> bool:
        if seg[2] or seg[4]:  # small pool or expandable segments
            return remaining >= rules.MIN_BLOCK_SIZE
        limit = rules.max_split_size(self.settings)
        return (limit is None or size < limit) and remaining > rules.SMALL_SIZE

    def free_requested(self, addr) -> int:
        block = self.blocks.get(addr)
        if block is None or block[1] != ALLOCATED:
            self.inconsistencies += 1
            return block[0] if block else 0
        block[1] = PENDING
        return block[0]

    def free_completed(self, addr) -> int:
        block = self.blocks.get(addr)
        if block is None or block[1] == FREE:
            self.inconsistencies += 1
            return block[0] if block else 0
        size = block[0]
        block[1] = FREE
        self._merge(addr)
        return size

    def _merge(self, addr) -> None:
        block = self.blocks[addr]
        lst = self.seg_blocks[block[5]]
        i = bisect.bisect_left(lst, addr)
        if i + 1 < len(lst):
            nxt = lst[i + 1]
            nb = self.blocks[nxt]
            if nb[1] == FREE and addr + block[0] == nxt:
                block[0] += nb[0]
                self._drop_block(nxt)
        if i > 0:
            prv = lst[i - 1]
            pb = self.blocks[prv]
            if pb[1] == FREE and prv + pb[0] == addr:
                pb[0] += block[0]
                self._drop_block(addr)

    def new_segment(self, addr, size, stream, expandable) -> None:
        """A segment created by the trace (segment_alloc, or a first segment_map)."""
        small, pool = self.known.get(addr, (size <= rules.SMALL_BUFFER and not expandable,
                                            self.known.get(None, (False, 0))[1]))
        self.add_segment(addr, size, stream, small, pool, expandable)

    def map(self, addr, size, stream) -> None:
        seg = self.segment_containing(addr)
        if seg is None:
            seg = self._expandable_ending_at(addr)
        if seg is None:
            self.new_segment(addr, size, stream, True)
            return
        i = bisect.bisect_right(self.seg_starts, seg)
        if addr < seg + self.segs[seg][0] or (
                i < len(self.seg_starts) and seg + self.segs[seg][0] + size > self.seg_starts[i]):
            self.inconsistencies += 1  # mapped twice, or into the next segment
            return
        self.segs[seg][0] += size
        self._put_block(addr, [size, FREE, 0, -1, BEFORE_RECORDING, seg])
        self._merge(addr)

    def unmap(self, addr, size) -> None:
        block = self._block_at_or_around(addr)
        if block is None or block[1] != FREE or block[0] < size:
            self.inconsistencies += 1
            return
        seg = block[5]
        self.segs[seg][0] -= size
        tail = block[0] - size
        self._drop_block(addr)
        if tail:
            self._put_block(addr + size, [tail, FREE, 0, -1, BEFORE_RECORDING, seg])

    # -- snapshots of the state -------------------------------------------
    def layout(self) -> Layout:
        seg_addr = np.array(self.seg_starts, dtype=np.int64)
        segs = [self.segs[a] for a in self.seg_starts]
        addrs = [b for a in self.seg_starts for b in self.seg_blocks[a]]
        blocks = [self.blocks[b] for b in addrs]
        cols = list(zip(*blocks)) if blocks else [()] * 6
        return Layout(
            seg_addr=seg_addr,
            seg_size=np.array([s[0] for s in segs], dtype=np.int64),
            seg_stream=np.array([s[1] for s in segs], dtype=np.int64),
            seg_small=np.array([s[2] for s in segs], dtype=bool),
            seg_pool=np.array([s[3] for s in segs], dtype=np.int32),
            seg_expandable=np.array([s[4] for s in segs], dtype=bool),
            blk_addr=np.array(addrs, dtype=np.int64),
            blk_size=np.array(cols[0], dtype=np.int64),
            blk_requested=np.array(cols[2], dtype=np.int64),
            blk_state=np.array(cols[1], dtype=np.int8),
            blk_stack=np.array(cols[3], dtype=np.int32),
            blk_alloc=np.array(cols[4], dtype=np.int64),
        )

    @classmethod
    def from_layout(cls, layout: Layout, settings: dict, known: dict) -> "_State":
        st = cls(settings)
        st.known = known
        st.seg_starts = layout.seg_addr.tolist()
        for a, size, stream, small, pool, exp in zip(
                st.seg_starts, layout.seg_size.tolist(), layout.seg_stream.tolist(),
                layout.seg_small.tolist(), layout.seg_pool.tolist(),
                layout.seg_expandable.tolist()):
            st.segs[a] = [size, stream, small, pool, exp]
            st.seg_blocks[a] = []
        seg_of = np.searchsorted(layout.seg_addr, layout.blk_addr, side="right") - 1
        seg_addrs = layout.seg_addr[seg_of].tolist() if len(seg_of) else []
        for addr, size, state, req, stack, alloc, seg in zip(
                layout.blk_addr.tolist(), layout.blk_size.tolist(), layout.blk_state.tolist(),
                layout.blk_requested.tolist(), layout.blk_stack.tolist(),
                layout.blk_alloc.tolist(), seg_addrs):
            st.blocks[addr] = [size, state, req, stack, alloc, seg]
            st.seg_blocks[seg].append(addr)  # already sorted by address
        return st


def _layout_from_columns(cols) -> Layout:
    """A :class:`Layout` over the C loop's bytes columns (read-only, no copy)."""
    return Layout(*(np.frombuffer(c, dt) for c, dt in zip(cols, _LAYOUT_DTYPES)))


def _layout_columns(layout: Layout) -> list[np.ndarray]:
    return [np.ascontiguousarray(getattr(layout, f), dt)
            for f, dt in zip(Layout.__dataclass_fields__, _LAYOUT_DTYPES)]


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
    known: dict = field(default_factory=dict, repr=False)  # segment addr -> (small, pool)
    inconsistencies: int = 0
    native: bool = False  # seeks use the C loop
    # Layouts kept after chosen events (e.g. the OOMs), when there are no keyframes.
    emitted: dict = field(default_factory=dict, repr=False)
    _derived: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.rows)

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
            c = self._derived["lifetimes"] = link_lifetimes(self.action, self.addr, self.native)
        return c

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
        return _core.new_state(*_layout_columns(layout), *known,
                               rules.max_split_size(self.settings) or 0,
                               _divisions(self.settings))

    def peak(self, curve: str) -> tuple[int, int]:
        """(value, event index) of a curve's maximum; the first event that reaches it."""
        peaks = self._derived.get("peaks")
        if peaks is None:
            index = self._derived.get("curve_index")
            peaks = self._derived["peaks"] = index.peaks if index is not None and len(self) \
                else _peaks(self)
        return peaks.get(curve, (0, -1))

    def curve_index(self):
        """The curves summarised for views (:class:`.curve_index.CurveIndex`), built once."""
        index = self._derived.get("curve_index")
        if index is None:
            from .curve_index import CurveIndex

            index = self._derived["curve_index"] = CurveIndex(self)
        return index


def _known_arrays(known: dict) -> tuple:
    """Segment facts for the C loop: sorted addresses, small flags, pools, default pool."""
    addrs = sorted(a for a in known if a is not None)
    return (np.array(addrs, np.int64), np.array([known[a][0] for a in addrs], np.uint8),
            np.array([known[a][1] for a in addrs], np.int32),
            int(known.get(None, (False, 0))[1]))


def _divisions(settings: dict) -> list[int]:
    """``roundup_power2_divisions`` per power-of-two size class (index as in allocator_rules)."""
    return [rules.roundup_divisions(1 << (i + 20), settings) for i in range(17)]


def _run_native(cap, rep: DeviceReplay, start: int, stop: int, keyframe_every: int = 0,
                emit_at: np.ndarray | None = None, sizes=None, pools=None):
    """Apply events [start, stop) of ``rep`` to the C state ``cap``."""
    sl = slice(start, stop)
    return _core.run(
        cap, np.ascontiguousarray(rep.action[sl], np.int8),
        np.ascontiguousarray(rep.addr[sl], np.int64), np.ascontiguousarray(rep.size[sl], np.int64),
        np.ascontiguousarray(rep.stack[sl], np.int32),
        np.ascontiguousarray(rep.stream[sl], np.int64), start, keyframe_every,
        emit_at if emit_at is not None else np.zeros(0, np.int64),
        sizes[sl] if sizes is not None else None, pools[sl] if pools is not None else None)


def _apply(st: _State, rep: DeviceReplay, start: int, stop: int, sizes=None,
           pools=None) -> None:
    """Apply events [start, stop) to ``st``; optionally record, per event, the
    size of the block it touched and the pool of the segment it happened in."""
    actions = rep.action[start:stop].tolist()
    addrs = rep.addr[start:stop].tolist()
    sizes_req = rep.size[start:stop].tolist()
    stacks = rep.stack[start:stop].tolist()
    streams = rep.stream[start:stop].tolist()
    for i, (act, addr, size) in enumerate(zip(actions, addrs, sizes_req)):
        k = start + i
        if pools is not None and act in (0, 1, 2, 4, 6):
            seg = st.segment_containing(addr)
            pools[k] = st.segs[seg][3] if seg is not None else -1
        if act == 0:
            got = st.alloc(addr, size, stacks[i], k)
        elif act == 1:
            got = st.free_requested(addr)
        elif act == 2:
            got = st.free_completed(addr)
        elif act == 3:
            st.new_segment(addr, size, streams[i], False)
            got = 0
        elif act == 4:
            st.remove_segment(addr)
            got = 0
        elif act == 5:
            st.map(addr, size, streams[i])
            got = 0
        elif act == 6:
            st.unmap(addr, size)
            got = 0
        else:
            got = 0
        if sizes is not None:
            sizes[k] = got
        if pools is not None and act in (3, 5):
            seg = st.segment_containing(addr)
            pools[k] = st.segs[seg][3] if seg is not None else -1


def replay_device(snap: Snapshot, device: int, progress: Progress | None = None,
                  keyframe_every: int | None = None, keyframes: bool = True,
                  emit_at=(), native: bool | None = None) -> DeviceReplay:
    """Replay ``device``'s trace of ``snap`` (see the module docstring).

    ``keyframes=False`` keeps no keyframes (a headless summary seeks at most
    to the events in ``emit_at``, whose layouts are kept); ``native`` picks
    the C loop or the Python one (``None``: the C loop when built).
    """
    progress = progress or Progress()
    trace = snap.trace
    native = use_native(native)
    if len(trace.device) and int(trace.device.min()) == device == int(trace.device.max()):
        # One device holds every event: its columns are the trace's (views, no copies).
        n = len(trace.device)
        rows = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
        cols = {c: getattr(trace, c) for c in ("action", "addr", "size", "stream", "stack",
                                                "time_us")}
    else:
        rows = np.flatnonzero(trace.device == device)
        if len(trace.device) < 2**31:
            rows = rows.astype(np.int32)
        n = len(rows)
        cols = {c: getattr(trace, c)[rows] for c in ("action", "addr", "size", "stream",
                                                      "stack", "time_us")}
    settings = snap.allocator_settings
    initial_state = _seed(snap, device, cols["action"], cols["addr"], cols["size"],
                          cols["stream"], native)
    initial = initial_state.layout()
    if keyframe_every is None:
        per_frame = max(initial.n_blocks, 64)
        if native:
            keyframe_every = max(NATIVE_KEYFRAME_MIN,
                                 int(n * per_frame // NATIVE_KEYFRAME_BUDGET_BLOCKS) + 1)
        else:
            keyframe_every = max(1024, int(n * per_frame // KEYFRAME_BUDGET_BLOCKS) + 1)
    rep = DeviceReplay(
        device=device, rows=rows, **cols,
        block_size=np.zeros(n, np.int64), pool=np.full(n, -1, np.int32),
        initial=initial, keyframe_every=keyframe_every, settings=settings, native=native,
    )
    rep.known = initial_state.known
    emit = np.unique(np.asarray([k for k in emit_at if 0 <= k < n], dtype=np.int64))
    every = keyframe_every if keyframes else 0
    if native:
        cap = rep._native_state(initial)
        budget = 2 * NATIVE_KEYFRAME_BUDGET_BLOCKS
        start = 0
        while start < n:
            step = max(every, CHUNK_EVENTS // every * every) if every else CHUNK_EVENTS
            stop = min(n, start + step)
            kfs, layouts = _run_native(cap, rep, start, stop, every, emit, rep.block_size,
                                       rep.pool)
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
        rep.inconsistencies = _core.inconsistencies(cap)
        del cap
    else:
        st = _State.from_layout(initial, settings, rep.known)
        stops = set(emit.tolist())
        cuts = sorted({0, n} | {k + 1 for k in stops}
                      | (set(range(every, n + 1, every)) if every else set())
                      | set(range(0, n, 1 << 16)))
        for start, stop in zip(cuts, cuts[1:]):
            _apply(st, rep, start, stop, rep.block_size, rep.pool)
            if every and stop % every == 0:
                rep.keyframes.append(st.layout())
            if stop - 1 in stops:
                rep.emitted[stop - 1] = st.layout()
            progress.update("replay", stop / n if n else 1.0)
        rep.inconsistencies = st.inconsistencies
    if not keyframes:
        # Seeks replay from the start: make the keyframe stride say so.
        rep.keyframe_every = max(n, 1)
    return rep


def _seed(snap: Snapshot, device: int, actions: np.ndarray, addrs: np.ndarray,
          reqs: np.ndarray, streams: np.ndarray, native: bool | None = None) -> _State:
    """The state before the first event, walked back from the final snapshot
    (``actions``/``addrs``/``reqs``/``streams``: the device's event columns)."""
    segs, blocks = snap.segments, snap.blocks
    settings = snap.allocator_settings
    st = _State(settings)
    on_dev = np.flatnonzero(segs.device == device)
    final = {int(segs.address[s]): s for s in on_dev}
    # Segments: undo segment events from the end.
    sizes = {a: int(segs.total_size[s]) for a, s in final.items()}
    meta = {a: (int(segs.stream[s]), bool(segs.is_small[s]), int(segs.pool[s]),
                bool(segs.is_expandable[s])) for a, s in final.items()}
    seg_rows = np.flatnonzero((actions >= 3) & (actions <= 6))
    for r in seg_rows[::-1].tolist():
        act, addr, size = int(actions[r]), int(addrs[r]), int(reqs[r])
        if act == Action.SEGMENT_ALLOC:
            sizes.pop(addr, None)
        elif act == Action.SEGMENT_FREE:
            sizes[addr] = size
            meta[addr] = (int(streams[r]), size <= rules.SMALL_BUFFER, 0, False)
        else:  # map / unmap of an expandable segment: shrink / grow it back
            owner = max((a for a in sizes if a <= addr and meta[a][3]), default=None)
            if owner is None:
                continue
            sizes[owner] += -size if act == Action.SEGMENT_MAP else size
            if sizes[owner] <= 0:
                sizes.pop(owner)
    default_pool = snap.ordinary_pool or 0
    st.known = {a: (meta[a][1], meta[a][2]) for a in final}
    st.known[None] = (False, default_pool)  # for segments the final snapshot lacks
    seg_end = None
    for addr in sorted(sizes):
        if seg_end is not None and addr < seg_end:  # overlapping guesses: keep the first
            st.inconsistencies += 1
            continue
        stream, small, pool, exp = meta[addr]
        st.segs[addr] = [sizes[addr], stream, small, pool if addr in final else default_pool, exp]
        st.seg_starts.append(addr)
        st.seg_blocks[addr] = []
        seg_end = addr + sizes[addr]
    # Active blocks at the start: freed in the window without an allocation there,
    # or alive at the end without one.
    # (An address whose first alloc/free event is a free.)
    active: dict[int, list] = {}
    firsts, allocated = _first_frees(actions, addrs, native)
    allocated_in_window = set(allocated.tolist())
    for act, addr, req in zip(actions[firsts].tolist(), addrs[firsts].tolist(),
                              reqs[firsts].tolist()):
        state = ALLOCATED if act == 1 else PENDING
        active[addr] = [st.round(req), state, req, -1, BEFORE_RECORDING, None]
    final_blocks = np.flatnonzero(np.isin(blocks.segment, on_dev)
                                  & (blocks.state != BlockState.FREE)
                                  & (blocks.state != BlockState.UNKNOWN))
    for b in final_blocks.tolist():
        addr = int(blocks.address[b])
        if addr in allocated_in_window:
            continue
        entry = [int(blocks.size[b]), int(blocks.state[b]), int(blocks.requested_size[b]),
                 int(blocks.stack[b]), BEFORE_RECORDING, None]
        if addr in active:  # freed in the window: keep its in-window first state
            entry[1] = active[addr][1]
        active[addr] = entry
    # Lay them into the segments; the rest of each segment is free.
    ordered = sorted(active)
    for seg_addr in st.seg_starts:
        end = seg_addr + st.segs[seg_addr][0]
        i = bisect.bisect_left(ordered, seg_addr)
        cursor = seg_addr
        while i < len(ordered) and ordered[i] < end:
            addr = ordered[i]
            block = active[addr]
            if addr < cursor or addr in st.blocks:  # overlapping guesses: keep the first
                st.inconsistencies += 1
                i += 1
                continue
            if addr > cursor:
                st._put_block(cursor, [addr - cursor, FREE, 0, -1, BEFORE_RECORDING, seg_addr])
            block[0] = min(block[0], end - addr)
            block[5] = seg_addr
            st._put_block(addr, block)
            cursor = addr + block[0]
            i += 1
        if cursor < end:
            st._put_block(cursor, [end - cursor, FREE, 0, -1, BEFORE_RECORDING, seg_addr])
    return st


def _first_frees(actions: np.ndarray, addrs: np.ndarray,
                 native: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(indices of events that are the first alloc/free event of their address and a
    free, every address allocated in the window)."""
    if use_native(native):
        firsts, allocated = _core.seed_scan(np.ascontiguousarray(actions, np.int8),
                                            np.ascontiguousarray(addrs, np.int64))
        return np.frombuffer(firsts, np.int64), np.frombuffer(allocated, np.int64)
    touch = np.flatnonzero(actions <= 2)
    _, first = np.unique(addrs[touch], return_index=True)
    firsts = np.sort(touch[first])
    firsts = firsts[actions[firsts] != 0]
    return firsts, np.unique(addrs[actions == 0])


def link_lifetimes(action: np.ndarray, addr: np.ndarray,
                   native: bool | None = None) -> dict[str, np.ndarray]:
    """Pair every free with its allocation (by address, in order): ``alloc_of`` per
    free (-1: allocated before recording), ``freed_at`` / ``free_requested_at`` per
    alloc (n: never)."""
    n = len(action)
    dt = np.int32 if n < 2**31 - 1 else np.int64
    out = {"alloc_of": np.full(n, -1, dt), "freed_at": np.full(n, n, dt),
           "free_requested_at": np.full(n, n, dt)}
    if use_native(native) and dt == np.int32:
        _core.link_lifetimes(np.ascontiguousarray(action, np.int8),
                             np.ascontiguousarray(addr, np.int64), out["alloc_of"],
                             out["freed_at"], out["free_requested_at"])
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


def initial_segment_of_blocks(layout: Layout) -> np.ndarray:
    """Row in ``layout``'s segments of each of its blocks."""
    if not layout.n_blocks or not len(layout.seg_addr):
        return np.zeros(layout.n_blocks, np.int64)
    return np.clip(np.searchsorted(layout.seg_addr, layout.blk_addr, side="right") - 1,
                   0, len(layout.seg_addr) - 1)


CURVES = ("requested", "allocated", "active", "reserved")


def curves(rep: DeviceReplay, stream: int | None = None,
           pool: int | None = None) -> dict[str, np.ndarray]:
    """requested / allocated / active / reserved bytes after each event,
    optionally only of one stream and/or pool (index into ``Snapshot.pools``).

    The allocator's own accounting: requested and active fall when a free
    completes, allocated already when it is requested; reserved follows
    segment allocs / frees and expandable maps / unmaps.  Starting values come
    from the layout before the first event.
    """
    starts = _curve_starts(rep, stream, pool)
    if stream is None and pool is None and rep.native and _core is not None:
        out = {c: np.empty(len(rep), np.int64) for c in CURVES}
        _native_curves(rep, starts, out)
        return out
    steps = _curve_steps(rep, slice(0, len(rep)), stream, pool)
    return {c: np.cumsum(steps[c], out=steps[c]) + starts[c] if len(steps[c]) else steps[c]
            for c in CURVES}


def _curve_starts(rep: DeviceReplay, stream: int | None, pool: int | None) -> dict[str, int]:
    """The four curves' values before the first event."""
    init = rep.initial
    seg_on = np.ones(len(init.seg_addr), bool)
    if stream is not None:
        seg_on &= init.seg_stream == stream
    if pool is not None:
        seg_on &= init.seg_pool == pool
    on = seg_on[initial_segment_of_blocks(init)] if init.n_blocks else np.zeros(0, bool)
    state = init.blk_state
    live = on & ((state == ALLOCATED) | (state == PENDING))
    return {"requested": int(init.blk_requested[live].sum()),
            "allocated": int(init.blk_size[on & (state == ALLOCATED)].sum()),
            "active": int(init.blk_size[live].sum()),
            "reserved": int(init.seg_size[seg_on].sum())}


def _curve_steps(rep: DeviceReplay, sl: slice, stream: int | None,
                 pool: int | None) -> dict[str, np.ndarray]:
    """Each curve's change at every event of ``sl`` (int64)."""
    act = rep.action[sl]
    size, req = rep.block_size[sl], rep.size[sl]
    events = None
    if stream is not None:
        events = rep.stream[sl] == stream
    if pool is not None:
        events = (rep.pool[sl] == pool) if events is None else events & (rep.pool[sl] == pool)

    def step(up: tuple, down: tuple, values: np.ndarray) -> np.ndarray:
        sign = np.zeros(9, np.int64)
        sign[list(up)], sign[list(down)] = 1, -1
        out = sign[np.minimum(act, 8)] * values  # actions > 8 do not exist (schema)
        if events is not None:
            out[~events] = 0
        return out

    return {"requested": step((Action.ALLOC,), (Action.FREE_COMPLETED,), req),
            "allocated": step((Action.ALLOC,), (Action.FREE_REQUESTED,), size),
            "active": step((Action.ALLOC,), (Action.FREE_COMPLETED,), size),
            "reserved": step((Action.SEGMENT_ALLOC, Action.SEGMENT_MAP),
                             (Action.SEGMENT_FREE, Action.SEGMENT_UNMAP), req)}


def _native_curves(rep: DeviceReplay, starts: dict[str, int], out: dict | None):
    """The four curves in one C pass (into ``out`` when given); their peaks."""
    peaks = _core.curves(
        np.ascontiguousarray(rep.action, np.int8), np.ascontiguousarray(rep.block_size, np.int64),
        np.ascontiguousarray(rep.size, np.int64), tuple(starts[c] for c in CURVES),
        *((out[c] if out is not None else None) for c in CURVES))
    return {c: (int(v), int(k)) for c, (v, k) in zip(CURVES, peaks)}


def _peaks(rep: DeviceReplay) -> dict[str, tuple[int, int]]:
    """(value, first event reaching it) of each curve, in chunks: no full curve is
    materialised unless one already exists."""
    n = len(rep)
    if not n:
        return {c: (0, -1) for c in CURVES}
    have = rep._derived.get("curves")
    if have is not None:
        return {c: (int(have[c][k]), k) for c in CURVES for k in [int(np.argmax(have[c]))]}
    carry = _curve_starts(rep, None, None)
    if rep.native and _core is not None:
        return _native_curves(rep, carry, None)
    best = {c: (None, -1) for c in CURVES}
    for start in range(0, n, CHUNK_EVENTS):
        steps = _curve_steps(rep, slice(start, min(n, start + CHUNK_EVENTS)), None, None)
        for c in CURVES:
            values = np.cumsum(steps[c], out=steps[c])
            values += carry[c]
            k = int(np.argmax(values))
            if best[c][0] is None or values[k] > best[c][0]:
                best[c] = (int(values[k]), start + k)
            carry[c] = int(values[-1])
    return best


def layout_snapshot(snap: Snapshot, layout: Layout, device: int) -> Snapshot:
    """A :class:`Snapshot` whose segments and blocks are ``layout`` (the rest shared),
    so every view and figure of a snapshot works at any moment of the trace."""
    nseg = len(layout.seg_addr)
    seg_of = np.searchsorted(layout.seg_addr, layout.blk_addr, side="right") - 1 \
        if layout.n_blocks else np.zeros(0, np.int64)
    counts = np.bincount(seg_of, minlength=nseg) if layout.n_blocks else np.zeros(nseg, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if nseg else np.zeros(0, np.int64)
    segments = Segments(
        device=np.full(nseg, device, np.int32), address=layout.seg_addr,
        total_size=layout.seg_size, stream=layout.seg_stream, is_small=layout.seg_small,
        pool=layout.seg_pool, is_expandable=layout.seg_expandable,
        stack=np.full(nseg, -1, np.int32), block_start=starts.astype(np.int64),
        block_count=counts.astype(np.int64),
    )
    blocks = Blocks(
        segment=seg_of.astype(np.int32), address=layout.blk_addr, size=layout.blk_size,
        requested_size=np.where(layout.blk_state == FREE, 0, layout.blk_requested),
        state=layout.blk_state, stack=layout.blk_stack,
    )
    return Snapshot(
        segments=segments, blocks=blocks, trace=snap.trace, annotations=snap.annotations,
        frames=snap.frames, stacks=snap.stacks, pools=snap.pools,
        allocator_settings=snap.allocator_settings, source_format=snap.source_format,
        path=snap.path, warnings=snap.warnings, sidecar=snap.sidecar,
    )
