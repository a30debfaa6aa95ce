"""ATen's reductions' staging buffers at another batch size: they stop growing where the
reduction fills the GPU.

A long reduction (the bias gradient of a layer: a sum over every token of the batch) is
split over ``ctas`` thread blocks per column of outputs; their partial results meet in a
staging buffer of ``g x ctas`` blocks' worth, and ``g`` ints count the blocks finished
per column (the semaphores, allocated right after the buffer and freed before it, both
inside the one operation).  ATen sizes ``ctas`` by the values each thread would sum,
one block per 16 of them, so it grows with the batch, but never beyond the blocks the
GPU holds at once: ``ctas = min(ceil(T / g), ceil(v / 16))`` (and at least
``ceil(v / 256)``), ``T`` = multiprocessors x blocks each holds.

Measured on the tuning recordings (H200: 132 multiprocessors, 2048 threads each), every
staging buffer is ``g x ctas`` blocks of 32 KiB, ``ctas`` doubles with the batch, and
the two that stop stop at ``T = 4224`` (32 blocks of 64 threads per multiprocessor)
exactly: the Trainer BERT's masked-LM bias gradient (``g = 125``: 125 MiB at batch 4,
132.8 MiB = 125 x 34 x 32 KiB at 8 and 12; scaled, the peak at 12 was 15 % high) and a
Swin layer's (``g = 3``: 1408 = ceil(4224 / 3) blocks at every batch).

So a buffer found at ``ctas = ceil(T / g)`` is at the cap and stays there at a larger
batch; at a smaller one it stays unless the batch falls below where the cap began (the
range goes down to ``ceil(cap x f)`` blocks).  One below the cap grows in proportion up
to it (the range up to the proportional size, should ``T`` be other than modelled).
Only where the GPU is known (:func:`..core.gpu_specs.multiprocessors`) and the buffer is
exactly ``g x ctas x`` 32 KiB; any other is judged as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..core.gpu_specs import multiprocessors
from ..whatif import requests as rq

#: One block's partial results in the staging buffer (fp32 accumulators of its outputs).
BLOCK_BYTES = 32 << 10
#: The threads of one reduction block (the blocks a multiprocessor holds are its threads
#: over this): what the capped buffers measured say (see the module docstring).
BLOCK_THREADS = 64
#: The semaphores: one int per column of outputs, at most this many bytes.
MAX_SEMAPHORE_BYTES = 64 << 10
#: The cap of a buffer whose cap is not known (more blocks than the modelled GPU takes):
#: none it could reach.
NO_CAP = 1 << 30
#: ATen splits a reduction over blocks by the values per thread: one block per this many.
VALUES_PER_BLOCK = 16
#: ... and no fewer than one per this many (the most values a thread sums).
MOST_VALUES = 256


@dataclass
class Staging:
    """The staging buffers of one request stream, as columns (one entry per buffer)."""

    rows: np.ndarray  # int64: the buffer's ALLOC request
    columns: np.ndarray  # int64: g, the columns of outputs (semaphores / 4)
    blocks: np.ndarray  # int64: ctas, blocks per column at the recorded batch
    cap: np.ndarray  # int64: ceil(T / g), the most blocks per column the GPU takes

    @property
    def capped(self) -> np.ndarray:
        """Bool per buffer: recorded at the cap."""
        return self.blocks == self.cap

    def _sizes(self, blocks: np.ndarray) -> np.ndarray:
        return self.columns * np.maximum(blocks, 1) * BLOCK_BYTES

    def point(self, f: Fraction) -> np.ndarray:
        """Each buffer's bytes at ``f`` times the recorded batch: in proportion up to the
        cap (at least one block per :data:`MOST_VALUES` values); one recorded at the cap
        stays there."""
        grown = -((-self.blocks * f.numerator) // f.denominator)
        least = -(
            (-self.blocks * f.numerator) // (f.denominator * (MOST_VALUES // VALUES_PER_BLOCK))
        )
        blocks = np.maximum(np.minimum(grown, self.cap), least)
        return self._sizes(np.where(self.capped, np.maximum(self.blocks, least), blocks))

    def other(self, f: Fraction) -> np.ndarray:
        """Each buffer's bytes at the other end of what the recording allows: one at the cap
        as few blocks as the smaller batch alone would need (below the cap from the start),
        one below it in proportion with no cap (a GPU holding more blocks than modelled)."""
        scaled = -((-self.blocks * f.numerator) // f.denominator)
        at_cap = -((-self.cap * f.numerator) // f.denominator)
        low = np.where(f < 1, np.minimum(at_cap, self.blocks), self.blocks)
        return self._sizes(np.where(self.capped, low, scaled))


def staging(case, free_at: np.ndarray, candidates: np.ndarray) -> Staging | None:
    """The staging buffers among ``candidates`` (bool per request: allocations judged to
    scale) of ``case``, with the GPU's cap on them; None where the GPU is not known or
    there is none.  ``free_at``: the request freeing each allocation
    (the stream's length where none does)."""
    spec = multiprocessors(getattr(case.snap, "sidecar", None))
    if spec is None:
        return None
    reqs = case.requests
    n = len(reqs)
    size = reqs.size.astype(np.int64)
    alloc = reqs.kind == rq.ALLOC
    rows = (
        np.flatnonzero(candidates[:-1] & alloc[:-1] & alloc[1:]) if n > 1 else np.zeros(0, np.int64)
    )
    if not len(rows):
        return None
    sem = rows + 1
    ok = (size[sem] >= 4) & (size[sem] <= MAX_SEMAPHORE_BYTES) & (size[sem] % 4 == 0)
    # The semaphores go first, the buffer before the operation's next allocation.
    ok &= free_at[sem] < free_at[rows]
    allocs = np.flatnonzero(alloc)
    after = np.searchsorted(allocs, sem, side="right")
    next_alloc = np.where(after < len(allocs), allocs[np.minimum(after, len(allocs) - 1)], n)
    ok &= free_at[rows] < next_alloc
    columns = size[sem] // 4
    ok &= size[rows] % np.maximum(columns * BLOCK_BYTES, 1) == 0
    if not ok.any():
        return None
    rows, columns = rows[ok], columns[ok]
    blocks = size[rows] // (columns * BLOCK_BYTES)
    sms, threads = spec
    target = sms * max(1, threads // BLOCK_THREADS)
    cap = -((-target) // columns)
    # More blocks than the modelled GPU would take: the reduction was launched otherwise
    # (other threads per block) and its cap is not known; no cap.
    cap = np.where(blocks > cap, NO_CAP, cap)
    return Staging(rows=rows, columns=columns, blocks=blocks, cap=cap)
