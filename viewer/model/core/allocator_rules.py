"""Size rules of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

Only the arithmetic: how a request is rounded, which pool serves it, how big a
new segment would be, whether a block is split.  One place for every user: the
OOM verdicts and "would N bytes fit?", the replay and the what-if simulator, which
also needs the settings as the allocator parses them (:class:`AllocatorConfig`,
:func:`parse_conf`).  Their C loops apply the same rules (``_native/common/allocator_rules.h``)
with the numbers :func:`native_rules` hands them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

MIN_BLOCK_SIZE = 512  # kMinBlockSize: every block is a multiple of this
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to 1 MiB use the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small-pool segments are 2 MiB
LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment for large requests below 10 MiB
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge: bigger segments round up to 2 MiB
ROUNDUP_INTERVALS = 16  # roundup_power2_divisions classes: 1 MiB, 2 MiB, ... 32 GiB and up
NO_LIMIT = (1 << 64) - 1  # max_split_size when unset (SIZE_MAX)
# The sizes the compiled loops need, handed to them with the settings (native_rules):
# the C files declare none of their own.
NATIVE_SIZES = (
    MIN_BLOCK_SIZE,
    SMALL_SIZE,
    SMALL_BUFFER,
    LARGE_BUFFER,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
)


def roundup_divisions(size: int, settings: dict[str, Any] | None) -> int:
    """``roundup_power2_divisions`` in force for ``size`` (0 or 1: none)."""
    table = (settings or {}).get("roundup_power2_divisions")
    if not isinstance(table, dict) or size <= 0:
        return 0
    index = min(max(size.bit_length() - 1 - 20, 0), ROUNDUP_INTERVALS - 1)
    value = table.get(str(1 << index), 0)
    return value if isinstance(value, int) and value > 0 else 0


def round_size(size: int, settings: dict[str, Any] | None = None) -> int:
    """The block size the allocator reserves for a request of ``size`` bytes."""
    return _rounded(size, roundup_divisions(size, settings))


def is_small_request(rounded: int) -> bool:
    return rounded <= SMALL_SIZE


def segment_size_for(rounded: int) -> int:
    """Size of the cudaMalloc the allocator attempts when no cached block fits."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)


def should_split(
    remaining: int, rounded: int, small_or_expandable: bool, max_split: int | None
) -> bool:
    """Whether the allocator splits a free block it serves a ``rounded`` request from,
    leaving ``remaining`` bytes as a new free block (``shouldSplit``): any remainder in
    the small pool and in expandable segments; in the large pool only a remainder over
    1 MiB, and only for requests under ``max_split`` (None: unlimited)."""
    if small_or_expandable:
        return remaining >= MIN_BLOCK_SIZE
    return (max_split is None or rounded < max_split) and remaining > SMALL_SIZE


def native_rules(
    max_split: int | None, max_non_split: int, divisions: Sequence[int]
) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """The rules as the C loops take them (``_native/common/allocator_rules.h``):
    ``max_split`` (None: unlimited, as :data:`NO_LIMIT`), ``max_non_split_rounding``, the
    :data:`ROUNDUP_INTERVALS` division classes and :data:`NATIVE_SIZES`."""
    if len(divisions) != ROUNDUP_INTERVALS:
        raise ValueError(f"{ROUNDUP_INTERVALS} division classes expected")
    limit = NO_LIMIT if max_split is None else max_split
    return limit, max_non_split, tuple(divisions), NATIVE_SIZES


def max_split_size(settings: dict[str, Any] | None) -> int | None:
    """``max_split_size_mb`` in bytes, or None when unlimited."""
    value = (settings or {}).get("max_split_size", -1)
    if isinstance(value, int) and 0 < value < (1 << 62):
        return value
    return None


def may_serve(
    block_size: int, rounded: int, max_split: int | None, max_non_split: int = LARGE_BUFFER
) -> bool:
    """Whether the best-fit search may hand a free block of ``block_size`` to a rounded
    request: big enough, and with ``max_split`` set (None: unlimited), oversize blocks
    serve only oversize requests, and not when they would waste ``max_non_split`` bytes
    (``max_non_split_rounding``) or more."""
    if block_size < rounded:
        return False
    if max_split is None:
        return True
    if rounded < max_split <= block_size:
        return False
    return not (rounded >= max_split and block_size >= rounded + max_non_split)


def block_usable(block_size: int, rounded: int, settings: dict[str, Any] | None) -> bool:
    """:func:`may_serve` under a snapshot's ``allocator_settings`` (which do not carry
    ``max_non_split_rounding``: its default)."""
    return may_serve(block_size, rounded, max_split_size(settings))


