"""The model's vocabulary: what every other layer speaks.

* :mod:`.snapshot` - :class:`Snapshot` and its columns (segments, blocks, traces,
  frames), the trace :class:`Action` codes;
* :mod:`.allocator_rules` - the caching allocator's rules (sizes, rounding, the
  split decision, pools, settings), one place for the replay, the what-if and the C side;
* :mod:`.frames` - interned stack frames, user frames vs library frames;
* :mod:`.units` - byte sizes in B/KiB/MiB/GiB, parsing and formatting;
* :mod:`.errors` - :class:`SnapshotError` (one clear line) and its kinds;
* :mod:`.progress` - :class:`Progress`: reporting and cancelling long work.

May import: the standard library and numpy only (no other model package).
"""
