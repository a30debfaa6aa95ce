"""From bytes to a :class:`~vramscope.viewer.model.core.snapshot.Snapshot`, and back from the cache.

* :mod:`.load` - :func:`load_snapshot` / :func:`load_bytes`: the one entry; files,
  compression, the parse started ahead, the column cache;
* :mod:`.source` - reading a path or stream with progress and cancel;
* :mod:`.safe_pickle` - the restricted unpickler (never ``pickle.load`` on a user file);
* :mod:`.fast_pickle` - glue to the compiled parser (``_native/snapparse.c``);
* :mod:`.schema` - the snapshot dictionary's shapes across torch versions;
* :mod:`.builder` - :class:`SnapshotBuilder`: Python objects to columns;
* :mod:`.interner` - frames and stacks interned while building;
* :mod:`.cache` - the on-disk column cache, keyed by :mod:`vramscope.viewer.early.file_identity`.

May import: :mod:`..core`, :mod:`.._native`, :mod:`vramscope.viewer.early`, numpy.
"""