# -- settings as the allocator parses them -----------------------------------

MIB = 1 << 20


@dataclass(frozen=True)
class AllocatorConfig:
    """The caching allocator's size-related settings (``PYTORCH_CUDA_ALLOC_CONF``).

    ``roundup_power2_divisions[i]`` applies to sizes in ``[2**i MiB, 2**(i+1) MiB)``
    (the last class is open-ended); 0 or 1 means plain 512-byte rounding.
    """

    max_split_size: int = NO_LIMIT
    max_non_split_rounding: int = LARGE_BUFFER
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    garbage_collection_threshold: float = 0.0
    expandable_segments: bool = False

    def divisions(self, size: int) -> int:
        index = min(max(size.bit_length() - 1 - 20, 0), ROUNDUP_INTERVALS - 1)
        return self.roundup_power2_divisions[index]

    def round_size(self, size: int) -> int:
        """The block size for a request of ``size`` bytes (round_size)."""
        return _rounded(size, self.divisions(size))

    def describe(self) -> str:
        """The settings as a PYTORCH_CUDA_ALLOC_CONF string (defaults left out)."""
        parts = []
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.max_split_size < NO_LIMIT:
            parts.append(f"max_split_size_mb:{self.max_split_size // MIB}")
        if self.max_non_split_rounding != LARGE_BUFFER:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding // MIB}")
        if any(d > 1 for d in self.roundup_power2_divisions):
            divs = self.roundup_power2_divisions
            if len(set(divs)) == 1:
                parts.append(f"roundup_power2_divisions:{divs[0]}")
            else:
                table = ",".join(f"{1 << i}:{d}" for i, d in enumerate(divs))
                parts.append(f"roundup_power2_divisions:[{table}]")
        if self.garbage_collection_threshold > 0:
            parts.append(f"garbage_collection_threshold:{self.garbage_collection_threshold:g}")
        return ",".join(parts) or "(defaults)"


