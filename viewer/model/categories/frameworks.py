"""The distributed frameworks whose own frames name what they make: one entry each.

Each entry re-names, in place, the allocations that the framework's frames made (after
the lifetime rules of :mod:`.classify`); it runs only where a stack holds one of its
frames, so a file of another program keeps the categories the lifetimes gave it.

May import: :mod:`..core`, :mod:`..replay`, :mod:`.ddp`, :mod:`.sharded`,
:mod:`.stack_kinds`, numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.snapshot import Snapshot
from ..replay.timeline import Intervals
from .ddp import mark_ddp
from .iterations import Phases
from .sharded import mark_sharded

Mark = Callable[[Snapshot, np.ndarray, Intervals, Phases, np.ndarray, np.ndarray], bool]


@dataclass(frozen=True)
class Framework:
    """A framework whose frames name its memory: ``mark`` re-names it in place and says
    whether it found any of its frames."""

    name: str
    mark: Mark


#: In the order they run: FSDP's sharded state, then DDP's gradient buckets.
FRAMEWORKS: tuple[Framework, ...] = (
    Framework("FSDP", mark_sharded),
    Framework("DDP", mark_ddp),
)


def mark_frameworks(
    snap: Snapshot,
    rows: np.ndarray,
    iv: Intervals,
    ph: Phases,
    category: np.ndarray,
    reason: np.ndarray,
) -> tuple[str, ...]:
    """Run every framework's rule; the names of those whose frames were found."""
    return tuple(f.name for f in FRAMEWORKS if f.mark(snap, rows, iv, ph, category, reason))
