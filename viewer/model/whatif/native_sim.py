"""Glue to the compiled what-if model (``viewer/model/_native/whatif_core.c``).

The C model is a transcription of :mod:`.simulator` (with :mod:`.blocks`,
:mod:`.release`, :mod:`.expandable`) and of :func:`.run._simulate` over the
request columns: no object per block or request, the loop without the GIL.
:func:`simulate` answers with the same :class:`~.run.SimResult`, to the byte, or
``None`` when the case is one the C model does not cover; :func:`.run.simulate`
then runs the Python model, which stays the reference (``VRAMSCOPE_PY_SIMULATOR=1``
forces it; ``VRAMSCOPE_PURE_PYTHON=1`` disables every compiled path).

Not covered (the Python model answers): recordings the replay found inconsistent
(its errors name the request); a layout before the window with an expandable
segment of several mapped ranges on one stream and pool, blocks sharing an
address, segments that overlap or whose first block is not at their start;
sizes past 2**56 or addresses past 2**60 (the C model's sums stay in 64 bits),
reserved bytes past 2**62 (found mid-run); more than 32767 streams.
An inconsistency the C model meets mid-run also hands the case to the Python model.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._native import native_module, pure_python_requested
from ..core import allocator_rules as rules
from ..core.members import unique_sorted
from ..core.progress import Progress
from ..replay import FREE as FREE_STATE
from ..replay import PENDING as PENDING_STATE
from . import requests as rq
from .blocks import DEFAULT_GPU_BYTES, SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP, SYNTH_BASE
from .result import Oom, SimResult

_core: Any = native_module("whatif_core")

PY_SIMULATOR_ENV = "VRAMSCOPE_PY_SIMULATOR"
CHUNK = 1 << 18  # requests per call into C (progress and Cancel between them)
RANGE = 1 << 56  # sizes the C model takes (its sums stay in 64 bits)
ADDR_RANGE = 1 << 60  # addresses


def native_available() -> bool:
    """Whether the compiled what-if model is importable."""
    return _core is not None


def python_requested() -> bool:
    """``VRAMSCOPE_PY_SIMULATOR=1`` (or ``VRAMSCOPE_PURE_PYTHON=1``): the Python model."""
    return os.environ.get(PY_SIMULATOR_ENV, "") not in ("", "0") or pure_python_requested()


def use_native() -> bool:
    return _core is not None and not python_requested()


def _seed_arrays(reqs: rq.Requests, streams: np.ndarray, privates: np.ndarray):
    """The layout before the window as the C model lays it (run._seed), or None when it
    is one the C model does not cover."""
    init = reqs.initial
    nseg, nblk = len(init.seg_addr), init.n_blocks
    seg_ptr = np.ascontiguousarray(init.seg_addr, np.int64)
    seg_size = np.ascontiguousarray(init.seg_size, np.int64)
    blk_ptr = np.ascontiguousarray(init.blk_addr[:nblk], np.int64)
    blk_size = np.ascontiguousarray(init.blk_size[:nblk], np.int64)
    if nseg:
        if (
            (seg_ptr < 0).any()
            or (seg_size < 0).any()
            or (seg_size >= RANGE).any()
            or (seg_ptr >= ADDR_RANGE).any()
        ):
            return None
        if (np.diff(seg_ptr) <= 0).any() or (seg_ptr[:-1] + seg_size[:-1] > seg_ptr[1:]).any():
            return None
        seg_of = (
            np.searchsorted(seg_ptr, blk_ptr, side="right") - 1 if nblk else np.zeros(0, np.int64)
        )
    else:
        seg_of = np.full(nblk, -1, np.int64)  # the Python model lays none of them
    if nblk and (
        (blk_ptr < 0).any()
        or (blk_size < 0).any()
        or (blk_ptr >= ADDR_RANGE).any()
        or (blk_size >= RANGE).any()
        or len(_unique(blk_ptr)) != nblk
    ):
        return None
    state = np.where(
        init.blk_state[:nblk] == FREE_STATE,
        2,
        np.where(init.blk_state[:nblk] == PENDING_STATE, 1, 0),
    ).astype(np.int8)
    laid = seg_of >= 0
    rows = np.flatnonzero(laid)
    rows = rows[np.argsort(seg_of[rows], kind="stable")].astype(np.int64)
    counts = np.bincount(seg_of[laid], minlength=nseg) if nseg else np.zeros(0, np.int64)
    start = np.zeros(nseg + 1, np.int64)
    np.cumsum(counts, out=start[1:])
    exp = np.ascontiguousarray(init.seg_expandable[:nseg]).astype(np.uint8)
    small = np.ascontiguousarray(init.seg_small[:nseg]).astype(np.uint8)
    sidx = np.searchsorted(streams, init.seg_stream[:nseg]).astype(np.int32)
    priv = np.searchsorted(privates, np.asarray(reqs.initial_pool, np.int64)).astype(np.int32)
    if nseg:
        # Each ordinary segment's blocks start at its address (else Python's segments
        # table names the first block, not the segment).
        has = counts > 0
        firsts = blk_ptr[rows[start[:-1][has]]] if has.any() else np.zeros(0, np.int64)
        if ((firsts != seg_ptr[has]) & ~exp[has].astype(bool)).any():
            return None
        # One mapped range per expandable segment (stream, pool kind, private pool).
        e = np.flatnonzero(exp)
        if len(e):
            keys = set()
            for j in e.tolist():
                key = (int(sidx[j]), int(priv[j]), bool(small[j]))
                if key in keys:
                    return None
                keys.add(key)
    return (seg_ptr, seg_size, sidx, priv, small, exp, blk_ptr, blk_size, state, rows, start)


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``, without its sort when one value fills the column (most
    recordings use one stream and no private pool)."""
    if len(values) and values.min() == values.max():
        return values[:1].copy()
    return _unique(values)


