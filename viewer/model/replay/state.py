"""The reference state machine of the replay (pure Python; the C loop is its copy).

Trace events carry *requested* sizes and addresses; the block sizes follow
from the caching allocator's rules (:mod:`..core.allocator_rules`): an allocation
takes the start of a free block, rounded, and splits off the rest only when
the remainder is worth keeping (``should_split``); a completed free merges
with free neighbours.  Replaying those rules over the known addresses gives
the exact layout at every moment.  Nothing here trusts the trace: a lookup
that misses is counted in :attr:`_State.inconsistencies`, never raised.
"""

from __future__ import annotations

import bisect

import numpy as np

from ..core import allocator_rules as rules
from .layout import ALLOCATED, BEFORE_RECORDING, FREE, PENDING, Layout

INT64_MAX = (1 << 63) - 1


class Known:
    """Segment facts the trace does not carry (small or large pool, private pool),
    from the final snapshot: a segment made by segment_alloc takes the facts of the
    final segment with its address *and size* (an address is reused by segments of
    other sizes and pools); a mapped range those of the final mapped range it
    starts in (pages of one range belong to one segment).  Others: small when at
    most 2 MiB (never for expandable segments), and the ordinary pool."""

    def __init__(self, addr=(), size=(), small=(), pool=(), default_pool: int = 0) -> None:
        order = np.argsort(np.asarray(addr, np.int64), kind="stable")
        self.addr = np.asarray(addr, np.int64)[order]
        self.size = np.asarray(size, np.int64)[order]
        self.small = np.asarray(small, np.uint8)[order]
        self.pool = np.asarray(pool, np.int32)[order]
        self.default_pool = int(default_pool)
        self._addr_list = self.addr.tolist()

    def merged(self, newer: "Known") -> "Known":
        """These facts updated with ``newer`` (a later snapshot's): entries whose range
        overlaps a newer one are replaced by it."""
        if not len(self.addr):
            return newer
        starts, ends = newer.addr, newer.addr + newer.size
        i = np.searchsorted(starts, self.addr + self.size, side="left")  # newer ones before my end
        j = np.maximum(i - 1, 0)
        overlap = (i > 0) & (ends[j] > self.addr) if len(starts) else np.zeros(len(self.addr), bool)
        keep = ~overlap
        return Known(
            np.concatenate([self.addr[keep], newer.addr]),
            np.concatenate([self.size[keep], newer.size]),
            np.concatenate([self.small[keep], newer.small]),
            np.concatenate([self.pool[keep], newer.pool]),
            newer.default_pool,
        )

    def lookup(self, addr: int, size: int, expandable: bool) -> tuple[bool, int]:
        """(small, pool) of a segment the trace creates at ``addr`` with ``size`` bytes."""
        i = bisect.bisect_right(self._addr_list, addr) - 1
        if i >= 0:
            a, s = self._addr_list[i], int(self.size[i])
            if (a == addr and s == size) or (expandable and addr < a + s):
                return bool(self.small[i]), int(self.pool[i])
        return size <= rules.SMALL_BUFFER and not expandable, self.default_pool


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
        # expandable segment), from the final snapshot.
        self.known = Known()

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
        # seg[2]: small pool, seg[4]: expandable segments
        return rules.should_split(
            remaining, size, bool(seg[2] or seg[4]), rules.max_split_size(self.settings)
        )

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
        """A segment created by the trace (segment_alloc, or a segment_map that
        touches no mapped range)."""
        if size <= 0 or addr < 0 or addr + size > INT64_MAX:
            self.inconsistencies += 1
            return
        small, pool = self.known.lookup(addr, size, expandable)
        self.add_segment(addr, size, stream, small, pool, expandable)

    def _joinable(self, start: int | None, stream: int) -> bool:
        return start is not None and self.segs[start][4] and self.segs[start][1] == stream

    def map(self, addr, size, stream) -> None:
        """segment_map: pages of an expandable segment mapped at ``[addr, addr + size)``.

        A snapshot lists every contiguous mapped range of an expandable segment as
        one segment, so the range joins the mapped range ending at ``addr`` and the
        one starting at ``addr + size`` (same stream), or starts a new one."""
        if size <= 0 or addr < 0 or addr + size > INT64_MAX:
            self.inconsistencies += 1
            return
        starts = self.seg_starts
        i = bisect.bisect_right(starts, addr)
        left = starts[i - 1] if i > 0 else None
        if (left is not None and left + self.segs[left][0] > addr) or (
            i < len(starts) and starts[i] < addr + size
        ):
            self.inconsistencies += 1  # mapped twice, or into the next segment
            return
        if left is None or left + self.segs[left][0] != addr or not self._joinable(left, stream):
            left = None
        right = starts[i] if i < len(starts) and starts[i] == addr + size else None
        if not self._joinable(right, stream):
            right = None
        if left is None and right is None:
            self.new_segment(addr, size, stream, True)
            return
        if left is None:  # the range grows downwards: it starts at addr now
            assert right is not None
            left = self._rekey(right, addr)
            right = None
        self.segs[left][0] += size
        self._put_block(addr, [size, FREE, 0, -1, BEFORE_RECORDING, left])
        if right is not None:  # the gap between two ranges is filled: one range
            self._absorb(left, right)
        self._merge(addr)

    def unmap(self, addr, size) -> None:
        """segment_unmap: whole pages inside a free block are unmapped; the block's
        ends stay mapped, and a range unmapped in the middle splits the segment."""
        seg = self.segment_containing(addr)
        if seg is None or size <= 0 or addr + size > INT64_MAX:
            self.inconsistencies += 1
            return
        lst = self.seg_blocks[seg]
        j = bisect.bisect_right(lst, addr) - 1
        start = lst[j] if j >= 0 else None
        block = self.blocks[start] if start is not None else None
        end = addr + size
        if block is None or block[1] != FREE or start + block[0] < end:
            self.inconsistencies += 1
            return
        tail = start + block[0] - end
        if start < addr:
            block[0] = addr - start
        else:
            self._drop_block(start)
        seg_end = seg + self.segs[seg][0]
        if end < seg_end:  # the mapped rest after the hole: a segment of its own
            facts = self.segs[seg]
            self._split(seg, end, [seg_end - end] + facts[1:])
            if tail:
                self._put_block(end, [tail, FREE, 0, -1, BEFORE_RECORDING, end])
        if addr > seg:
            self.segs[seg][0] = addr - seg
        else:
            self.seg_blocks.pop(seg)
            del self.segs[seg]
            del self.seg_starts[bisect.bisect_left(self.seg_starts, seg)]

    def _rekey(self, seg: int, new: int) -> int:
        """Move segment ``seg`` to start at ``new`` (below it; the caller grows it)."""
        self.segs[new] = self.segs.pop(seg)
        self.seg_starts[bisect.bisect_left(self.seg_starts, seg)] = new
        lst = self.seg_blocks[new] = self.seg_blocks.pop(seg)
        for b in lst:
            self.blocks[b][5] = new
        return new

    def _absorb(self, left: int, right: int) -> None:
        """Segment ``right`` (right after ``left``) becomes part of ``left``."""
        self.segs[left][0] += self.segs.pop(right)[0]
        del self.seg_starts[bisect.bisect_left(self.seg_starts, right)]
        moved = self.seg_blocks.pop(right)
        for b in moved:
            self.blocks[b][5] = left
        self.seg_blocks[left].extend(moved)

    def _split(self, seg: int, at: int, facts: list) -> None:
        """Blocks of ``seg`` at or after ``at`` move to a new segment at ``at``."""
        lst = self.seg_blocks[seg]
        j = bisect.bisect_left(lst, at)
        moved = lst[j:]
        del lst[j:]
        for b in moved:
            self.blocks[b][5] = at
        self.segs[at] = facts
        bisect.insort(self.seg_starts, at)
        self.seg_blocks[at] = moved

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
    def from_layout(cls, layout: Layout, settings: dict, known: Known) -> "_State":
        st = cls(settings)
        st.known = known
        st.seg_starts = layout.seg_addr.tolist()
        for a, size, stream, small, pool, exp in zip(
            st.seg_starts,
            layout.seg_size.tolist(),
            layout.seg_stream.tolist(),
            layout.seg_small.tolist(),
            layout.seg_pool.tolist(),
            layout.seg_expandable.tolist(),
        ):
            st.segs[a] = [size, stream, small, pool, exp]
            st.seg_blocks[a] = []
        seg_of = np.searchsorted(layout.seg_addr, layout.blk_addr, side="right") - 1
        seg_addrs = layout.seg_addr[seg_of].tolist() if len(seg_of) else []
        for addr, size, state, req, stack, alloc, seg in zip(
            layout.blk_addr.tolist(),
            layout.blk_size.tolist(),
            layout.blk_state.tolist(),
            layout.blk_requested.tolist(),
            layout.blk_stack.tolist(),
            layout.blk_alloc.tolist(),
            seg_addrs,
        ):
            st.blocks[addr] = [size, state, req, stack, alloc, seg]
            st.seg_blocks[seg].append(addr)  # already sorted by address
        return st


def _apply(st: _State, rep, start: int, stop: int, sizes=None, pools=None) -> None:
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
