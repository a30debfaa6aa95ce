"""Start-up: work a command begins before its heavy imports (numpy, the model, Qt).

The commands (:mod:`vramscope.viewer.commands`) call these; nothing below them
(the model, the Qt views) imports them except the window's loader, which takes
over a preloaded document:

- :mod:`.parse_ahead`: the parse of a big file on a thread, started before
  numpy is imported; the model's loader claims it through
  :mod:`vramscope.viewer.model.parse_handover` (the model never imports this
  package);
- :mod:`.preload`: the first document built on a thread while the GUI imports Qt;
- :mod:`.model_leaf`: the model's stdlib-only modules (file identity, the
  parse hand-over) loaded without the model package, so none of this imports numpy.

Stdlib only at import time.
"""
