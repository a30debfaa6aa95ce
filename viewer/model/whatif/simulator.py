"""A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, torch 2.11).

It takes a request stream (:mod:`.requests`) and answers it the way the
allocator would under given settings (:class:`~..allocator_rules.AllocatorConfig`)
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
"""

from __future__ import annotations

from bisect import bisect_left, insort

from .. import allocator_rules as rules
from ..snapshot import Action

SMALL_SIZE = rules.SMALL_SIZE
MIN_BLOCK = rules.MIN_BLOCK_SIZE
SMALL_PAGE = rules.SMALL_BUFFER  # expandable page, small pool
LARGE_PAGE = rules.LARGE_BUFFER  # expandable page, large pool
# Free-list keys: stream << 128 | size << 64 | address (64-bit fields: sizes and
# addresses of any trace, however odd, keep their order and never collide).
SHIFT_STREAM = 128
SHIFT_SIZE = 64
ADDR_MASK = (1 << SHIFT_SIZE) - 1
SYNTH_BASE = 1 << 47  # addresses of segments the recording never had
DEFAULT_GPU_BYTES = 80 << 30

SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP = (int(Action.SEGMENT_ALLOC), int(Action.SEGMENT_FREE),
                                           int(Action.SEGMENT_MAP), int(Action.SEGMENT_UNMAP))


class Block:
    """A block of a segment (allocated, pending, free or, in expandable segments, unmapped)."""

    __slots__ = ("ptr", "size", "req", "sidx", "pool", "alloc", "pending", "mapped", "prev",
                 "next", "es", "gc_base")

    def __init__(self, ptr, size, sidx, pool, es=None, mapped=True):
        self.ptr = ptr
        self.size = size
        self.req = 0
        self.sidx = sidx
        self.pool = pool
        self.alloc = False
        self.pending = False
        self.mapped = mapped
        self.prev = None
        self.next = None
        self.es = es
        self.gc_base = 0

    def key(self) -> int:
        return (self.sidx << SHIFT_STREAM) | (self.size << SHIFT_SIZE) | self.ptr

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class Pool:
    """A BlockPool: free mapped blocks sorted by (stream, size, address); unmapped by address."""

    __slots__ = ("small", "private", "keys", "blocks", "ukeys", "ublocks", "gc_calls")

    def __init__(self, small: bool, private: int) -> None:
        self.small = small
        self.private = private
        self.keys: list[int] = []
        self.blocks: dict[int, Block] = {}
        self.ukeys: list[int] = []
        self.ublocks: dict[int, Block] = {}
        self.gc_calls = 0

    def insert(self, b: Block) -> None:
        b.gc_base = self.gc_calls
        k = b.key()
        insort(self.keys, k)
        self.blocks[k] = b

    def remove(self, b: Block) -> None:
        k = b.key()
        del self.keys[bisect_left(self.keys, k)]
        del self.blocks[k]

    def uinsert(self, b: Block) -> None:
        k = (b.sidx << SHIFT_STREAM) | b.ptr
        insort(self.ukeys, k)
        self.ublocks[k] = b

    def uremove(self, b: Block) -> None:
        k = (b.sidx << SHIFT_STREAM) | b.ptr
        del self.ukeys[bisect_left(self.ukeys, k)]
        del self.ublocks[k]


class Expandable:
    """The reserved address range of one expandable segment."""

    __slots__ = ("base", "page", "reserve", "sidx", "pool")

    def __init__(self, base, page, reserve, sidx, pool):
        self.base, self.page, self.reserve, self.sidx, self.pool = base, page, reserve, sidx, pool


