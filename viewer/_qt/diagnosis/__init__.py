"""The Diagnosis panel: the verdict, what the peak is made of and the remedies ranked
by predicted peak (``panel``), with its chart (``chart``); a remedy selected is drawn on
the main window it was opened from.  The OOM banner's button that opens it (``banner``)
lives apart, so a window starts without importing the panel and the remedies.

May import: ``..widgets``, ``..timeline`` (the overlay colour), the model.  Never
``..main_window`` (it reaches the window through :class:`~..widgets.window_link.WindowLink`
and the window's public members) nor another feature package.
"""