def _rounded(size: int, divisions: int) -> int:
    """round_size given the roundup_power2_divisions that apply to ``size``."""
    if size < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    if divisions > 1 and size > MIN_BLOCK_SIZE * divisions:
        return _next_division(size, divisions)
    return MIN_BLOCK_SIZE * ((size + MIN_BLOCK_SIZE - 1) // MIN_BLOCK_SIZE)


def _next_division(size: int, divisions: int) -> int:
    """roundup_power2_next_division: the next of ``divisions`` steps between powers of 2."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    base = size & ~(step - 1)
    return size if base == size else base + step


def config_from_settings(settings: dict[str, Any] | None) -> AllocatorConfig:
    """The settings recorded in a snapshot (``allocator_settings``)."""
    settings = settings or {}
    msplit = settings.get("max_split_size", -1)
    table = settings.get("roundup_power2_divisions")
    divs = [0] * ROUNDUP_INTERVALS
    if isinstance(table, dict):
        for key, value in table.items():
            try:
                index = int(key).bit_length() - 1
            except (TypeError, ValueError):
                continue
            if 0 <= index < ROUNDUP_INTERVALS and isinstance(value, int) and value >= 0:
                divs[index] = value
    elif isinstance(table, (list, tuple)) and len(table) == ROUNDUP_INTERVALS:
        divs = [int(v) if isinstance(v, int) and v >= 0 else 0 for v in table]
    gc = settings.get("garbage_collection_threshold", 0.0)
    cfg = AllocatorConfig(
        max_split_size=msplit if isinstance(msplit, int) and 0 < msplit < NO_LIMIT else NO_LIMIT,
        roundup_power2_divisions=tuple(divs),
        garbage_collection_threshold=float(gc) if isinstance(gc, (int, float)) else 0.0,
        expandable_segments=bool(settings.get("expandable_segments", False)),
    )
    # max_non_split_rounding is not in the snapshot's settings; the string has it.
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    if isinstance(conf, str) and "max_non_split_rounding_mb" in conf:
        try:
            cfg = replace(cfg, max_non_split_rounding=parse_conf(conf).max_non_split_rounding)
        except ValueError:
            pass
    return cfg


class ConfError(ValueError):
    """A PYTORCH_CUDA_ALLOC_CONF string the allocator would refuse (one-line message)."""


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    buf: list[str] = []
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append("".join(buf))
                buf = []
            out.append(ch)
        elif ch != " ":
            buf.append(ch)
    if buf:
        out.append("".join(buf))
    return out


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def parse_conf(text: str) -> AllocatorConfig:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string as the allocator does.

    Like the allocator, every setting starts from its default, so
    ``"expandable_segments:True"`` means the defaults plus expandable segments.
    Options that do not change placement (pinned memory, release_lock_on_cudamalloc)
    are accepted and ignored; ``backend:cudaMallocAsync`` cannot be simulated.
    Raises :class:`ConfError` with one line naming what is wrong.
    """
    tok = _tokens(text.strip())
    values: dict[str, Any] = {}
    divs = [0] * ROUNDUP_INTERVALS
    i = 0

    def expect(j: int, ch: str) -> None:
        if j >= len(tok) or tok[j] != ch:
            raise ConfError(f"expected '{ch}' in {text!r}")

    def number(j: int, what: str, kind=int):
        if j >= len(tok):
            raise ConfError(f"expected a value for {what}")
        try:
            return kind(tok[j])
        except ValueError:
            raise ConfError(f"{what}: {tok[j]!r} is not a number") from None

    def boolean(j: int, what: str) -> bool:
        if j >= len(tok) or tok[j] not in ("True", "False"):
            raise ConfError(f"expected True or False for {what}")
        return tok[j] == "True"

    while i < len(tok):
        key = tok[i]
        expect(i + 1, ":")
        i += 2
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            mb = number(i, key)
            if mb < LARGE_BUFFER // MIB:
                raise ConfError(f"{key} too small, must be >= {LARGE_BUFFER // MIB}")
            values[key] = min(mb * MIB, NO_LIMIT)
        elif key == "garbage_collection_threshold":
            val = number(i, key, float)
            if not 0.0 < val < 1.0:
                raise ConfError("garbage_collection_threshold must be in (0.0, 1.0)")
            values[key] = val
        elif key == "roundup_power2_divisions":
            if i < len(tok) and tok[i] == "[":
                first, last = True, 0
                i += 1
                while i < len(tok) and tok[i] != "]":
                    interval = tok[i]
                    expect(i + 1, ":")
                    d = number(i + 2, key)
                    i += 2
                    if d != 0 and not _is_pow2(d):
                        raise ConfError(
                            "roundup_power2_divisions: divisions must be a power of 2 or 0"
                        )
                    if interval == ">":
                        for j in range(last, ROUNDUP_INTERVALS):
                            divs[j] = d
                    else:
                        size_mb = number(i - 2, key)
                        if not _is_pow2(size_mb):
                            raise ConfError(
                                "roundup_power2_divisions: intervals must be powers of 2"
                            )
                        index = min(size_mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
                        if first:  # the first value also covers every smaller class
                            for j in range(index):
                                divs[j] = d
                            first = False
                        divs[index] = d
                        last = index
                    if i + 1 < len(tok) and tok[i + 1] != "]":
                        expect(i + 1, ",")
                        i += 1
                    i += 1
                if i >= len(tok):
                    raise ConfError("roundup_power2_divisions: missing ']'")
            else:
                d = number(i, key)
                if not _is_pow2(d):
                    raise ConfError("roundup_power2_divisions: divisions must be a power of 2")
                divs = [d] * ROUNDUP_INTERVALS
            values[key] = tuple(divs)
        elif key == "expandable_segments":
            values[key] = boolean(i, key)
        elif key in (
            "release_lock_on_cudamalloc",
            "pinned_use_cuda_host_register",
            "pinned_use_background_threads",
            "graph_capture_record_stream_reuse",
        ):
            boolean(i, key)
        elif key == "pinned_num_register_threads":
            number(i, key)
        elif key == "backend":
            if i >= len(tok) or tok[i] not in ("native", "cudaMallocAsync"):
                raise ConfError("backend must be native or cudaMallocAsync")
            if tok[i] == "cudaMallocAsync":
                raise ConfError(
                    "backend:cudaMallocAsync is CUDA's own allocator; it cannot be simulated"
                )
        else:
            raise ConfError(f"unrecognized allocator option: {key!r}")
        if i + 1 < len(tok):
            expect(i + 1, ",")
            i += 1
        i += 1
    return AllocatorConfig(
        max_split_size=values.get("max_split_size_mb", NO_LIMIT),
        max_non_split_rounding=values.get("max_non_split_rounding_mb", LARGE_BUFFER),
        roundup_power2_divisions=values.get("roundup_power2_divisions", (0,) * ROUNDUP_INTERVALS),
        garbage_collection_threshold=values.get("garbage_collection_threshold", 0.0),
        expandable_segments=values.get("expandable_segments", False),
    )