class Allocator:
    """The allocator's state and its malloc / free, event for event.

    ``limit``: bytes allowed (as ``set_per_process_memory_fraction`` sets
    them); None: no limit.  ``hints``: recorded segment events per request
    index, whose addresses new segments take when they fit (see
    :mod:`.requests`).  Segment events are appended to :attr:`events` as
    ``(request index, action, address, size)``.
    """

    def __init__(self, cfg: rules.AllocatorConfig, limit: int | None = None,
                 gpu_bytes: int | None = None, hints: dict | None = None) -> None:
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
        self.segments: dict[int, Block] = {}  # ptr -> head block of a cudaMalloc'd segment
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

    @staticmethod
    def allocation_size(size: int) -> int:
        return rules.segment_size_for(size)

    def _overlaps(self, ptr: int, size: int) -> bool:
        end = ptr + size
        for p, s in self.seg_size.items():
            if p < end and ptr < p + s:
                return True
        for es in self.expandables:
            if es.base < end and ptr < es.base + es.reserve:
                return True
        return False

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
    def add_segment(self, ptr: int, size: int, sidx: int, private: int, small: bool,
                    blocks: list[tuple[int, int, int, int]]) -> dict[int, Block]:
        """A segment that exists before the first request; ``blocks``: (ptr, size, state, req)
        with state 0 allocated, 1 pending, 2 free.  Returns the live blocks by address."""
        pool = self.pool(private, small)
        self.segments[ptr] = None
        self.seg_size[ptr] = size
        self.total += size
        return self._lay_blocks(pool, sidx, blocks, None)

    def add_expandable(self, ranges: list[tuple[int, int, list]], sidx: int, private: int,
                       small: bool) -> dict[int, Block]:
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
        for a, b in zip(chain, chain[1:]):
            a.next, b.prev = b, a
        for b in chain:
            if not b.mapped:
                pool.uinsert(b)
        return live

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
            for a, b in zip(own, own[1:]):
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
        if pool.small or self.expandable:
            split = remaining >= MIN_BLOCK
        else:
            split = size < self.max_split and remaining > SMALL_SIZE
        if split:
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
        if size < self.max_split and b.size >= self.max_split:
            return None
        if size >= self.max_split and b.size >= size + self.max_non_split:
            return None
        pool.remove(b)
        return b

    def alloc_block(self, pool: Pool, size: int, alloc_size: int, sidx: int,
                    retry: bool) -> Block | None:
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

    # -- releasing cache ---------------------------------------------------------
    def release_block(self, b: Block) -> None:
        """cudaFree of a whole cached segment."""
        self.n_free += 1
        self.events.append((self.tag, SEG_FREE, b.ptr, b.size))
        self.total -= b.size
        b.pool.remove(b)
        self.segments.pop(b.ptr, None)
        self.seg_size.pop(b.ptr, None)

    def release_available(self, pool: Pool, size: int, sidx: int) -> bool:
        """Free oversize cached blocks, just enough for the request."""
        if self.max_split >= rules.NO_LIMIT:
            return False
        want = max(size, self.max_split)
        keys = pool.keys
        j = bisect_left(keys, (sidx << SHIFT_STREAM) | (want << SHIFT_SIZE))
        if j == len(keys) or keys[j] >> SHIFT_STREAM != sidx:
            if j == 0:
                return False
            released = 0
            j -= 1
            while released < want:
                b = pool.blocks[keys[j]]
                if b.size < self.max_split or b.sidx != sidx or not self._whole(b):
                    break
                released += b.size
                if j != 0:
                    j -= 1
                    self.release_block(b)
                else:
                    self.release_block(b)
                    break
            return released >= want
        b = pool.blocks[keys[j]]
        if not self._whole(b):
            return False
        self.release_block(b)
        return True

    @staticmethod
    def _whole(b: Block) -> bool:
        """A whole cudaMalloc'd segment.  Oversize blocks always are when the settings
        never changed; a window seeded under other settings may hold split ones, which
        cannot be cudaFree'd on their own."""
        return b.prev is None and b.next is None and b.es is None

    def complete_pending(self) -> None:
        """Wait for every pending free (synchronize_and_free_events)."""
        self.syncs += 1
        for b in sorted(self.pending_blocks, key=lambda x: x.ptr):
            b.pending = False
            self.free_block(b)
        self.pending_blocks.clear()

    def release_cached(self) -> None:
        """release_cached_blocks: every unsplit cached block of the ordinary pools,
        then of private pools no graph uses any more."""
        self.complete_pending()
        for small in (False, True):
            pool = self.pools.get((-1, small))
            if pool is not None:
                self.release_blocks(pool)
        for private in self.freeable:
            for small in (True, False):
                pool = self.pools.get((private, small))
                if pool is not None:
                    self.release_blocks(pool)

    def empty_cache(self) -> None:
        """The program's torch.cuda.empty_cache().  A private pool whose segment the
        recording released here had its graph destroyed: from now on it is freeable."""
        for act, addr, _ in self.hints.get(self.tag, ()):
            head = self.segments.get(addr)
            if act == SEG_FREE and head is not None and head.pool.private >= 0 \
                    and head.pool.private not in self.freeable:
                self.freeable.append(head.pool.private)
        self.release_cached()

    def release_blocks(self, pool: Pool) -> None:
        to_unmap = []
        for k in list(pool.keys):
            b = pool.blocks.get(k)
            if b is None:
                continue
            if b.es is not None:
                to_unmap.append(b)
            elif b.prev is None and b.next is None:
                self.release_block(b)
        for b in to_unmap:
            self.unmap_block(b)
            if b.prev is None and b.next is None and not b.mapped:
                pool.uremove(b)
                self.expandables.remove(b.es)

    def garbage_collect(self) -> None:
        """Release unsplit large blocks unused longer than average, down to the threshold."""
        threshold = int(self.cfg.garbage_collection_threshold * self.allowed)
        if self.total <= threshold:
            return
        target = self.total - threshold
        pool = self.pools.get((-1, False))
        if pool is None:
            return
        calls = pool.gc_calls
        total_age = 0
        count = 0
        for k in pool.keys:
            b = pool.blocks[k]
            if not b.is_split():
                total_age += calls - b.gc_base
                count += 1
        if count == 0:
            return
        reclaimed = 0
        freed = True
        while reclaimed < target and freed and count > 0:
            threshold_age = total_age / count
            freed = False
            for k in list(pool.keys):
                b = pool.blocks.get(k)
                if b is None or b.is_split() or b.es is not None:
                    continue
                age = calls - b.gc_base
                if age >= threshold_age:
                    freed = True
                    reclaimed += b.size
                    total_age -= age
                    count -= 1
                    self.release_block(b)

    # -- expandable segments -----------------------------------------------------
    def allocate_expandable(self, pool: Pool, sidx: int, size: int) -> Block | None:
        c = self.find_expandable(pool, sidx, size)
        if not c.mapped:
            self.map_block(c, min(c.size, size))
        while c.size < size:
            nc = c.next
            self.map_block(nc, min(size - c.size, nc.size))
            c = nc
        pool.remove(c)
        return c

    @staticmethod
    def _free_here(b: Block | None) -> bool:
        return b is not None and not b.alloc and not b.pending

    def find_expandable(self, pool: Pool, sidx: int, size: int) -> Block:
        """The lowest address where free and unmapped space adds up to ``size``."""
        ukeys = pool.ukeys
        j = bisect_left(ukeys, sidx << SHIFT_STREAM)
        while j < len(ukeys) and ukeys[j] >> SHIFT_STREAM == sidx:
            c = pool.ublocks[ukeys[j]]
            if self._free_here(c.prev):
                c = c.prev
            got, x = 0, c
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
