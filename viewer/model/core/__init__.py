"""The model's vocabulary: what every other layer speaks.

* :mod:`.snapshot` - :class:`Snapshot` and its columns (segments, blocks, traces,
  frames), the trace :class:`Action` codes;
* :mod:`.allocator_rules` - the caching allocator's rules (sizes, rounding, the
  split decision, pools, settings), one place for the replay, the what-if and the C side;
* :mod:`.frames` - interned stack frames, user frames vs library frames;
* :mod:`.units` - byte sizes in B/KiB/MiB/GiB, parsing and formatting;
* :mod:`.errors` - :class:`SnapshotError` (one clear line) and its kinds;
* :mod:`.progress` - :class:`Progress`: reporting and cancelling long work;
* :mod:`.members` - :func:`one_of`: ``np.isin`` for a few codes at memory speed;
  :func:`unique_sorted`: ``np.unique`` of a column already in order;
* :mod:`.parallel` - :func:`pmap`: independent pieces of work (what-if settings, a
  range's draws, a rank directory's files) on a forked process pool, serial where that
  costs less;
* :mod:`.lazy` - a package's names imported when first read (the facades' PEP 562
  ``__getattr__``);
* :mod:`.gpu_specs` - the recording's GPU: its multiprocessors and the threads each holds
  (recorded by the capture, else by the GPU's name).

Columns, not objects: a loaded snapshot is a handful of numpy arrays - segments,
blocks (grouped by segment in address order), trace events, and interned frames and
stacks (each distinct frame and call stack stored once, as CSR arrays).  Blocks and
events refer to stacks by id.  Nothing per event or per block is a Python object.

May import: the standard library and numpy only (no other model package).
"""
