"""Stdlib-only helpers shared by the start-up path and the model.

The start-up code (:mod:`vramscope.viewer.startup`) runs before numpy and the
model are imported; the model (:mod:`vramscope.viewer.model`) may not import
start-up code.  What both need lives here, below both of them:

- :mod:`.file_identity`: where the caches live and how a file's content is named
  (the column cache and the summary's result cache must agree on a key);
- :mod:`.parse_handover`: how a parse started ahead is offered and claimed, and
  the parse parameters both sides use;
- :mod:`.install_hint`: how to install vramscope's optional extras (from a clone),
  the words of every hint the program prints.

May import: the standard library only (checked by ``.importlinter`` and
tests/model/test_parse_ahead.py).
"""
