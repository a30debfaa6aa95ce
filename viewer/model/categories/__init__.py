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
:mod:`.lean`, the runs of equal phases in :mod:`.runs`; the words every view uses for a
split in :mod:`.wording`.  The names below are read lazily: importing the package (for
the category names) does not import the breakdown's rules.

May import: :mod:`..replay`, :mod:`..core`, :mod:`.._native`, numpy.
"""

from ..core import lazy

# name -> the module defining it, imported when the name is first read (PEP 562): the
# window reads the category names at its start, and the breakdown's modules (the rules,
# ~20 ms of imports) are needed only once a breakdown is built, after its first paint.
_EXPORTS = {
    "MemoryBreakdown": "breakdown",
    "format_split": "wording",
    "PHASE_NAMES": "iterations",
    "Iteration": "iterations",
    "describe_iterations": "iterations",
    "Leak": "leaks",
    "CATEGORY_COLORS": "reasons",
    "CATEGORY_LABELS": "reasons",
    "CATEGORY_NAMES": "reasons",
    "REASONS": "reasons",
    "Reason": "reasons",
}

__all__ = sorted(_EXPORTS)

TYPE_CHECKING = False
if TYPE_CHECKING:  # the same names, for type checkers and editors
    from .breakdown import MemoryBreakdown as MemoryBreakdown
    from .iterations import PHASE_NAMES as PHASE_NAMES
    from .iterations import Iteration as Iteration
    from .iterations import describe_iterations as describe_iterations
    from .leaks import Leak as Leak
    from .reasons import CATEGORY_COLORS as CATEGORY_COLORS
    from .reasons import CATEGORY_LABELS as CATEGORY_LABELS
    from .reasons import CATEGORY_NAMES as CATEGORY_NAMES
    from .reasons import REASONS as REASONS
    from .reasons import Reason as Reason
    from .wording import format_split as format_split


__getattr__, __dir__ = lazy.exports(__name__, _EXPORTS)
