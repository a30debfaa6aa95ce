"""Glue to the compiled replay loop (``viewer/model/_native/replay_core.c``).

The C loop applies the same rules as the Python reference (:mod:`.state`)
about 50x faster; it is optional (no compiler, or ``VRAMSCOPE_PURE_PYTHON=1``)
and tests compare the two on real and random traces.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._native import native_module, pure_python_requested
from ..core import allocator_rules as rules
from .layout import _LAYOUT_DTYPES, Layout

# The C inner loop; the Python one is the reference and the fallback.
_core: Any = native_module("replay_core")


def native_available() -> bool:
    """Whether the compiled replay loop is importable."""
    return _core is not None


def use_native(native: bool | None = None) -> bool:
    """Replay with the C loop? ``None``: yes when built, unless ``VRAMSCOPE_PURE_PYTHON=1``."""
    if native is None:
        native = not pure_python_requested()
    return bool(native) and _core is not None


def _layout_from_columns(cols) -> Layout:
    """A :class:`Layout` over the C loop's bytes columns (read-only, no copy)."""
    return Layout(*(np.frombuffer(c, dt) for c, dt in zip(cols, _LAYOUT_DTYPES)))


def _layout_columns(layout: Layout) -> list[np.ndarray]:
    return [
        np.ascontiguousarray(getattr(layout, f), dt)
        for f, dt in zip(Layout.__dataclass_fields__, _LAYOUT_DTYPES)
    ]


def _known_arrays(known) -> tuple:
    """Segment facts for the C loop (a :class:`.state.Known`): addresses (sorted),
    sizes, small flags, pools, default pool."""
    return (
        np.ascontiguousarray(known.addr, np.int64),
        np.ascontiguousarray(known.size, np.int64),
        np.ascontiguousarray(known.small, np.uint8),
        np.ascontiguousarray(known.pool, np.int32),
        int(known.default_pool),
    )


def _native_rules(settings: dict) -> tuple:
    """The snapshot's allocator settings as the C state takes them (``roundup_power2_divisions``
    per power-of-two size class, index as in allocator_rules)."""
    divisions = [
        rules.roundup_divisions(1 << (i + 20), settings) for i in range(rules.ROUNDUP_INTERVALS)
    ]
    return rules.native_rules(rules.max_split_size(settings), rules.LARGE_BUFFER, divisions)


def _run_native(
    cap,
    rep,
    start: int,
    stop: int,
    keyframe_every: int = 0,
    emit_at: np.ndarray | None = None,
    sizes=None,
    pools=None,
):
    """Apply events [start, stop) of ``rep`` to the C state ``cap``."""
    sl = slice(start, stop)
    return _core.run(
        cap,
        np.ascontiguousarray(rep.action[sl], np.int8),
        np.ascontiguousarray(rep.addr[sl], np.int64),
        np.ascontiguousarray(rep.size[sl], np.int64),
        np.ascontiguousarray(rep.stack[sl], np.int32),
        np.ascontiguousarray(rep.stream[sl], np.int64),
        start,
        keyframe_every,
        emit_at if emit_at is not None else np.zeros(0, np.int64),
        sizes[sl] if sizes is not None else None,
        pools[sl] if pools is not None else None,
    )
