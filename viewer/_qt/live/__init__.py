"""Live attach: :class:`~.controller.LiveController` feeds a plain main window from a
running process and adds its "Live" dock; the poller on its own thread (``worker``),
the attach dialog (``attach_dialog``), the live counters (``curves``) and the NVML device
panel (``device_panel``); and
File ▸ Open remote (``remote_open``: a snapshot on another machine, through ssh).

May import: ``..main_window`` (it composes one), ``..timeline`` (the curves' axis and
colours), ``..widgets``, the model, :mod:`vramscope.viewer.live_protocol`.  Nothing
imports this package but ``..app``, on first use, and the GUI command (``remote_open``,
to wire File ▸ Open remote and open an ``ssh://`` argument).
"""
