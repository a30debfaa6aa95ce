"""DistributedDataParallel: what DDP itself makes on each rank, named by DDP's own frames.

DDP's Reducer copies every gradient into flat gradient buckets (``bucket_cap_mb`` each,
25 MB by default) and all-reduces them; with ``gradient_as_bucket_view=True`` the
parameters' ``.grad`` are views into the buckets (one storage, counted once), otherwise
each ``.grad`` is a tensor of its own and the buckets are a second copy of the
gradients.  The Reducer makes the buckets when DDP is constructed and again, in the
order the gradients arrived, in the first forward after a backward; they live as long
as DDP does.  Lifetimes alone call them inputs (made at construction) or activations
(made in a forward, alive into the backward); the frames that made them say what they
are.  What DDP's collectives use besides (the broadcast of parameters and buffers from
rank 0, the bucket-order sync, a communication hook's buffers) is communication.

May import: :mod:`..core`, :mod:`..replay`, :mod:`.reasons`, :mod:`.stack_kinds`, numpy.
"""

from __future__ import annotations

import numpy as np

from ..core.snapshot import Snapshot
from ..replay.timeline import Intervals
from . import stack_kinds as sk
from .iterations import Phases
from .reasons import REASONS, TEMPORARY, reason_id


def mark_ddp(
    snap: Snapshot,
    rows: np.ndarray,
    iv: Intervals,
    ph: Phases,
    category: np.ndarray,
    reason: np.ndarray,
) -> bool:
    """Re-name in place what DDP made (the same arguments as
    :func:`.sharded.mark_sharded`).  False, and nothing changed, where no stack has a
    frame of DDP's Reducer."""
    kinds = ph.stack_kinds
    if not len(kinds) or not (kinds & sk.K_DDP_REDUCER).any():
        return False
    k = np.append(kinds, np.int32(0))[iv.stack]  # stack -1: no kinds

    def put(mask: np.ndarray, code: str) -> None:
        ids = np.flatnonzero(mask)
        reason[ids] = reason_id(code)
        category[ids] = REASONS[reason_id(code)].category

    comm = (k & sk.K_DDP_COMM) != 0
    reducer = ((k & sk.K_DDP_REDUCER) != 0) & ~comm & ((k & sk.K_DDP_INPUTS) == 0)
    # The Reducer's frames make its buckets, kept as long as DDP lives, and the tensors
    # of the bucket-order sync, freed inside the pass that made them.
    freed_in_pass = category == TEMPORARY
    put(reducer & freed_in_pass, "comm_ddp")
    put(reducer & ~freed_in_pass, "ddp_bucket")
    put(comm, "comm_ddp")
    return True
