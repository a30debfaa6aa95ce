"""vramscope's model: load, replay, analyse and explain CUDA memory snapshots.

Pure Python + numpy (+ optional C extensions), no Qt and no torch: usable from
the CLI, tests and any script.  Typical use::

    from vramscope.viewer.model import load_snapshot, memory_stats, last_oom
    snap = load_snapshot("snapshot.pickle")
    print(memory_stats(snap).reserved_bytes, last_oom(snap).verdict)

The packages, each importing only those below it (``.importlinter``, "model layers"):

==============  ==============================================================
``live``        a running process's snapshot, fed incrementally (client, session)
``reports``     whole-file reports: summary, diff of two files, rank directories
``view``        what the window shows: document, view state, layouts, LOD, exactness
``remedies``    what would fix it: evidence, scaling judgements, ranked remedies
``categories``  what the memory is: categories, iterations and phases, leaks
``whatif``      the allocator simulated under other settings and request streams
``analysis``    exact figures at an instant, OOM verdicts, call tree, block details
``replay``      the allocator replayed event by event: layouts, curves, timeline
``io``          bytes to a :class:`Snapshot`: safe unpickling, parsers, column cache
``core``        the snapshot's columns, the allocator's rules, units, errors, progress
``_native``     optional C extensions (each with a Python reference)
==============  ==============================================================

This module is a lazy facade: importing it imports nothing else; each name
below is imported from its package on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> module that defines it (relative to this package)
_EXPORTS = {
    "FitResult": "analysis.figures",
    "MemoryStats": "analysis.figures",
    "PoolKey": "analysis.figures",
    "Selection": "analysis.figures",
    "fit_request": "analysis.figures",
    "largest_gaps": "analysis.figures",
    "memory_stats": "analysis.figures",
    "pool_keys": "analysis.figures",
    "OomReport": "analysis.oom",
    "default_device": "analysis.focus",
    "default_trace_device": "analysis.focus",
    "last_oom": "analysis.oom",
    "oom_reports": "analysis.oom",
    "SnapshotBuilder": "io.builder",
    "load_bytes": "io.load",
    "load_snapshot": "io.load",
    "LoadCancelled": "core.errors",
    "SnapshotError": "core.errors",
    "UnsafeSnapshotError": "core.errors",
    "Progress": "core.progress",
    "HOST_DEVICE": "core.snapshot",
    "Action": "core.snapshot",
    "AllocAnnotations": "core.snapshot",
    "BlockState": "core.snapshot",
    "HostMemory": "core.snapshot",
    "Snapshot": "core.snapshot",
    "format_bytes": "core.units",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the same names, for type checkers and editors ("X as X": re-exported)
    from .analysis.figures import FitResult as FitResult
    from .analysis.figures import MemoryStats as MemoryStats
    from .analysis.figures import PoolKey as PoolKey
    from .analysis.figures import Selection as Selection
    from .analysis.figures import fit_request as fit_request
    from .analysis.figures import largest_gaps as largest_gaps
    from .analysis.figures import memory_stats as memory_stats
    from .analysis.figures import pool_keys as pool_keys
    from .analysis.focus import default_device as default_device
    from .analysis.focus import default_trace_device as default_trace_device
    from .analysis.oom import OomReport as OomReport
    from .analysis.oom import last_oom as last_oom
    from .analysis.oom import oom_reports as oom_reports
    from .core.errors import LoadCancelled as LoadCancelled
    from .core.errors import SnapshotError as SnapshotError
    from .core.errors import UnsafeSnapshotError as UnsafeSnapshotError
    from .core.progress import Progress as Progress
    from .core.snapshot import HOST_DEVICE as HOST_DEVICE
    from .core.snapshot import Action as Action
    from .core.snapshot import AllocAnnotations as AllocAnnotations
    from .core.snapshot import BlockState as BlockState
    from .core.snapshot import HostMemory as HostMemory
    from .core.snapshot import Snapshot as Snapshot
    from .core.units import format_bytes as format_bytes
    from .io.builder import SnapshotBuilder as SnapshotBuilder
    from .io.load import load_bytes as load_bytes
    from .io.load import load_snapshot as load_snapshot


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
