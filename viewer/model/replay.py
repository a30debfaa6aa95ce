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

ALLOCATED, PENDING, FREE = int(BlockState.ALLOCATED), int(BlockState.PENDING_FREE), int(BlockState.FREE)
BEFORE_RECORDING = -1
KEYFRAME_BUDGET_BLOCKS = 20_000_000  # total block rows kept in keyframes


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
        self.blocks[addr] = block
        bisect.insort(self.seg_blocks[block[5]], addr)

    def _drop_block(self, addr) -> list:
        block = self.blocks.pop(addr)
        lst = self.seg_blocks[block[5]]
        del lst[bisect.bisect_left(lst, addr)]
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


@dataclass
class DeviceReplay:
    """Everything known about one device over the recorded window.

    Index ``k`` is the position of an event in this device's trace; the
    curves hold values *after* event ``k``; ``initial`` is the layout before
    event 0.
    """

    device: int
    rows: np.ndarray  # rows of Snapshot.trace for this device, in order
    action: np.ndarray  # the trace columns of those rows
    addr: np.ndarray
    size: np.ndarray  # requested bytes (trace events carry requested sizes)
    stream: np.ndarray
    stack: np.ndarray
    time_us: np.ndarray
    requested: np.ndarray
    allocated: np.ndarray
    active: np.ndarray
    reserved: np.ndarray
    block_size: np.ndarray  # rounded size of the block an alloc/free touched
    pool: np.ndarray  # index into Snapshot.pools of the segment an event happened in (-1: none)
    alloc_of: np.ndarray  # for free events: the alloc's index, -1 before recording
    freed_at: np.ndarray  # for alloc events: free_completed index, n if alive at the end
    free_requested_at: np.ndarray  # for alloc events: free_requested index, n if none
    initial: Layout
    keyframe_every: int
    keyframes: list[Layout] = field(repr=False, default_factory=list)  # after events K-1, 2K-1..
    settings: dict = field(default_factory=dict, repr=False)
    known: dict = field(default_factory=dict, repr=False)  # segment addr -> (small, pool)
    inconsistencies: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    def layout_after(self, k: int) -> Layout:
        """The layout after event ``k`` (``k = -1``: before the first event)."""
        n = len(self.rows)
        k = min(max(int(k), -1), n - 1)
        j = (k + 1) // self.keyframe_every  # keyframes[j - 1] is after event j*K - 1
        if j == 0:
            base, start = self.initial, 0
        else:
            base, start = self.keyframes[j - 1], j * self.keyframe_every
        if start > k:
            return base
        st = _State.from_layout(base, self.settings, self.known)
        _apply(st, self, start, k + 1)
        return st.layout()

    def peak(self, curve: str) -> tuple[int, int]:
        """(value, event index) of a curve's maximum; the first event that reaches it."""
        values = getattr(self, curve)
        if not len(values):
            return 0, -1
        k = int(np.argmax(values))
        return int(values[k]), k


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
                  keyframe_every: int | None = None) -> DeviceReplay:
    """Replay ``device``'s trace of ``snap`` (see the module docstring)."""
    progress = progress or Progress()
    trace = snap.trace
    rows = np.flatnonzero(trace.device == device)
    n = len(rows)
    action = trace.action[rows]
    settings = snap.allocator_settings
    initial_state = _seed(snap, device, rows)
    initial = initial_state.layout()
    if keyframe_every is None:
        per_frame = max(initial.n_blocks, 64)
        keyframe_every = max(1024, int(n * per_frame // KEYFRAME_BUDGET_BLOCKS) + 1)
    rep = DeviceReplay(
        device=device, rows=rows, action=action, addr=trace.addr[rows], size=trace.size[rows],
        stream=trace.stream[rows], stack=trace.stack[rows], time_us=trace.time_us[rows],
        requested=np.zeros(0, np.int64), allocated=np.zeros(0, np.int64),
        active=np.zeros(0, np.int64), reserved=np.zeros(0, np.int64),
        block_size=np.zeros(n, np.int64), pool=np.full(n, -1, np.int32),
        alloc_of=np.full(n, -1, np.int64),
        freed_at=np.full(n, n, np.int64), free_requested_at=np.full(n, n, np.int64),
        initial=initial, keyframe_every=keyframe_every, settings=settings,
    )
    rep.known = initial_state.known
    st = _State.from_layout(initial, settings, rep.known)
    for start in range(0, n, keyframe_every):
        stop = min(n, start + keyframe_every)
        _apply(st, rep, start, stop, rep.block_size, rep.pool)
        if stop - start == keyframe_every:
            rep.keyframes.append(st.layout())
        progress.update("replay", stop / n if n else 1.0)
    rep.inconsistencies = st.inconsistencies
    _link_lifetimes(rep)
    totals = curves(rep)
    rep.requested, rep.allocated = totals["requested"], totals["allocated"]
    rep.active, rep.reserved = totals["active"], totals["reserved"]
    return rep


def _seed(snap: Snapshot, device: int, rows: np.ndarray) -> _State:
    """The state before the first event, walked back from the final snapshot."""
    trace = snap.trace
    segs, blocks = snap.segments, snap.blocks
    settings = snap.allocator_settings
    st = _State(settings)
    on_dev = np.flatnonzero(segs.device == device)
    final = {int(segs.address[s]): s for s in on_dev}
    # Segments: undo segment events from the end.
    sizes = {a: int(segs.total_size[s]) for a, s in final.items()}
    meta = {a: (int(segs.stream[s]), bool(segs.is_small[s]), int(segs.pool[s]),
                bool(segs.is_expandable[s])) for a, s in final.items()}
    seg_rows = rows[np.isin(trace.action[rows], (3, 4, 5, 6))]
    for r in seg_rows[::-1].tolist():
        act, addr, size = int(trace.action[r]), int(trace.addr[r]), int(trace.size[r])
        if act == Action.SEGMENT_ALLOC:
            sizes.pop(addr, None)
        elif act == Action.SEGMENT_FREE:
            sizes[addr] = size
            meta[addr] = (int(trace.stream[r]), size <= rules.SMALL_BUFFER, 0, False)
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
    for addr in sorted(sizes):
        stream, small, pool, exp = meta[addr]
        st.segs[addr] = [sizes[addr], stream, small, pool if addr in final else default_pool, exp]
        st.seg_starts.append(addr)
        st.seg_blocks[addr] = []
    # Active blocks at the start: freed in the window without an allocation there,
    # or alive at the end without one.
    active: dict[int, list] = {}
    allocated_in_window: set[int] = set()
    actions = trace.action[rows].tolist()
    addrs = trace.addr[rows].tolist()
    reqs = trace.size[rows].tolist()
    for act, addr, req in zip(actions, addrs, reqs):
        if act == 0:
            allocated_in_window.add(addr)
        elif act in (1, 2) and addr not in allocated_in_window and addr not in active:
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
            if addr < cursor:  # overlapping guesses: keep the first
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


def _link_lifetimes(rep: DeviceReplay) -> None:
    """Pair every free with its allocation (by address, in order)."""
    live: dict[int, int] = {}
    for k, (act, addr) in enumerate(zip(rep.action.tolist(), rep.addr.tolist())):
        if act == 0:
            live[addr] = k
        elif act == 1:
            a = live.get(addr, -1)
            rep.alloc_of[k] = a
            if a >= 0:
                rep.free_requested_at[a] = k
        elif act == 2:
            a = live.pop(addr, -1)
            rep.alloc_of[k] = a
            if a >= 0:
                rep.freed_at[a] = k


def initial_segment_of_blocks(layout: Layout) -> np.ndarray:
    """Row in ``layout``'s segments of each of its blocks."""
    if not layout.n_blocks or not len(layout.seg_addr):
        return np.zeros(layout.n_blocks, np.int64)
    return np.clip(np.searchsorted(layout.seg_addr, layout.blk_addr, side="right") - 1,
                   0, len(layout.seg_addr) - 1)


def curves(rep: DeviceReplay, stream: int | None = None,
           pool: int | None = None) -> dict[str, np.ndarray]:
    """requested / allocated / active / reserved bytes after each event,
    optionally only of one stream and/or pool (index into ``Snapshot.pools``).

    The allocator's own accounting: requested and active fall when a free
    completes, allocated already when it is requested; reserved follows
    segment allocs / frees and expandable maps / unmaps.  Starting values come
    from the layout before the first event.
    """
    init = rep.initial
    seg_on = np.ones(len(init.seg_addr), bool)
    events = np.ones(len(rep), bool)
    if stream is not None:
        seg_on &= init.seg_stream == stream
        events &= rep.stream == stream
    if pool is not None:
        seg_on &= init.seg_pool == pool
        events &= rep.pool == pool
    on = seg_on[initial_segment_of_blocks(init)] if init.n_blocks else np.zeros(0, bool)
    state = init.blk_state
    live = on & ((state == ALLOCATED) | (state == PENDING))
    act = rep.action
    size, req = rep.block_size, rep.size
    alloc = events & (act == Action.ALLOC)
    freq = events & (act == Action.FREE_REQUESTED)
    fcomp = events & (act == Action.FREE_COMPLETED)
    plus = events & ((act == Action.SEGMENT_ALLOC) | (act == Action.SEGMENT_MAP))
    minus = events & ((act == Action.SEGMENT_FREE) | (act == Action.SEGMENT_UNMAP))

    def run(start: int, up: np.ndarray, down: np.ndarray, values: np.ndarray) -> np.ndarray:
        return start + np.cumsum(np.where(up, values, 0) - np.where(down, values, 0))

    return {
        "requested": run(int(init.blk_requested[live].sum()), alloc, fcomp, req),
        "allocated": run(int(init.blk_size[on & (state == ALLOCATED)].sum()), alloc, freq, size),
        "active": run(int(init.blk_size[live].sum()), alloc, fcomp, size),
        "reserved": run(int(init.seg_size[seg_on].sum()), plus, minus, req),
    }


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
