"""Live attach, viewer side (no Qt, no torch): client, session model, NVML.

* :mod:`.client`   one connection to an agent; every payload decoded by the
                   restricted unpickler (never ``pickle.loads``).
* :mod:`.columns`  trace increments appended as columns (one interner for the
                   whole session), turned into a :class:`Snapshot` on demand.
* :mod:`.session`  polling state: latest stats, accumulated trace, status.
* :mod:`.nvml`     device totals and GPU processes via ``pynvml``, or a calm
                   "not available".
* :mod:`.targets`  what can be attached: registry agents plus NVML processes.
* :mod:`.doc_source` each update extends one document's replay.
* :mod:`.remote`   agents on another machine through the user's ``ssh``: discovery,
                   a forwarded Unix socket, nvidia-smi for the device panel.

May import: every model layer below (:mod:`..view`, :mod:`..io`, ...), the wire
format :mod:`vramscope.viewer.live_protocol`, ``pynvml`` when installed.
"""

from .client import AttachError, LiveClient, connect
from .session import LiveSession, StatsUpdate, TraceUpdate

__all__ = ["AttachError", "LiveClient", "LiveSession", "StatsUpdate", "TraceUpdate", "connect"]
