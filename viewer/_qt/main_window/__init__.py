"""The main window: the header, the selectors, the timeline, the segment map, the Blocks
table / call tree and the stack panel over one :class:`ViewState`; its menus, files in
and out and time travel (``window``); the header (``header``), the toolbar's selectors
(``selectors``), the Blocks table (``table``) and the call tree (``calltree_panel``).

May import: ``..widgets``, ``..timeline``, ``..segment_map``, the model; the features
it opens - ``..categories`` and ``..diagnosis`` (the banner's button) when a window is
built, ``..whatif``, ``..compare`` and ``..ranks`` when first opened - inside the
methods that use them, not at module level.  Never ``..live`` or ``..app``: they
compose the window (File > Attach is handed in as :attr:`MainWindow.attach_handler`).
"""

from .window import MainWindow, about_text, app_icon  # noqa: F401  (the package's public names)
