"""Start-up: work a command begins before its heavy imports (numpy, the model, Qt).

The commands (:mod:`vramscope.viewer.commands`) call these; nothing below them
(the model, the Qt views) imports them except the window's loader, which takes
over a preloaded document:

- :mod:`.parse_ahead`: the parse of a big file on a thread, started before
  numpy is imported; the model's loader claims it through
  :mod:`vramscope.viewer.early.parse_handover` (the model never imports this
  package);
- :mod:`.preload`: the first document built on a thread while the GUI imports Qt;
- :mod:`.display`: whether Qt can open a window here (a display, the X11 libraries),
  decided before Qt is imported (Qt would abort the process instead);
- the stdlib-only helpers it shares with the model (file identity, the parse
  hand-over) are in :mod:`vramscope.viewer.early`, so none of this imports numpy.

May import at import time: the standard library and :mod:`vramscope.viewer.early`;
the model only inside functions (the preload).
"""
