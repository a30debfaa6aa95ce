"""Live attach: an agent inside the training process that a viewer can connect to.

:func:`vramscope.capture.serve` (or ``record(..., live=True)``, or the
runner's ``--live``) starts recording if needed and a daemon thread that
answers requests on a local endpoint (a Unix socket in a 0700 per-user
directory; 127.0.0.1 TCP with a token where Unix sockets do not exist).  See
:mod:`.agent` for the requests, :mod:`.server` for the limits, and
``vramscope.viewer.live_protocol`` for the wire format; :mod:`.allocator` holds the
allocator calls the agent makes, :mod:`.registry` the file viewers find it by
(``vramscope attach --list``), :mod:`.traces` which trace entries are new to a client.
"""

from .agent import Agent, LiveRecorder, current_agent, serve, stop_serving

__all__ = ["Agent", "LiveRecorder", "current_agent", "serve", "stop_serving"]
