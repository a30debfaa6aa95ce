"""The remedy catalogue: one :class:`~.spec.RemedySpec` per remedy, in :data:`SPECS`.

A spec says what the remedy is (its id, title and change), when it applies to a
recording, the simulations it needs (run side by side on advise's pool) and how its
prediction is built from them and labelled (:func:`.spec.simulated` from a run of the
edited stream, :func:`.spec.estimated` from a point and a range under the one floor
rule).  :func:`..advise.advise` gathers the :class:`~.context.Context`, runs what the
applicable specs need, builds, filters and ranks; adding a remedy is adding a spec here.

* :mod:`.context`: what advise gathers first (evidence, judgement, limit, the split at
  the peak, the largest batch that fits) and the runs the remedies read;
* :mod:`.spec`: :class:`~.spec.RemedySpec` and the two builders;
* :mod:`.batch`: ``smaller_batch``;
* :mod:`.allocator`: ``allocator:SETTINGS``;
* :mod:`.kept`: ``free_kept``, ``no_grad_forward``;
* :mod:`.optimizer`: ``8bit_optimizer``, ``set_to_none``;
* :mod:`.activations`: ``gradient_checkpointing``, ``bf16_autocast``;
* :mod:`.ddp`: ``gradient_as_bucket_view``, ``fsdp_full_shard`` (DistributedDataParallel's
  gradients and model state);
* :mod:`.gpu`: ``free_gpu``, ``empty_cache`` (what else holds the GPU).

May import: the rest of :mod:`..` (the remedies package) and what it may import.
"""

from __future__ import annotations

from .activations import BF16_AUTOCAST, GRADIENT_CHECKPOINTING
from .allocator import ALLOCATOR
from .batch import SMALLER_BATCH
from .context import Context, gather
from .ddp import FSDP_FULL_SHARD, GRADIENT_AS_BUCKET_VIEW
from .gpu import EMPTY_CACHE, FREE_GPU
from .kept import FREE_KEPT, NO_GRAD_FORWARD
from .optimizer import EIGHT_BIT_OPTIMIZER, SET_TO_NONE
from .spec import RemedySpec

# In the order remedies are built: a tie in the ranking keeps it.  The specs of method
# GPU_FREED (what else holds the GPU) lead the ranked list where they apply.
SPECS: tuple[RemedySpec, ...] = (
    SMALLER_BATCH,
    ALLOCATOR,
    FREE_KEPT,
    NO_GRAD_FORWARD,
    EIGHT_BIT_OPTIMIZER,
    GRADIENT_CHECKPOINTING,
    BF16_AUTOCAST,
    SET_TO_NONE,
    GRADIENT_AS_BUCKET_VIEW,
    FSDP_FULL_SHARD,
    FREE_GPU,
    EMPTY_CACHE,
)

__all__ = ["SPECS", "Context", "RemedySpec", "gather"]
