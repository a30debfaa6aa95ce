"""Sharded data parallelism (FSDP2 ``fully_shard`` with DTensor, FSDP1's FlatParameter):
what FSDP itself makes, named by FSDP's own frames.

Per rank, a sharded run holds its shard of the parameters, gradients and optimizer
state; around each block's forward and backward FSDP all-gathers the block's
parameters into unsharded tensors (``parameter_gathered``) through a flat buffer, and
after the block's backward copies its unsharded gradients into a flat buffer and
reduce-scatters it into this rank's gradient shard (``communication`` for the two
buffers).  Lifetimes alone call the gathered parameters activations (made in forward,
alive into backward) and the shards' sizes match no gradient; the frames that made
them say what they are.

:class:`Sharding` is what one rank holds and what more ranks would do to it: the shards
of parameters, gradients and optimizer state are the whole model's divided by the
number of ranks (padded to a multiple of it), so with ``R`` ranks instead of ``W`` each
holds about ``W / R`` of them; what FSDP gathers per block and the activations stay as
they are.  The number of ranks comes from the capture's sidecar (``world_size``).

May import: :mod:`..core`, :mod:`..replay`, :mod:`.reasons`, :mod:`.stack_kinds`, numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.snapshot import Snapshot
from ..core.units import format_bytes as fb
from ..core.units import plural
from ..replay.timeline import Intervals
from . import stack_kinds as sk
from .iterations import PH_BACKWARD, PH_FORWARD, Phases
from .reasons import (
    CATEGORY_LABELS,
    CATEGORY_NAMES,
    GRADIENT,
    PARAMETER_GATHERED,
    REASONS,
    reason_id,
)


def mark_sharded(
    snap: Snapshot,
    rows: np.ndarray,
    iv: Intervals,
    ph: Phases,
    category: np.ndarray,
    reason: np.ndarray,
) -> bool:
    """Re-name in place what FSDP made (``rows``: the device's rows of ``snap.trace``, in
    event order).  False, and nothing changed, where no stack has an FSDP frame."""
    kinds = ph.stack_kinds
    if not len(kinds) or not (kinds & sk.K_FSDP).any():
        return False
    kinds_ext = np.append(kinds, np.int32(0))  # stack -1: no kinds
    k = kinds_ext[iv.stack]
    n = len(ph.phase)
    made = iv.start >= 0
    phase = np.where(made, ph.phase[np.maximum(iv.start, 0)], np.int8(-1))
    in_pass = (phase == PH_FORWARD) | (phase == PH_BACKWARD)

    def put(mask: np.ndarray, code: str) -> None:
        ids = np.flatnonzero(mask)
        reason[ids] = reason_id(code)
        category[ids] = REASONS[reason_id(code)].category

    put(((k & sk.K_FSDP_SHARD) != 0) & ~in_pass, "param_shard")
    put((k & sk.K_FSDP_GATHER) != 0, "param_gathered")
    put(((k & sk.K_FSDP_ALL_GATHER) != 0) & ((k & sk.K_FSDP_GATHER) == 0), "comm_all_gather")
    reduce = (k & sk.K_FSDP_REDUCE) != 0
    # The reduce-scatter's output outlives the backward pass (classified a gradient by its
    # lifetime): the gradient shard; its input buffer is freed inside the pass.
    put(reduce & (category == GRADIENT), "grad_shard")
    put(reduce & (category != GRADIENT), "comm_reduce_scatter")
    # Unsharded gradients: made in backward outside FSDP, freed by the reduce-scatter.
    freed = (iv.end < n) & ((k & sk.K_FSDP) == 0) & (phase == PH_BACKWARD)
    ids = np.flatnonzero(freed)
    freed[ids] = (kinds_ext[snap.trace.stack[rows[iv.end[ids]]]] & sk.K_FSDP_REDUCE) != 0
    put(freed, "grad_unsharded")
    return True


#: The categories a rank holds a shard of.
SHARDED = ("parameter", "gradient", "optimizer_state")


@dataclass(frozen=True)
class Sharding:
    """The sharded state of one rank at one event, and the run's most of what FSDP gathers."""

    world_size: int | None  # ranks of the run (capture sidecar), None: not recorded
    event: int  # the event the shard figures are at
    shards: dict[str, int]  # bytes of each SHARDED category live at ``event``
    gathered_peak: int  # most bytes of unsharded (gathered) parameters live at once
    communication_peak: int  # most bytes of all-gather / reduce-scatter buffers at once

    @property
    def model_state(self) -> int:
        return sum(self.shards.values())

    def model_state_with(self, ranks: int) -> int | None:
        """Bytes of model state per rank with ``ranks`` ranks (an estimate: padding)."""
        if not self.world_size or ranks <= 0:
            return None
        return self.model_state * self.world_size // ranks

    def note(self) -> str:
        """One or two sentences for ``advise`` and ``summary``."""
        parts = ", ".join(
            f"{CATEGORY_LABELS[CATEGORY_NAMES.index(k)]} {fb(v)}"
            for k, v in self.shards.items()
            if v
        )
        ranks = (
            f"over {plural(self.world_size, 'rank')}" if self.world_size else "(ranks not recorded)"
        )
        text = (
            f"sharded (FSDP) {ranks}: this rank holds {fb(self.model_state)} of model "
            f"state ({parts or 'none live'}); gathered parameters up to "
            f"{fb(self.gathered_peak)}, communication buffers up to "
            f"{fb(self.communication_peak)} at a time"
        )
        if self.world_size:
            more = self.world_size * 2
            text += (
                f"; with {plural(more, 'rank')} the model state per rank would be about "
                f"{fb(self.model_state_with(more) or 0)} (estimate; what is gathered "
                "per block and the activations stay as they are)"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "world_size": self.world_size,
            "event": self.event,
            "shards_bytes": dict(self.shards),
            "model_state_bytes": self.model_state,
            "gathered_parameters_peak_bytes": self.gathered_peak,
            "communication_peak_bytes": self.communication_peak,
        }
        if self.world_size:
            out["model_state_bytes_per_rank_with"] = {
                str(r): self.model_state_with(r) for r in (self.world_size * 2, self.world_size * 4)
            }
            out["model_state_is_estimate"] = True
        return out


def world_size(sidecar: dict | None) -> int | None:
    """The number of ranks the capture's sidecar recorded (None: not recorded)."""
    ws = (sidecar or {}).get("world_size")
    return int(ws) if isinstance(ws, int) and not isinstance(ws, bool) and ws > 0 else None


#: The reasons only FSDP's frames give (DDP's collectives are communication too).
FSDP_REASONS = ("param_gathered", "comm_all_gather", "comm_reduce_scatter")


def is_sharded(category: np.ndarray, reason: np.ndarray) -> bool:
    """FSDP made something: gathered parameters or its collectives' buffers."""
    return bool(
        (category == PARAMETER_GATHERED).any()
        or np.isin(reason, [reason_id(c) for c in FSDP_REASONS]).any()
    )
