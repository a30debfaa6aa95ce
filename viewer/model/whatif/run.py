"""Drive the allocator model over a request stream: curves, peaks, OOMs.

:func:`simulate` feeds every request of :class:`~.requests.Requests` to an
:class:`~.simulator.Allocator` and records, after each request, reserved and
allocated bytes; the peaks (first request reaching them) with the
fragmentation at the reserved peak; cudaMalloc / cudaFree counts (maps and
unmaps count as the allocator counts them, in ``num_device_alloc`` /
``num_device_free``); and every out-of-memory request.

After a predicted OOM the program would have stopped (or done something
else); the simulation goes on without that allocation (its frees are
skipped) so the rest of the curve stays comparable, and
:attr:`SimResult.first_oom` says where it would have ended.
"""

from __future__ import annotations

import numpy as np

from ..core import allocator_rules as rules
from ..core.errors import SnapshotError
from ..core.progress import Progress
from ..replay import FREE as FREE_STATE
from ..replay import PENDING as PENDING_STATE
from . import requests as rq
from .result import Oom, SimResult
from .simulator import Allocator

PROGRESS_EVERY = 1 << 13


def hints_of(reqs: rq.Requests) -> dict[int, list[tuple[int, int, int]]]:
    """Recorded segment events per request: addresses new segments can reuse."""
    hints: dict[int, list[tuple[int, int, int]]] = {}
    for tag, act, addr, size in zip(
        reqs.seg_tag.tolist(),
        reqs.seg_action.tolist(),
        reqs.seg_addr.tolist(),
        reqs.seg_size.tolist(),
    ):
        hints.setdefault(tag, []).append((act, addr, size))
    return hints


def _seed(al: Allocator, reqs: rq.Requests, sidx_of) -> list:
    """Lay the layout before the window into the model; returns live blocks by initial row."""
    init = reqs.initial
    live_rows: list = [None] * init.n_blocks
    if not len(init.seg_addr):
        return live_rows
    seg_of = (
        np.searchsorted(init.seg_addr, init.blk_addr, side="right") - 1
        if init.n_blocks
        else np.zeros(0, np.int64)
    )
    state = np.where(
        init.blk_state == FREE_STATE, 2, np.where(init.blk_state == PENDING_STATE, 1, 0)
    )
    rows_by_seg: dict[int, list[int]] = {}
    for j, s in enumerate(seg_of.tolist()):
        rows_by_seg.setdefault(s, []).append(j)
    addr_l, size_l, req_l = (
        init.blk_addr.tolist(),
        init.blk_size.tolist(),
        init.blk_requested.tolist(),
    )
    state_l = state.tolist()
    groups: dict[tuple, list] = {}
    for s, (ptr, size, stream, small, exp) in enumerate(
        zip(
            init.seg_addr.tolist(),
            init.seg_size.tolist(),
            init.seg_stream.tolist(),
            init.seg_small.tolist(),
            init.seg_expandable.tolist(),
        )
    ):
        rows = rows_by_seg.get(s, [])
        blocks = [(addr_l[j], size_l[j], state_l[j], req_l[j]) for j in rows]
        private = int(reqs.initial_pool[s])
        if exp:
            groups.setdefault((sidx_of(stream), private, small), []).append(
                (ptr, size, blocks, rows)
            )
            continue
        got = al.add_segment(ptr, size, sidx_of(stream), private, small, blocks)
        for j in rows:
            live_rows[j] = got.get(addr_l[j])
    for (sidx, private, small), ranges in groups.items():
        ranges.sort()
        got = al.add_expandable([(p, s, b) for p, s, b, _ in ranges], sidx, private, small)
        for _, _, _, rows in ranges:
            for j in rows:
                live_rows[j] = got.get(addr_l[j])
    return live_rows


def simulate(
    reqs: rq.Requests,
    cfg: rules.AllocatorConfig,
    limit: int | None = None,
    gpu_bytes: int | None = None,
    progress: Progress | None = None,
    stage: str = "simulate",
) -> SimResult:
    """Answer ``reqs`` as the allocator would under ``cfg`` and ``limit`` (bytes allowed).

    A request stream the model cannot follow from a recording the replay found
    inconsistent (frees of blocks that overlap, segments inside segments) raises
    :class:`SnapshotError` with one line naming the request and its trace event.

    The compiled model (:mod:`.native_sim`) answers when it is built and covers the
    case, to the byte as this one would; ``VRAMSCOPE_PY_SIMULATOR=1`` forces this one."""
    from . import native_sim

    if native_sim.use_native():
        result = native_sim.simulate(reqs, cfg, limit, gpu_bytes, progress, stage)
        if result is not None:
            return result
    return simulate_python(reqs, cfg, limit, gpu_bytes, progress, stage)


