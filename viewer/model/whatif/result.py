"""What a simulation answers: :class:`SimResult` (curves, peaks, counts, OOMs) and
:class:`Oom`.  Apart from :mod:`.run` so that both simulators - the Python reference
(:mod:`.run`) and the compiled one (:mod:`.native_sim`) - build them without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core import allocator_rules as rules


@dataclass
class Oom:
    """One request the allocator could not serve."""

    request: int  # index into the request stream
    event: int  # index of its event in the device's trace
    size: int  # rounded bytes requested
    stream: int
    pool_kind: str  # "small" | "large"
    reserved_bytes: int
    allocated_bytes: int
    free_in_pool_bytes: int  # free in the request's pool and stream after releasing cache
    largest_free_bytes: int
    kind: str  # "fragmentation" | "capacity"
    recorded: bool  # the recording had an OOM here too
    new_memory_bytes: int = 0  # what the allocator tried to add (a segment / pages)
    limit: int | None = None
    expandable: bool = False


@dataclass
class SimResult:
    """What the allocator model did with one request stream under one setting."""

    config: rules.AllocatorConfig
    limit: int | None
    reserved: np.ndarray  # bytes after each request
    allocated: np.ndarray
    peak_reserved: int
    peak_reserved_request: int  # -1: before the first request
    peak_allocated: int
    fragmentation_at_peak: float  # 1 - largest free block / free bytes, at the reserved peak
    free_at_peak: int
    largest_free_at_peak: int
    n_cuda_malloc: int
    n_cuda_free: int
    n_retries: int
    ooms: list[Oom]
    recorded_ooms_avoided: list[int]  # requests that failed in the recording but fit here
    events: list[tuple[int, int, int, int]] = field(repr=False)  # (request, action, addr, size)
    final_segments: list[tuple[int, int, bool, bool]] = field(repr=False)

    @property
    def first_oom(self) -> Oom | None:
        return self.ooms[0] if self.ooms else None

    @property
    def peak_reserved_until_oom(self) -> int:
        """Peak reserved up to the first OOM (where the program would have stopped)."""
        oom = self.first_oom
        if oom is None or not len(self.reserved):
            return self.peak_reserved
        return max(int(self.reserved[: oom.request + 1].max()), int(self.reserved_before))

    reserved_before: int = 0  # before the first request
