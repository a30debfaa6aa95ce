"""Expandable segments: one reservation per stream and pool, mapped page by page.

Grown at the lowest address where free and unmapped space fits a request,
unmapped page by page when cache is released; a snapshot lists each contiguous
mapped range as a segment.  A mixin of :class:`~.simulator.Allocator`.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from typing import TypeGuard, cast

from .blocks import (
    LARGE_PAGE,
    SEG_MAP,
    SEG_UNMAP,
    SHIFT_STREAM,
    SMALL_PAGE,
    AllocatorBase,
    Block,
    Expandable,
    Pool,
)


class ExpandableMixin(AllocatorBase):
    """Expandable-segment paths of the allocator model."""

    def _cut_reservations(self, addr: int) -> None:
        """A recorded expandable segment starts at ``addr``: a guessed reservation (its
        size is the GPU's memory, unknown without a sidecar) that runs past ``addr``
        with nothing mapped there really ended before it; cut it there."""
        for es in self.expandables:
            if not es.base < addr < es.base + es.reserve:
                continue
            tail = None
            for b in es.pool.ublocks.values():
                if b.es is es and b.next is None:
                    tail = b
                    break
            if tail is None or tail.ptr > addr:
                continue  # mapped memory beyond addr: the recording's segment is elsewhere
            es.reserve = addr - es.base
            if tail.ptr == addr:  # nothing of it is left
                es.pool.uremove(tail)
                if tail.prev is not None:
                    tail.prev.next = None
            else:
                tail.size = addr - tail.ptr

    def add_expandable(
        self, ranges: list[tuple[int, int, list]], sidx: int, private: int, small: bool
    ) -> dict[int, Block]:
        """Mapped ranges of one expandable segment before the first request."""
        pool = self.pool(private, small)
        page = SMALL_PAGE if small else LARGE_PAGE
        base = ranges[0][0]
        es = Expandable(base, page, self.reserve_bytes, sidx, pool)
        self.expandables.append(es)
        live: dict[int, Block] = {}
        chain: list[Block] = []
        cursor = base
        for ptr, size, blocks in ranges:
            if ptr > cursor:
                chain.append(Block(cursor, ptr - cursor, sidx, pool, es, mapped=False))
            got = self._lay_blocks(pool, sidx, blocks, es, chain)
            live.update(got)
            self.total += size
            cursor = ptr + size
        end = base + es.reserve
        if end > cursor:
            chain.append(Block(cursor, end - cursor, sidx, pool, es, mapped=False))
        for a, b in itertools.pairwise(chain):
            a.next, b.prev = b, a
        for b in chain:
            if not b.mapped:
                pool.uinsert(b)
        return live

    def allocate_expandable(self, pool: Pool, sidx: int, size: int) -> Block | None:
        c = self.find_expandable(pool, sidx, size)
        if not c.mapped:
            self.map_block(c, min(c.size, size))
        while c.size < size:
            # find_expandable counted free blocks up to ``size`` to the right of ``c``; on an
            # inconsistent trace there may be none, and the AttributeError on None is how
            # run.simulate_python tells that trace from a fault of the model.
            nc = cast(Block, c.next)
            self.map_block(nc, min(size - c.size, nc.size))
            c = nc
        pool.remove(c)
        return c

    @staticmethod
    def _free_here(b: Block | None) -> TypeGuard[Block]:
        return b is not None and not b.alloc and not b.pending

    def find_expandable(self, pool: Pool, sidx: int, size: int) -> Block:
        """The lowest address where free and unmapped space adds up to ``size``."""
        ukeys = pool.ukeys
        j = bisect_left(ukeys, sidx << SHIFT_STREAM)
        while j < len(ukeys) and ukeys[j] >> SHIFT_STREAM == sidx:
            c = pool.ublocks[ukeys[j]]
            if self._free_here(c.prev):
                c = c.prev
            got = 0
            x: Block | None = c
            while got < size and self._free_here(x):
                got += x.size
                x = x.next
            if got >= size:
                return c
            j += 1
        page = SMALL_PAGE if pool.small else LARGE_PAGE
        reserve = -(-self.reserve_bytes // page) * page
        base = self._address(SEG_MAP, reserve)
        es = Expandable(base, page, reserve, sidx, pool)
        self.expandables.append(es)
        c = Block(base, reserve, sidx, pool, es, mapped=False)
        pool.uinsert(c)
        return c

    def map_block(self, b: Block, size: int) -> None:
        es = b.es
        begin = (b.ptr - es.base) // es.page
        end = -(-(b.ptr + size - es.base) // es.page)
        mapped = (end - begin) * es.page
        pool = b.pool
        pool.uremove(b)
        b.mapped = True
        ptr = b.ptr
        if mapped < b.size:
            rest = Block(b.ptr + mapped, b.size - mapped, b.sidx, pool, es, mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            pool.uinsert(rest)
            b.size = mapped
        self._merge(b, b.prev)
        self._merge(b, b.next)
        pool.insert(b)
        self.total += mapped
        self.n_alloc += 1
        self.events.append((self.tag, SEG_MAP, ptr, mapped))

    def unmap_block(self, b: Block) -> None:
        es = b.es
        begin = -(-(b.ptr - es.base) // es.page)
        end = (b.ptr + b.size - es.base) // es.page
        if begin >= end:
            return
        pool = b.pool
        pool.remove(b)
        uptr = es.base + begin * es.page
        usize = (end - begin) * es.page
        before = uptr - b.ptr
        if before > 0:
            bf = Block(b.ptr, before, b.sidx, pool, es)
            bf.prev, bf.next = b.prev, b
            if b.prev is not None:
                b.prev.next = bf
            b.prev = bf
            pool.insert(bf)
        after = b.size - before - usize
        if after > 0:
            af = Block(uptr + usize, after, b.sidx, pool, es)
            af.prev, af.next = b, b.next
            if b.next is not None:
                b.next.prev = af
            b.next = af
            pool.insert(af)
        b.ptr, b.size, b.mapped = uptr, usize, False
        self._merge(b, b.prev)
        self._merge(b, b.next)
        pool.uinsert(b)
        self.total -= usize
        self.n_free += 1
        self.events.append((self.tag, SEG_UNMAP, uptr, usize))

    def segment_list(self) -> list[tuple[int, int, bool, bool]]:
        """(address, size, small, expandable) of every segment as a snapshot reports them:
        one per cudaMalloc, one per contiguous mapped range of an expandable segment."""
        out = []
        for ptr, head in self.segments.items():
            if head is not None:
                out.append((ptr, self.seg_size[ptr], head.pool.small, False))
        for es in self.expandables:
            # Walk from the segment's first block (the one at its base).
            b = self._block_at(es)
            run_start, run = None, 0
            while b is not None:
                if b.mapped:
                    if run_start is None:
                        run_start, run = b.ptr, 0
                    run += b.size
                elif run_start is not None:
                    out.append((run_start, run, es.pool.small, True))
                    run_start = None
                b = b.next
            if run_start is not None:
                out.append((run_start, run, es.pool.small, True))
        return sorted(out)

    @staticmethod
    def _block_at(es: Expandable) -> Block | None:
        """The first block of an expandable segment (its unmapped blocks are always listed)."""
        pool = es.pool
        for b in pool.ublocks.values():
            if b.es is es:
                while b.prev is not None:
                    b = b.prev
                return b
        return None