def simulate_python(
    reqs: rq.Requests,
    cfg: rules.AllocatorConfig,
    limit: int | None = None,
    gpu_bytes: int | None = None,
    progress: Progress | None = None,
    stage: str = "simulate",
) -> SimResult:
    """:func:`simulate` with the Python model, the reference."""
    al = Allocator(cfg, limit, gpu_bytes, hints_of(reqs))
    try:
        return _simulate(al, reqs, cfg, limit, progress, stage)
    except (KeyError, IndexError, ValueError, AttributeError) as e:
        if not reqs.replay_inconsistencies:
            raise  # a consistent recording: the model's own fault, keep the traceback
        i = al.tag
        where = (
            f"request {i} (trace event {int(reqs.event[i])})"
            if 0 <= i < len(reqs)
            else "the layout before the first event"
        )
        raise SnapshotError(
            f"the trace is inconsistent at {where}: the allocator model "
            f"cannot follow it ({type(e).__name__})"
        ) from None


def _simulate(
    al: Allocator,
    reqs: rq.Requests,
    cfg: rules.AllocatorConfig,
    limit: int | None,
    progress: Progress | None,
    stage: str,
) -> SimResult:
    streams = sorted(set(reqs.stream.tolist()) | set(reqs.initial.seg_stream.tolist()))
    sidx = {s: i for i, s in enumerate(streams)}
    live_rows = _seed(al, reqs, sidx.__getitem__)
    n = len(reqs)
    kinds = reqs.kind.tolist()
    sizes = reqs.size.tolist()
    sids = [sidx[s] for s in reqs.stream.tolist()]
    pools = reqs.pool.tolist()
    refs = reqs.ref.tolist()
    handles: list = [None] * n
    reserved = [0] * n
    allocated = [0] * n
    ooms: list[Oom] = []
    avoided: list[int] = []
    peak_res, peak_res_at = al.total, -1
    reserved_before = al.total
    peak_alloc = al.allocated
    free_pk, largest_pk = al.free_stats()
    ALLOC, FREE, FREE_REQ, FREE_DONE, OOM = rq.ALLOC, rq.FREE, rq.FREE_REQ, rq.FREE_DONE, rq.OOM
    malloc, free_req, free_block = al.malloc, al.free_requested, al.free_block
    pending = al.pending_blocks
    progress = progress or Progress()
    for i in range(n):
        if i % PROGRESS_EVERY == 0 and i:
            progress.update(stage, i / n)  # raises LoadCancelled after a Cancel
        kind = kinds[i]
        al.tag = i
        if kind == ALLOC:
            b = malloc(sizes[i], sids[i], pools[i])
            if b is None:
                ooms.append(_oom(al, reqs, i, False, sids[i]))
            else:
                handles[i] = b
                if al.allocated > peak_alloc:
                    peak_alloc = al.allocated
        elif kind <= FREE_DONE:
            r = refs[i]
            b = handles[r] if r >= 0 else live_rows[-r - 2]
            if b is None:
                pass  # its allocation failed (a predicted OOM) or is unknown
            elif kind == FREE:
                if b.alloc:
                    free_req(b)
                    free_block(b)
            elif kind == FREE_REQ:
                if b.alloc:
                    free_req(b)
                    b.pending = True
                    pending.add(b)
            elif b.pending:  # FREE_DONE, unless a synchronisation completed it already
                b.pending = False
                pending.discard(b)
                free_block(b)
        elif kind == OOM:
            b = malloc(sizes[i], sids[i], pools[i])
            if b is None:
                ooms.append(_oom(al, reqs, i, True, sids[i]))
            else:  # it fits here; the program's next steps are unknown, so give it back
                avoided.append(i)
                if al.allocated > peak_alloc:
                    peak_alloc = al.allocated
                free_req(b)
                free_block(b)
        else:  # EMPTY_CACHE
            al.empty_cache()
        total = al.total
        reserved[i] = total
        allocated[i] = al.allocated
        if total > peak_res:
            peak_res, peak_res_at = total, i
            free_pk, largest_pk = al.free_stats()
    progress.update(stage, 1.0)
    frag = 1.0 - largest_pk / free_pk if free_pk else 0.0
    return SimResult(
        config=cfg,
        limit=limit,
        reserved=np.array(reserved, np.int64),
        allocated=np.array(allocated, np.int64),
        peak_reserved=peak_res,
        peak_reserved_request=peak_res_at,
        peak_allocated=peak_alloc,
        fragmentation_at_peak=frag,
        free_at_peak=free_pk,
        largest_free_at_peak=largest_pk,
        n_cuda_malloc=al.n_alloc,
        n_cuda_free=al.n_free,
        n_retries=al.retries,
        ooms=ooms,
        recorded_ooms_avoided=avoided,
        events=al.events,
        final_segments=al.segment_list(),
        reserved_before=reserved_before,
    )


def _oom(al: Allocator, reqs: rq.Requests, i: int, recorded: bool, sidx: int) -> Oom:
    size = al.round(int(reqs.size[i]))
    small = size <= rules.SMALL_SIZE
    free, largest = al.free_for(int(reqs.pool[i]), small, sidx)
    return Oom(
        request=i,
        event=int(reqs.event[i]),
        size=size,
        stream=int(reqs.stream[i]),
        pool_kind="small" if small else "large",
        reserved_bytes=al.total,
        allocated_bytes=al.allocated,
        free_in_pool_bytes=free,
        largest_free_bytes=largest,
        kind="fragmentation" if free >= size else "capacity",
        recorded=recorded,
        new_memory_bytes=rules.segment_size_for(size),
        limit=al.allowed if al.set_fraction else None,
        expandable=al.expandable,
    )