def _unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-D integer column, the same array: numpy's own imports
    ``numpy.ma`` on first use (~20 ms, most of what else a cached what-if imports)."""
    return unique_sorted(np.sort(values, kind="stable"))


def simulate(
    reqs: rq.Requests,
    cfg: rules.AllocatorConfig,
    limit: int | None = None,
    gpu_bytes: int | None = None,
    progress: Progress | None = None,
    stage: str = "simulate",
):
    """:func:`.run.simulate` with the C model: a SimResult, or None when not covered."""

    if _core is None or reqs.replay_inconsistencies:
        return None
    n = len(reqs)
    kind = np.ascontiguousarray(reqs.kind, np.int8)
    size = np.ascontiguousarray(reqs.size, np.int64)
    stream = np.ascontiguousarray(reqs.stream, np.int64)
    pool = np.ascontiguousarray(reqs.pool, np.int32)
    ref = np.ascontiguousarray(reqs.ref, np.int64)
    if n and (int(size.max()) >= RANGE or int(size.min()) < -RANGE):
        return None
    if len(reqs.seg_addr) and (
        int(reqs.seg_addr.max()) >= ADDR_RANGE or int(reqs.seg_addr.min()) < 0
    ):
        return None
    streams = _unique(
        np.concatenate([_distinct(stream), np.asarray(reqs.initial.seg_stream, np.int64)])
    )
    privates = _unique(
        np.concatenate(
            [_distinct(pool).astype(np.int64), [-1], np.asarray(reqs.initial_pool, np.int64)]
        )
    )
    if len(streams) >= (1 << 15):
        return None
    seed = _seed_arrays(reqs, streams, privates)
    if seed is None:
        return None
    gpu = gpu_bytes or DEFAULT_GPU_BYTES
    reserve_bytes = gpu + gpu // 8
    allowed = int(limit) if limit is not None else 0
    if reserve_bytes >= RANGE or not -(1 << 62) < allowed < (1 << 62):
        return None
    divs = [int(d) for d in cfg.roundup_power2_divisions]
    if len(divs) != rules.ROUNDUP_INTERVALS or any(not 0 <= d < (1 << 30) for d in divs):
        return None
    if (
        not 0 < cfg.max_split_size <= rules.NO_LIMIT
        or not 0 <= cfg.max_non_split_rounding <= rules.NO_LIMIT
    ):
        return None
    gc_on = limit is not None and cfg.garbage_collection_threshold > 0
    gc_bytes = int(cfg.garbage_collection_threshold * allowed) if gc_on else 0
    settings = (
        rules.native_rules(int(cfg.max_split_size), int(cfg.max_non_split_rounding), divs),
        bool(cfg.expandable_segments),
        limit is not None,
        gc_on,
        allowed,
        gc_bytes,
        reserve_bytes,
        SYNTH_BASE,
        (SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP),
    )
    order = np.argsort(reqs.seg_tag, kind="stable")
    hints = (
        np.ascontiguousarray(reqs.seg_tag[order], np.int64),
        np.ascontiguousarray(reqs.seg_action[order], np.int8),
        np.ascontiguousarray(reqs.seg_addr[order], np.int64),
        np.ascontiguousarray(reqs.seg_size[order], np.int64),
    )
    reserved = np.empty(n, np.int64)
    allocated = np.empty(n, np.int64)
    try:
        state = _core.new(
            settings,
            (
                kind,
                size,
                stream,
                pool,
                ref,
                reserved,
                allocated,
                streams.astype(np.int64),
                privates.astype(np.int64),
            ),
            hints,
            seed,
        )
    except ValueError as e:
        _note(e)
        return None  # a layout the C model cannot lay: the Python model answers
    progress = progress or Progress()
    try:
        for start in range(0, n, CHUNK):
            if start:
                progress.update(stage, start / n)  # raises LoadCancelled after a Cancel
            _core.run(state, start, min(start + CHUNK, n))
        out = _core.result(state)
    except ValueError as e:
        _note(e)
        return None  # the Python model raises (or answers) as the reference does
    del state
    progress.update(stage, 1.0)
    (
        (
            peak_res,
            peak_at,
            peak_alloc,
            free_pk,
            largest_pk,
            n_alloc,
            n_free,
            retries,
            reserved_before,
        ),
        ev_b,
        oom_b,
        avoided_b,
        seg_b,
    ) = out
    ev = np.frombuffer(ev_b, np.int64).reshape(-1, 4)
    events: list[tuple[int, int, int, int]] = [(t, a, p, s) for t, a, p, s in ev.tolist()]
    segs = np.frombuffer(seg_b, np.int64).reshape(-1, 4).tolist()
    final = sorted((p, s, bool(sm), bool(x)) for p, s, sm, x in segs)
    ooms = [
        _oom(reqs, cfg, limit, row)
        for row in np.frombuffer(oom_b, np.int64).reshape(-1, 6).tolist()
    ]
    frag = 1.0 - largest_pk / free_pk if free_pk else 0.0
    return SimResult(
        config=cfg,
        limit=limit,
        reserved=reserved,
        allocated=allocated,
        peak_reserved=peak_res,
        peak_reserved_request=peak_at,
        peak_allocated=peak_alloc,
        fragmentation_at_peak=frag,
        free_at_peak=free_pk,
        largest_free_at_peak=largest_pk,
        n_cuda_malloc=n_alloc,
        n_cuda_free=n_free,
        n_retries=retries,
        ooms=ooms,
        recorded_ooms_avoided=np.frombuffer(avoided_b, np.int64).tolist(),
        events=events,
        final_segments=final,
        reserved_before=reserved_before,
    )


last_fallback = ""  # why the C model last handed a case to the Python one (for tests)


def _note(e: Exception) -> None:
    global last_fallback
    last_fallback = str(e)


def _oom(reqs: rq.Requests, cfg: rules.AllocatorConfig, limit: int | None, row: list):
    """run._oom from the figures the C model recorded at that request."""

    i, free, largest, reserved, allocated, recorded = row
    size = cfg.round_size(int(reqs.size[i]))
    small = size <= rules.SMALL_SIZE
    return Oom(
        request=i,
        event=int(reqs.event[i]),
        size=size,
        stream=int(reqs.stream[i]),
        pool_kind="small" if small else "large",
        reserved_bytes=reserved,
        allocated_bytes=allocated,
        free_in_pool_bytes=free,
        largest_free_bytes=largest,
        kind="fragmentation" if free >= size else "capacity",
        recorded=bool(recorded),
        new_memory_bytes=rules.segment_size_for(size),
        limit=int(limit) if limit is not None else None,
        expandable=cfg.expandable_segments,
    )
