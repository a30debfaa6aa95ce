"""A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, torch 2.11).

It takes a request stream (:mod:`.requests`) and answers it the way the
allocator would under given settings (:class:`~..core.allocator_rules.AllocatorConfig`)
and a memory limit:

* pools: small (requests <= 1 MiB) and large, per private pool (CUDA graphs);
  free blocks are kept sorted by (stream, size, address) and a request takes
  the first that fits (best fit; BlockComparatorSize);
* ``max_split_size``: oversize blocks serve only oversize requests, and then
  only within ``max_non_split_rounding`` (20 MiB) of their size;
* splitting: the small pool and expandable segments split off any remainder of
  512 B or more, the large pool only remainders over 1 MiB and only for
  requests under ``max_split_size``; freed blocks merge with free neighbours;
* new memory: 2 MiB segments for small requests, 20 MiB for requests under
  10 MiB, else the request rounded up to 2 MiB; with a memory limit
  (``set_per_process_memory_fraction``) a new segment that would pass it
  fails, and then the allocator frees cache and retries: first oversize
  blocks (``release_available_cached_blocks``, only with ``max_split_size``),
  then every unsplit cached block after waiting for pending frees
  (``release_cached_blocks``); only then is it an OOM;
* ``garbage_collection_threshold`` (with a limit): before a new segment,
  unsplit large blocks unused for longer than average are released until
  reserved memory is under the threshold;
* expandable segments: one growing segment per stream and pool, mapped in
  pages (2 MiB small pool, 20 MiB large pool), grown at the lowest address
  where free + unmapped space fits the request, unmapped page by page when
  the cache is released.

Frees complete where the recording says they did (a free that waited for
another stream's events stays pending until then, or until the allocator
synchronises to release cache).  Blocks are small objects linked to their
neighbours, as in the allocator; the free lists are sorted lists of integer
keys, so best fit is a bisection.

This module is the core (malloc, best fit, split, free, merge); the data
types are in :mod:`.blocks`, releasing cache in :mod:`.release`, expandable
segments in :mod:`.expandable` (mixins of :class:`Allocator`).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left

from ..core import allocator_rules as rules
from .blocks import (
    ADDR_MASK,
    DEFAULT_GPU_BYTES,
    LARGE_PAGE,
    SEG_ALLOC,
    SEG_MAP,
    SHIFT_SIZE,
    SHIFT_STREAM,
    SMALL_SIZE,
    SYNTH_BASE,
    Block,
    Expandable,
    Pool,
)
from .expandable import ExpandableMixin
from .release import ReleaseMixin


class Allocator(ReleaseMixin, ExpandableMixin):
    """The allocator's state and its malloc / free, event for event.

    ``limit``: bytes allowed (as ``set_per_process_memory_fraction`` sets
    them); None: no limit.  ``hints``: recorded segment events per request
    index, whose addresses new segments take when they fit (see
    :mod:`.requests`).  Segment events are appended to :attr:`events` as
    ``(request index, action, address, size)``.
    """

    def __init__(
        self,
        cfg: rules.AllocatorConfig,
        limit: int | None = None,
        gpu_bytes: int | None = None,
        hints: dict | None = None,
    ) -> None:
        self.cfg = cfg
        self.max_split = cfg.max_split_size
        self.max_non_split = cfg.max_non_split_rounding
        self.expandable = cfg.expandable_segments
        self.set_fraction = limit is not None
        self.allowed = int(limit) if limit is not None else 0
        self.gc_on = self.set_fraction and cfg.garbage_collection_threshold > 0
        gpu = gpu_bytes or DEFAULT_GPU_BYTES
        self.reserve_bytes = gpu + gpu // 8  # address space of one expandable segment
        self.pools: dict[tuple[int, bool], Pool] = {}
        self.hints = hints or {}
        self.used_hints: set[tuple[int, int]] = set()
        self.segments: dict[int, Block | None] = {}  # ptr -> head block of a cudaMalloc'd segment
        self.seg_size: dict[int, int] = {}
        self.expandables: list[Expandable] = []
        self.synth = SYNTH_BASE
        self.round_cache: dict[int, int] = {}
        self.events: list[tuple[int, int, int, int]] = []
        self.tag = -1  # the request being served
        # Counters as memory_stats names them.
        self.total = 0  # total_allocated_memory = reserved bytes
        self.allocated = 0
        self.active = 0
        self.n_alloc = 0  # num_device_alloc (cudaMalloc + maps)
        self.n_free = 0  # num_device_free
        self.retries = 0
        self.syncs = 0
        self.pending_blocks: set[Block] = set()
        self.freeable: list[int] = []  # private pools whose graphs are gone (releasable)

    # -- helpers ---------------------------------------------------------------
    def pool(self, private: int, small: bool) -> Pool:
        p = self.pools.get((private, small))
        if p is None:
            p = self.pools[(private, small)] = Pool(small, private)
        return p

    def round(self, size: int) -> int:
        r = self.round_cache.get(size)
        if r is None:
            r = self.round_cache[size] = self.cfg.round_size(size)
        return r

    def _overlaps(self, ptr: int, size: int) -> bool:
        end = ptr + size
        for p, s in self.seg_size.items():
            if p < end and ptr < p + s:
                return True
        for es in self.expandables:
            if es.base < end and ptr < es.base + es.reserve:
                return True
        return False

    def _address(self, action: int, size: int) -> int:
        """The recorded address of this request's new segment if it is free, else a new one."""
        for j, (act, addr, sz) in enumerate(self.hints.get(self.tag, ())):
            if act != action or (self.tag, j) in self.used_hints:
                continue
            if action == SEG_ALLOC and sz != size:
                continue
            span = size if action == SEG_ALLOC else self.reserve_bytes
            if action == SEG_MAP:
                self._cut_reservations(addr)
            if not self._overlaps(addr, span):
                self.used_hints.add((self.tag, j))
                return addr
        ptr = self.synth
        self.synth += -(-size // LARGE_PAGE) * LARGE_PAGE + LARGE_PAGE
        return ptr

    # -- seeding -----------------------------------------------------------------
    def add_segment(
        self,
        ptr: int,
        size: int,
        sidx: int,
        private: int,
        small: bool,
        blocks: list[tuple[int, int, int, int]],
    ) -> dict[int, Block]:
        """A segment that exists before the first request; ``blocks``: (ptr, size, state, req)
        with state 0 allocated, 1 pending, 2 free.  Returns the live blocks by address."""
        pool = self.pool(private, small)
        self.segments[ptr] = None
        self.seg_size[ptr] = size
        self.total += size
        return self._lay_blocks(pool, sidx, blocks, None)

    def _lay_blocks(self, pool, sidx, blocks, es, chain=None) -> dict[int, Block]:
        live = {}
        own = [] if chain is None else chain
        for ptr, size, state, req in blocks:
            b = Block(ptr, size, sidx, pool, es)
            if state == 0:
                b.alloc, b.req = True, req
                self.allocated += size
                self.active += size
                live[ptr] = b
            elif state == 1:
                b.pending, b.req = True, req
                self.active += size
                self.pending_blocks.add(b)
                live[ptr] = b
            own.append(b)
        if chain is None:
            for a, b in itertools.pairwise(own):
                a.next, b.prev = b, a
            if own:
                self.segments[own[0].ptr] = own[0]
        for b in own:
            if b.mapped and not b.alloc and not b.pending:
                pool.insert(b)
        return live

    # -- malloc ------------------------------------------------------------------
    def malloc(self, req: int, sidx: int, private: int) -> Block | None:
        """Serve a request of ``req`` bytes; None when it is out of memory."""
        size = self.round(req)
        pool = self.pool(private, size <= SMALL_SIZE)
        alloc_size = rules.segment_size_for(size)
        block = self.get_free_block(pool, size, sidx)
        if block is None:
            if self.gc_on:
                self.garbage_collect()
            block = self.alloc_block(pool, size, alloc_size, sidx, False)
            if block is None and self.release_available(pool, size, sidx):
                block = self.alloc_block(pool, size, alloc_size, sidx, False)
            # During CUDA graph capture (private pools) the cache is not released.
            if block is None and private < 0:
                self.release_cached()
                block = self.alloc_block(pool, size, alloc_size, sidx, True)
            if block is None:
                return None
        return self.alloc_found(pool, block, size, req, sidx)

    def alloc_found(self, pool: Pool, block: Block, size: int, req: int, sidx: int) -> Block:
        remaining = block.size - size
        if rules.should_split(remaining, size, pool.small or self.expandable, self.max_split):
            nb = Block(block.ptr, size, sidx, pool, block.es)
            nb.prev = block.prev
            if nb.prev is not None:
                nb.prev.next = nb
            nb.next = block
            block.prev = nb
            block.ptr += size
            block.size -= size
            pool.insert(block)
            if nb.prev is None and nb.es is None:
                self.segments[nb.ptr] = nb
            block = nb
        block.alloc = True
        block.req = req
        self.allocated += block.size
        self.active += block.size
        return block

    def get_free_block(self, pool: Pool, size: int, sidx: int) -> Block | None:
        if self.gc_on:
            pool.gc_calls += 1
        keys = pool.keys
        j = bisect_left(keys, (sidx << SHIFT_STREAM) | (size << SHIFT_SIZE))
        n = len(keys)
        if j == n or keys[j] >> SHIFT_STREAM != sidx:
            return None
        b = pool.blocks[keys[j]]
        if b.es is not None:
            if self.expandable:
                # Best fit counts the unmapped space a block could grow into.
                def grow(x):
                    nx = x.next
                    return x.size + (nx.size if nx is not None and not nx.mapped else 0)

                j += 1
                while b.es is not None and j < n and keys[j] >> SHIFT_STREAM == sidx:
                    c = pool.blocks[keys[j]]
                    if grow(c) >= grow(b):
                        break
                    b = c
                    j += 1
            else:  # expandable segments switched off later: skip their blocks
                while b.es is not None:
                    j += 1
                    if j == n or keys[j] >> SHIFT_STREAM != sidx:
                        return None
                    b = pool.blocks[keys[j]]
        if not rules.may_serve(b.size, size, self.max_split, self.max_non_split):
            return None
        pool.remove(b)
        return b

    def alloc_block(
        self, pool: Pool, size: int, alloc_size: int, sidx: int, retry: bool
    ) -> Block | None:
        if retry:
            self.retries += 1
        if self.set_fraction and self.total + alloc_size > self.allowed:
            return None
        if self.expandable:
            return self.allocate_expandable(pool, sidx, size)
        ptr = self._address(SEG_ALLOC, alloc_size)
        b = Block(ptr, alloc_size, sidx, pool)
        self.segments[ptr] = b
        self.seg_size[ptr] = alloc_size
        self.total += alloc_size
        self.n_alloc += 1
        self.events.append((self.tag, SEG_ALLOC, ptr, alloc_size))
        return b

    # -- free --------------------------------------------------------------------
    def _merge(self, dst: Block, src: Block | None) -> int:
        if src is None or src.alloc or src.pending or dst.mapped != src.mapped:
            return 0
        if src.mapped:
            src.pool.remove(src)
        else:
            src.pool.uremove(src)
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            elif dst.es is None:
                self.segments[dst.ptr] = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def free_requested(self, b: Block) -> None:
        b.alloc = False
        self.allocated -= b.size

    def free_block(self, b: Block) -> None:
        """A free completes: the block merges with free neighbours and is cached."""
        self.active -= b.size
        self._merge(b, b.prev)
        self._merge(b, b.next)
        b.pool.insert(b)

    # -- inspection ----------------------------------------------------------------
    def free_stats(self) -> tuple[int, int]:
        """(free bytes in mapped blocks, largest free block) over every pool."""
        total = largest = 0
        for pool in self.pools.values():
            for k in pool.keys:
                size = (k >> SHIFT_SIZE) & ADDR_MASK
                total += size
                if size > largest:
                    largest = size
        return total, largest

    def free_for(self, private: int, small: bool, sidx: int) -> tuple[int, int]:
        """(free bytes, largest free block) a request on ``sidx`` could use in its pool."""
        pool = self.pools.get((private, small))
        total = largest = 0
        if pool is None:
            return 0, 0
        for k in pool.keys:
            if k >> SHIFT_STREAM == sidx:
                size = (k >> SHIFT_SIZE) & ADDR_MASK
                total += size
                largest = max(largest, size)
        return total, largest
