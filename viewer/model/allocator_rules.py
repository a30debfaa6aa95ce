"""Size rules of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

Only the arithmetic: how a request is rounded, which pool serves it, how big a
new segment would be.  Used to explain OOMs and to answer "would N bytes fit?".
"""

from __future__ import annotations

from typing import Any

MIN_BLOCK_SIZE = 512  # kMinBlockSize: every block is a multiple of this
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to 1 MiB use the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small-pool segments are 2 MiB
LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment for large requests below 10 MiB
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge: bigger segments round up to 2 MiB


def roundup_divisions(size: int, settings: dict[str, Any] | None) -> int:
    """``roundup_power2_divisions`` in force for ``size`` (0 or 1: none)."""
    table = (settings or {}).get("roundup_power2_divisions")
    if not isinstance(table, dict) or size <= 0:
        return 0
    index = min(max(size.bit_length() - 1 - 20, 0), 16)
    value = table.get(str(1 << index), 0)
    return value if isinstance(value, int) and value > 0 else 0


def round_size(size: int, settings: dict[str, Any] | None = None) -> int:
    """The block size the allocator reserves for a request of ``size`` bytes."""
    if size < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    divisions = roundup_divisions(size, settings)
    if divisions > 1 and size > MIN_BLOCK_SIZE * divisions:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor >> (divisions.bit_length() - 1)
        if step == 0:
            return floor << 1
        base = size & ~(step - 1)
        return size if base == size else base + step
    return MIN_BLOCK_SIZE * ((size + MIN_BLOCK_SIZE - 1) // MIN_BLOCK_SIZE)


def is_small_request(rounded: int) -> bool:
    return rounded <= SMALL_SIZE


def segment_size_for(rounded: int) -> int:
    """Size of the cudaMalloc the allocator attempts when no cached block fits."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)


def max_split_size(settings: dict[str, Any] | None) -> int | None:
    """``max_split_size_mb`` in bytes, or None when unlimited."""
    value = (settings or {}).get("max_split_size", -1)
    if isinstance(value, int) and 0 < value < (1 << 62):
        return value
    return None


def block_usable(block_size: int, rounded: int, settings: dict[str, Any] | None) -> bool:
    """Whether a free block of ``block_size`` may serve a rounded request.

    With ``max_split_size`` set, oversize blocks only serve oversize requests,
    and not when they would waste a whole large buffer or more.
    """
    if block_size < rounded:
        return False
    limit = max_split_size(settings)
    if limit is None:
        return True
    if rounded < limit and block_size >= limit:
        return False
    if rounded >= limit and block_size >= rounded + LARGE_BUFFER:
        return False
    return True
