"""The simulator's data: blocks, free lists (pools), expandable segments' reservations.

Blocks are small objects linked to their neighbours, as in the allocator; a
pool's free lists are sorted lists of integer keys, so best fit is a bisection.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING

from ..core import allocator_rules as rules
from ..core.snapshot import Action

SMALL_SIZE = rules.SMALL_SIZE
SMALL_PAGE = rules.SMALL_BUFFER  # expandable page, small pool
LARGE_PAGE = rules.LARGE_BUFFER  # expandable page, large pool
# Free-list keys: stream << 128 | size << 64 | address (64-bit fields: sizes and
# addresses of any trace, however odd, keep their order and never collide).
SHIFT_STREAM = 128
SHIFT_SIZE = 64
ADDR_MASK = (1 << SHIFT_SIZE) - 1
SYNTH_BASE = 1 << 47  # addresses of segments the recording never had
DEFAULT_GPU_BYTES = 80 << 30

SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP = (
    int(Action.SEGMENT_ALLOC),
    int(Action.SEGMENT_FREE),
    int(Action.SEGMENT_MAP),
    int(Action.SEGMENT_UNMAP),
)


class Block:
    """A block of a segment (allocated, pending, free or, in expandable segments, unmapped)."""

    __slots__ = (
        "alloc",
        "es",
        "gc_base",
        "mapped",
        "next",
        "pending",
        "pool",
        "prev",
        "ptr",
        "req",
        "sidx",
        "size",
    )

    def __init__(
        self,
        ptr: int,
        size: int,
        sidx: int,
        pool: Pool,
        es=None,  # the Expandable of an expandable segment
        mapped: bool = True,
    ) -> None:
        self.ptr = ptr
        self.size = size
        self.req = 0
        self.sidx = sidx
        self.pool = pool
        self.alloc = False
        self.pending = False
        self.mapped = mapped
        self.prev: Block | None = None
        self.next: Block | None = None
        self.es = es
        self.gc_base = 0

    def key(self) -> int:
        return (self.sidx << SHIFT_STREAM) | (self.size << SHIFT_SIZE) | self.ptr

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class Pool:
    """A BlockPool: free mapped blocks sorted by (stream, size, address); unmapped by address."""

    __slots__ = ("blocks", "gc_calls", "keys", "private", "small", "ublocks", "ukeys")

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

    __slots__ = ("base", "page", "pool", "reserve", "sidx")

    def __init__(self, base, page, reserve, sidx, pool):
        self.base, self.page, self.reserve, self.sidx, self.pool = base, page, reserve, sidx, pool


class AllocatorBase:
    """What the mixins (:mod:`.release`, :mod:`.expandable`) use of
    :class:`~.simulator.Allocator`, declared for type checkers only: the state is
    set in ``Allocator.__init__`` and the methods are Allocator's own."""

    if TYPE_CHECKING:
        cfg: rules.AllocatorConfig
        pools: dict[tuple[int, bool], Pool]
        hints: dict
        segments: dict[int, Block | None]
        seg_size: dict[int, int]
        expandables: list[Expandable]
        reserve_bytes: int
        max_split: int
        allowed: int
        total: int
        n_alloc: int
        n_free: int
        syncs: int
        tag: int
        events: list[tuple[int, int, int, int]]
        pending_blocks: set[Block]
        freeable: list[int]

        def pool(self, private: int, small: bool) -> Pool: ...

        def _address(self, action: int, size: int) -> int: ...

        def _lay_blocks(self, pool, sidx, blocks, es, chain=None) -> dict[int, Block]: ...

        def _merge(self, dst: Block, src: Block | None) -> int: ...

        def free_block(self, b: Block) -> None: ...

        def unmap_block(self, b: Block) -> None: ...
