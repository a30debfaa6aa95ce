"""From bytes to a :class:`~vramscope.viewer.model.core.snapshot.Snapshot`, and back from the cache.

* :mod:`.load` - :func:`load_snapshot` / :func:`load_bytes`: the one entry; files,
  compression, the parse started ahead, the column cache;
* :mod:`.source` - reading a path or stream with progress and cancel;
* :mod:`.safe_pickle` - the restricted unpickler (never ``pickle.load`` on a user file);
* :mod:`.fast_pickle` - glue to the compiled parser (``_native/snapparse.c``);
* :mod:`.schema` - the snapshot dictionary's shapes across torch versions;
* :mod:`.builder` - :class:`SnapshotBuilder`: Python objects to columns;
* :mod:`.interner` - frames and stacks interned while building;
* :mod:`.cache` - the on-disk column cache, keyed by :mod:`vramscope.viewer.early.file_identity`;
* :mod:`.atomic` - :func:`~.atomic.write_atomic`: the viewer's files written whole or not at all;
* :mod:`.remote` - snapshots on another machine, read through the user's own OpenSSH client.

Never ``pickle.load``: a pickle is parsed by the compiled parser
(``_native/snapparse.c``) under the rules of the restricted unpickler - builtin types
only, anything that imports or calls refused at the same byte with the same message,
lengths checked against the input, container and depth budgets, no recursion.  Trace
events are decoded straight into columns; a big file's device traces are parsed on all
cores between checkpoints and merged in file order, so the answer is the serial one
byte for byte.  Whenever a file leaves the form the fast path models exactly, it hands
the file back to the pure-Python path (:mod:`.safe_pickle` + :mod:`.schema`), the
reference both are tested and fuzzed against.

May import: :mod:`..core`, :mod:`.._native`, :mod:`vramscope.viewer.early`, numpy.
"""
