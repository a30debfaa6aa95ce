"""What the memory is: iterations and phases, a category for every allocation
(parameter, gradient, optimizer state, activation, temporary, input, KV cache, gathered
parameters, communication buffers, unknown) with the reason it was decided, generation
requests (prefill and decode steps) in place of per-token iterations, what a rank of
sharded (FSDP) training holds, DDP's gradient buckets, and leaks grouped by the user's own
line; beside them, what CUDA graphs' replays write in their private pools while the
allocator counts it free.

Entry point: :class:`MemoryBreakdown` (:mod:`.breakdown`); the rules in :mod:`.classify`,
:mod:`.iterations`, :mod:`.generation`, :mod:`.frameworks` (one entry per distributed
framework: :mod:`.sharded`, :mod:`.ddp`), :mod:`.leaks`, :mod:`.reasons`,
:mod:`.stack_kinds`, :mod:`.graph_pools`; the passes over every event in C through
:mod:`.native_passes`, numpy the reference; the allocations' lifetimes it needs in
:mod:`.lean`, the runs of equal phases in :mod:`.runs`.

May import: :mod:`..replay`, :mod:`..core`, :mod:`.._native`, numpy.
"""

from .breakdown import MemoryBreakdown, format_split
from .iterations import PHASE_NAMES, Iteration, describe_iterations
from .leaks import Leak
from .reasons import CATEGORY_COLORS, CATEGORY_LABELS, CATEGORY_NAMES, REASONS, Reason

__all__ = [
    "CATEGORY_COLORS",
    "CATEGORY_LABELS",
    "CATEGORY_NAMES",
    "PHASE_NAMES",
    "REASONS",
    "Iteration",
    "Leak",
    "MemoryBreakdown",
    "Reason",
    "describe_iterations",
    "format_split",
]
