"""vramscope's model: load, analyse and explain CUDA memory snapshots.

Pure Python + numpy, no Qt and no torch: usable from the CLI, tests and any
script.  Typical use::

    from vramscope.viewer.model import load_snapshot, memory_stats, last_oom
    snap = load_snapshot("snapshot.pickle")
    print(memory_stats(snap).reserved_bytes, last_oom(snap).verdict)
"""

from .analysis import (
    FitResult,
    MemoryStats,
    PoolKey,
    Selection,
    fit_request,
    largest_gaps,
    memory_stats,
    pool_keys,
)
from .builder import SnapshotBuilder
from .errors import LoadCancelled, SnapshotError, UnsafeSnapshotError
from .load import load_bytes, load_snapshot
from .oom import OomReport, last_oom, oom_reports
from .progress import Progress
from .snapshot import HOST_DEVICE, Action, AllocAnnotations, BlockState, HostMemory, Snapshot
from .units import format_bytes

__all__ = [
    "HOST_DEVICE",
    "Action",
    "AllocAnnotations",
    "BlockState",
    "FitResult",
    "HostMemory",
    "LoadCancelled",
    "MemoryStats",
    "OomReport",
    "PoolKey",
    "Progress",
    "Selection",
    "Snapshot",
    "SnapshotBuilder",
    "SnapshotError",
    "UnsafeSnapshotError",
    "fit_request",
    "format_bytes",
    "largest_gaps",
    "last_oom",
    "load_bytes",
    "load_snapshot",
    "memory_stats",
    "oom_reports",
    "pool_keys",
]
