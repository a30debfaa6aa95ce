"""Releasing cached memory: cudaFree of whole segments, unmapping expandable pages.

The paths of c10/cuda/CUDACachingAllocator.cpp: ``release_available_cached_blocks``
(oversize blocks, with ``max_split_size``), ``release_cached_blocks`` (every
unsplit cached block, after waiting for pending frees; also the program's
``empty_cache``), and the garbage collector of ``garbage_collection_threshold``.
A mixin of :class:`~.simulator.Allocator`.
"""

from __future__ import annotations

from bisect import bisect_left

from ..core import allocator_rules as rules
from .blocks import SEG_FREE, SHIFT_SIZE, SHIFT_STREAM, AllocatorBase, Block, Pool


class ReleaseMixin(AllocatorBase):
    """cudaFree paths of the allocator model."""

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
            if (
                act == SEG_FREE
                and head is not None
                and head.pool.private >= 0
                and head.pool.private not in self.freeable
            ):
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
                c = pool.blocks.get(k)
                if c is None or c.is_split() or c.es is not None:
                    continue
                age = calls - c.gc_base
                if age >= threshold_age:
                    freed = True
                    reclaimed += c.size
                    total_age -= age
                    count -= 1
                    self.release_block(c)
