"""One module per ``vramscope`` subcommand, each with ``main(argv) -> int``.

May import: the model (its public names), :mod:`vramscope.viewer.startup`,
:mod:`vramscope.viewer.early` and :mod:`vramscope.viewer.live_protocol`; the Qt views
only lazily, inside the commands that open a window (``gui``, ``attach``'s window, the
self-test), so a command-line tool never loads Qt.
"""
