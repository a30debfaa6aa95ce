"""Exact figures and explanations at one instant of one device.

* :mod:`.figures` - :func:`memory_stats` (each figure equals the allocator's
  ``memory_stats()`` counter of the same name), selections, largest gaps, whether a
  request fits;
* :mod:`.oom` - OOM verdicts (fragmentation, capacity, limit) with their exactness,
  and whether an OOM concerns a selection;
* :mod:`.focus` - which device a view answers for when the user did not say (the
  last OOM's, else the highest reserved peak's): one rule for the CLI and the GUI;
* :mod:`.calltree` - bytes alive by call stack;
* :mod:`.alloc_details` - what one block is: its allocation, stack, lifetime;
* :mod:`.gpu_accounting` - the whole GPU at the snapshot's instant: who holds the
  device's memory.

Exact numbers: every figure is computed from the blocks and tested against
``memory_stats()`` taken at the same instant on every real snapshot in ``tests/data``.
The allocator leaves expandable segments out of ``segment`` and
``inactive_split_bytes``; so does vramscope, and reports its own figures beside them.

May import: :mod:`..replay`, :mod:`..core`, numpy.
"""
