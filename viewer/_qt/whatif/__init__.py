"""The What-if panel: the recorded run simulated under other allocator settings
(``panel``); the selected setting's curve is drawn on the main window it was opened
from.

May import: ``..widgets``, the model.  Never ``..main_window`` (it reaches the window
through :class:`~..widgets.window_link.WindowLink`) nor another feature package.
"""
