"""The main window: the header, the selectors, the timeline, the segment map, the Blocks
table / call tree and the stack panel over one :class:`ViewState`, and time travel
(``window``); its menus declared as data (``menus``), where its views go and the
geometry it remembers (``layout``), its status bar (``status_bar``), opening a file
(``loading``), File > Export (``exports``; the HTML report: ``report_export``), the
windows and dialogs it opens (``tool_windows``; Help's dialogs: ``help_dialogs``); the
header (``header``), the toolbar's selectors (``selectors``), the Blocks table
(``table``) and the call tree (``calltree_panel``).

May import: ``..widgets``, ``..timeline``, ``..segment_map``, the model; the features
it opens - ``..categories`` and ``..diagnosis`` (the banner's button) when a window is
built, ``..whatif``, ``..compare`` and ``..ranks`` when first opened - inside the
methods that use them, not at module level.  Never ``..live`` or ``..app``: they
compose the window (File > Attach is handed in as :attr:`MainWindow.attach_handler`).
"""

from .help_dialogs import about_text
from .window import MainWindow, app_icon

__all__ = ["MainWindow", "about_text", "app_icon"]
