"""The request stream of a recorded trace: what the program asked the allocator for.

A trace mixes the program's requests (alloc, free) with the allocator's own
answers (segment_alloc / segment_free / map / unmap).  The simulator needs
only the requests; the answers are kept beside them, tagged with the request
they belong to, so a replay at the recorded settings can be checked event for
event (:mod:`.selfcheck`) and can reuse the recorded segment addresses (ties
in best-fit go to the lower address, so addresses matter).

Request kinds, one row each, in recorded order:

* ``ALLOC``: ``size`` requested bytes on ``stream`` in pool ``pool``;
* ``FREE``: free of the block made by request ``ref``, completed at once;
* ``FREE_REQ`` / ``FREE_DONE``: a free whose completion waited for other
  streams' events (``record_stream``); the block is pending in between;
* ``OOM``: a request that failed in the recording (``size`` is rounded);
* ``EMPTY_CACHE``: segments released outside any allocation
  (``torch.cuda.empty_cache()``).

``ref >= 0`` is the index of the ``ALLOC`` row; ``ref <= -2`` is block
``-ref - 2`` of the layout before the window (a wrapped ring buffer), which
:func:`build_requests` takes from the timeline's replay rather than re-deriving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .._native import native_module
from ..core import allocator_rules as rules
from ..core.members import one_of
from ..core.snapshot import Action, Snapshot
from ..replay import DeviceReplay, Layout

ALLOC, FREE, FREE_REQ, FREE_DONE, OOM, EMPTY_CACHE = range(6)
KIND_NAMES = ("alloc", "free", "free_requested", "free_completed", "oom", "empty_cache")
SEGMENT_ACTIONS = (
    Action.SEGMENT_ALLOC,
    Action.SEGMENT_FREE,
    Action.SEGMENT_MAP,
    Action.SEGMENT_UNMAP,
)
NO_REF = -1

# The loop over every event in C (_native/whatif_core.c: build_requests), None when not built.
_core: Any = native_module("whatif_core")


@dataclass
class Requests:
    """One device's requests (numpy columns) and the recorded allocator answers."""

    kind: np.ndarray  # int8
    size: np.ndarray  # int64 requested bytes (OOM: the rounded size)
    stream: np.ndarray  # int64 CUDA stream
    pool: np.ndarray  # int32: -1 ordinary pools, else index into Snapshot.pools (private)
    ref: np.ndarray  # int64: see the module docstring
    event: np.ndarray  # int64: index of the request's event in the device's trace
    initial: Layout  # the layout before the window
    initial_pool: np.ndarray  # per initial segment: -1 ordinary, else private pool index
    # Recorded answers: (request index they belong to, action, address, size), in order.
    seg_tag: np.ndarray
    seg_action: np.ndarray
    seg_addr: np.ndarray
    seg_size: np.ndarray
    n_events: int = 0  # events in the device's trace
    replay_inconsistencies: int = 0  # the replay's: nonzero means a broken recording
    time_us: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.kind)


# Events inside a release run: what the allocator's cache release emits (segments freed
# or unmapped, the pending frees it waits for first) and snapshots taken meanwhile.
RELEASE_RUN = (Action.SEGMENT_FREE, Action.SEGMENT_UNMAP, Action.FREE_COMPLETED, Action.SNAPSHOT)


def _run_start(actions: list, k: int) -> int:
    """The first event of the release run that event ``k`` belongs to."""
    while k > 0 and actions[k - 1] in RELEASE_RUN:
        k -= 1
    return k


def _could_fail(rep: DeviceReplay, actions: list, sizes: list, next_sig: list, next_at: list):
    """k -> could the cudaMalloc after the release at event ``k`` have failed?"""
    if not len(rep):
        return None
    reserved = rep.reserved
    peak = int(reserved.max())
    start = int(reserved[0]) - _reserved_step(actions[0], sizes[0])
    return _could_fail_given(
        lambda i: int(reserved[i]),
        start,
        peak,
        lambda k: _run_start(actions, k),
        sizes,
        next_sig,
        next_at,
    )


def _could_fail_given(
    reserved: Callable[[int], int],
    start: int,
    peak: int,
    run_start_of: Callable[[int], int],
    sizes: Any,
    next_sig: Any,
    next_at: Any,
) -> Callable[[int], bool]:
    """The test of :func:`_could_fail` and :func:`_could_fail_at` once each has its
    reserved curve (``reserved(i)`` after event ``i``; ``start`` before the first),
    its peak and its way to find where a release run starts."""
    seg_growth = (Action.SEGMENT_ALLOC, Action.SEGMENT_MAP)
    run_start: dict[int, int] = {}

    def could_fail(k: int) -> bool:
        if next_sig[k] not in seg_growth:
            return True  # an OOM follows: it failed
        # The release run this event belongs to starts after the last non-release.
        j = run_start.get(next_at[k])
        if j is None:
            j = run_start[next_at[k]] = run_start_of(k)
        before = reserved(j - 1) if j > 0 else start
        return before + int(sizes[next_at[k]]) > peak

    return could_fail


def _served_from_cache(
    rep: DeviceReplay,
    pools: list[tuple[int, int]],
    cfg: rules.AllocatorConfig,
    columns: tuple[list, list, list, list, list],
    next_sig: list,
    next_at: list,
):
    """k -> would the request after the release run at event ``k`` have been served
    from the cache that run released, so that it never called cudaMalloc?

    The allocator frees cache for an allocation only after its best-fit search
    found no cached block and cudaMalloc (or the garbage collector's turn before
    it) came next.  Every segment the run cudaFree'd was one whole cached block
    just before; if one of them, in the request's pool and on its stream, would
    have passed that search (big enough; not an oversize block for a request
    under max_split_size, nor one past max_non_split_rounding), the search
    would have returned a block at least as good, so the run was not that
    allocation's: it was the program's empty_cache.  Blocks whose pending
    frees complete inside the run were not cached before it (release_cached_blocks
    waits for pending frees first), so their segments prove nothing; nor do
    expandable segments, whose best fit counts unmapped space."""
    if cfg.expandable_segments:
        return None
    actions, addrs, sizes, streams, evpool = columns
    # Events of the requests (allocations and OOMs), found only when a run is judged:
    # most traces have no release run at all.
    requests: list[np.ndarray] = []
    memo: dict[int, bool] = {}

    def request_after(k: int) -> int:
        if not requests:
            requests.append(np.flatnonzero(one_of(rep.action, (Action.ALLOC, Action.OOM))))
        at = int(np.searchsorted(requests[0], k))
        return int(requests[0][at]) if at < len(requests[0]) else -1

    def served(k: int) -> bool:
        end = next_at[k]
        if end not in memo:
            memo[end] = False
            r = end if next_sig[k] == Action.OOM else request_after(end)
            if r >= 0 and _private(pools, evpool[r]) < 0:
                memo[end] = release_fits(r, _run_start(actions, k), end)
        return memo[end]

    def release_fits(r: int, start: int, end: int) -> bool:
        """Did the run ``[start, end)`` free a whole cached segment that request ``r``'s
        best-fit search would have taken?"""
        size = cfg.round_size(sizes[r])
        small = rules.is_small_request(size)
        completed = [addrs[i] for i in range(start, end) if actions[i] == Action.FREE_COMPLETED]
        for i in range(start, end):
            seg, length = addrs[i], sizes[i]
            if (
                actions[i] == Action.SEGMENT_FREE
                and streams[i] == streams[r]
                and _private(pools, evpool[i]) < 0
                and (length <= rules.SMALL_BUFFER) == small
                and rules.may_serve(length, size, cfg.max_split_size, cfg.max_non_split_rounding)
                and not any(seg <= a < seg + length for a in completed)
            ):
                return True
        return False

    return served


def released_by_empty_cache(snap: Snapshot, rep: DeviceReplay) -> np.ndarray:
    """Per event of ``rep``: a release whose recorded call stack runs through
    ``empty_cache`` (torch's Python function or the allocator's ``emptyCache``).

    Only the program's empty_cache gathers its own stack for the releases; a
    release inside an allocation carries the allocation's stack, or the one the
    segment was allocated with, and neither can pass through empty_cache.  So
    such a stack settles what the allocator's rules can only bound."""
    out = np.zeros(len(rep), bool)
    action = rep.action
    release = np.flatnonzero(
        ((action == Action.SEGMENT_FREE) | (action == Action.SEGMENT_UNMAP)) & (rep.stack >= 0)
    )
    if not len(release):
        return out
    frames, strings = snap.frames, snap.frames.strings
    verdict: dict[int, bool] = {}
    for k, stack in zip(release.tolist(), rep.stack[release].tolist()):
        hit = verdict.get(stack)
        if hit is None:
            hit = False
            for f in snap.stacks.frame_ids(stack).tolist():
                name = strings[frames.name[f]]
                path = strings[frames.filename[f]].replace("\\", "/")
                if "emptyCache" in name or (name == "empty_cache" and "torch/" in path):
                    hit = True
                    break
            verdict[stack] = hit
        out[k] = hit
    return out


def _reserved_step(action: int, size: int) -> int:
    if action in (Action.SEGMENT_ALLOC, Action.SEGMENT_MAP):
        return size
    if action in (Action.SEGMENT_FREE, Action.SEGMENT_UNMAP):
        return -size
    return 0


def _private(pools: list[tuple[int, int]], index: int) -> int:
    """-1 for the ordinary pool (or unknown), else the private pool's index."""
    if index < 0 or index >= len(pools) or tuple(pools[index]) == (0, 0):
        return -1
    return index


def build_requests(
    rep: DeviceReplay,
    pools: list[tuple[int, int]],
    retries_possible: bool = True,
    gc_possible: bool = False,
    cfg: rules.AllocatorConfig | None = None,
    emptied: np.ndarray | None = None,
) -> Requests:
    """The request stream of one device's replay (``rep`` from the timeline): the same
    :class:`Requests` as :func:`build_requests_reference` (which says what each argument
    means), column for column.

    The releases are judged here, in Python, one segment event at a time (a trace has
    few); the loop over every event runs in C (``whatif_core.build_requests``), its dicts
    by address as hash maps.  Without the C extension the reference answers."""
    if not native_available():
        return build_requests_reference(rep, pools, retries_possible, gc_possible, cfg, emptied)
    action = np.ascontiguousarray(rep.action, np.int8)
    n = len(action)
    seg = np.flatnonzero((action >= Action.SEGMENT_ALLOC) & (action <= Action.SEGMENT_UNMAP))
    program = _program_releases(
        rep, pools, retries_possible, gc_possible, cfg or rules.AllocatorConfig(), emptied, seg
    )
    lut = np.array([_private(pools, p) for p in range(len(pools))], np.int32)
    cols = build_request_columns(rep, lut, program, len(seg))
    init = rep.initial
    pools_init = np.array([_private(pools, p) for p in init.seg_pool.tolist()], np.int32)
    return Requests(
        **cols,
        initial=init,
        initial_pool=pools_init,
        n_events=n,
        time_us=rep.time_us,
        replay_inconsistencies=rep.inconsistencies,
    )


def native_available() -> bool:
    """Whether the request stream's event loop runs in C (:func:`build_request_columns`)."""
    return _core is not None and hasattr(_core, "build_requests")


def build_request_columns(
    rep: DeviceReplay, pool_lut: np.ndarray, program: np.ndarray, n_segment_events: int
) -> dict[str, np.ndarray]:
    """The columns of :class:`Requests` (less the layout and the counts) from a
    device's replay ``rep``, by the C loop: ``pool_lut`` maps an event's pool to the
    request's, ``program`` lists the releases that were the program's empty_cache.

    The request columns are made as long as the events (no event makes two rows) and cut
    to the rows made: pages never written take no memory, and the cut gives the rest back
    without a copy."""
    n = len(rep)
    out = {
        name: np.empty(n, dtype)
        for name, dtype in (
            ("kind", np.int8),
            ("size", np.int64),
            ("stream", np.int64),
            ("pool", np.int32),
            ("ref", np.int64),
            ("event", np.int64),
        )
    }
    seg = {
        name: np.empty(n_segment_events, dtype)
        for name, dtype in (
            ("seg_tag", np.int64),
            ("seg_action", np.int8),
            ("seg_addr", np.int64),
            ("seg_size", np.int64),
        )
    }
    columns = tuple(
        np.ascontiguousarray(getattr(rep, c), t)
        for c, t in (
            ("action", np.int8),
            ("addr", np.int64),
            ("size", np.int64),
            ("stream", np.int64),
            ("pool", np.int32),
        )
    )
    rows, answers = _core.build_requests(
        columns,
        np.ascontiguousarray(rep.initial.blk_addr, np.int64),
        np.ascontiguousarray(pool_lut, np.int32),
        np.ascontiguousarray(program, np.int64),
        tuple(out.values()),
        tuple(seg.values()),
    )
    assert answers == n_segment_events
    for column in out.values():
        column.resize(rows, refcheck=False)
    return {**out, **seg}


class _Ints:
    """A numpy column read as the list of Python ints ``.tolist()`` would give, one item at
    a time: the reference's helpers run unchanged on the few events they look at."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def __getitem__(self, k: int) -> int:
        return self.values.item(k)

    def __len__(self) -> int:
        return len(self.values)


def _next_significant(action: np.ndarray, events: np.ndarray) -> tuple[dict, dict]:
    """For each of ``events`` (ascending): the first later event that is neither a release
    nor a completion (its action, its index; -1, -1 when none) - the reference's
    ``next_sig`` / ``next_at`` at those events only."""
    n = len(action)
    run = np.array(sorted(int(a) for a in RELEASE_RUN), np.int8)
    next_sig: dict[int, int] = {}
    next_at: dict[int, int] = {}
    found = -1  # the answer for the previous event, valid while it lies beyond this one
    for k in events.tolist():
        if found <= k:
            found, lo, width = -1, k + 1, 64
            while lo < n:
                chunk = action[lo : lo + width]
                hit = np.flatnonzero(~np.isin(chunk, run))
                if len(hit):
                    found = lo + int(hit[0])
                    break
                lo += width
                width *= 4
            if found < 0:
                found = n  # none: every later event is a release or completion
        next_at[k] = found if found < n else -1
        next_sig[k] = int(action[found]) if found < n else -1
    return next_sig, next_at


def _program_releases(
    rep: DeviceReplay,
    pools: list[tuple[int, int]],
    retries_possible: bool,
    gc_possible: bool,
    cfg: rules.AllocatorConfig,
    emptied: np.ndarray | None,
    seg: np.ndarray,
) -> np.ndarray:
    """The release events (of the segment events ``seg``) that
    :func:`build_requests_reference` judges the program's empty_cache, ascending: its rule,
    evaluated at the segment events only.  As there, it is evaluated at every segment
    event in order, releases or not: ``could_fail`` keeps the start of a release run by
    the event after it, found from the first segment event that asks."""
    action = np.ascontiguousarray(rep.action, np.int8)
    seg_act = action[seg]
    is_release = (seg_act == Action.SEGMENT_FREE) | (seg_act == Action.SEGMENT_UNMAP)
    if not retries_possible or not is_release.any():
        return seg[is_release].astype(np.int64)
    next_sig, next_at = _next_significant(action, seg)
    columns = (_Ints(action), _Ints(rep.addr), _Ints(rep.size), _Ints(rep.stream), _Ints(rep.pool))
    actions, _, sizes, _, evpool = columns
    could_fail = (
        _could_fail_at(rep, seg, actions, sizes, next_sig, next_at) if not gc_possible else None
    )
    served = _served_from_cache(rep, pools, cfg, columns, next_sig, next_at)  # type: ignore
    out = []
    for k, release in zip(seg.tolist(), is_release.tolist()):
        by_program = (
            _private(pools, evpool[k]) >= 0
            or (emptied is not None and bool(emptied[k]))
            or next_sig[k] not in (Action.SEGMENT_ALLOC, Action.SEGMENT_MAP, Action.OOM)
            or (could_fail is not None and not could_fail(k))
            or (actions[k] == Action.SEGMENT_FREE and served is not None and served(k))
        )
        if release and by_program:
            out.append(k)
    return np.array(out, np.int64)


def _could_fail_at(
    rep: DeviceReplay, seg: np.ndarray, actions: _Ints, sizes: _Ints, next_sig: dict, next_at: dict
):
    """:func:`_could_fail` from the segment events alone: reserved bytes change only at
    them, so the reserved curve is their running sum (in int64, as the curve is summed)
    and no curve of every event is made."""
    n = len(actions)
    if not n:
        return None
    act = rep.action[seg]
    grow = (act == Action.SEGMENT_ALLOC) | (act == Action.SEGMENT_MAP)
    delta = np.where(grow, rep.size[seg], -rep.size[seg]).astype(np.int64)
    after = np.cumsum(delta)  # reserved after each segment event, less the start
    curve_start = np.int64(int(rep.initial.seg_size.sum()))
    after += curve_start
    values = after.tolist()
    first = seg.tolist()[0] if len(seg) else n
    peak = max(values) if values else int(curve_start)
    if first > 0:
        peak = max(peak, int(curve_start))  # events before the first segment event

    def reserved(k: int) -> int:
        """The reserved curve after event ``k``."""
        at = int(np.searchsorted(seg, k, side="right")) - 1
        return values[at] if at >= 0 else int(curve_start)

    start = reserved(0) - _reserved_step(actions[0], sizes[0])
    return _could_fail_given(
        reserved, start, peak, lambda k: _run_start_at(actions, k), sizes, next_sig, next_at
    )


def _run_start_at(actions: _Ints, k: int) -> int:
    """:func:`_run_start` over a numpy column, in chunks (a release run can be long)."""
    column = actions.values
    run = np.array(sorted(int(a) for a in RELEASE_RUN), np.int8)
    width = 64
    while k > 0:
        lo = max(0, k - width)
        miss = np.flatnonzero(~np.isin(column[lo:k], run))
        if len(miss):
            return lo + int(miss[-1]) + 1
        k = lo
        width *= 4
    return 0


def build_requests_reference(
    rep: DeviceReplay,
    pools: list[tuple[int, int]],
    retries_possible: bool = True,
    gc_possible: bool = False,
    cfg: rules.AllocatorConfig | None = None,
    emptied: np.ndarray | None = None,
) -> Requests:
    """The request stream of one device's replay (``rep`` from the timeline), one event at
    a time in Python: the reference :func:`build_requests` equals.

    ``retries_possible=False`` says the allocator never freed cache to retry an
    allocation (``num_alloc_retries`` 0, no max_split_size, no garbage
    collection), so every release in the trace was the program's empty_cache.

    Otherwise a run of releases right before a new segment is the allocator's
    retry after a failed cudaMalloc only if that cudaMalloc could have failed:
    reserved memory before the releases plus the new segment must exceed the
    peak reserved of the recording (the device held that much at the peak, so
    less never fails).  Runs that could not have failed are the program's
    ``empty_cache``.  (With ``gc_possible`` - a garbage collection threshold -
    the allocator releases before cudaMalloc without a failure, so the rule is
    not applied.)  Nor are runs after which the request would have been served
    from a segment the run released (:func:`_served_from_cache`; ``cfg``: the
    recorded settings, default the allocator's defaults): the allocator looks
    in its cache before it ever frees any.  ``emptied`` (per event, from
    :func:`released_by_empty_cache`) marks releases whose recorded stack shows
    the program's empty_cache: those are the program's whatever the rules say.
    """
    actions = rep.action.tolist()
    addrs = rep.addr.tolist()
    sizes = rep.size.tolist()
    streams = rep.stream.tolist()
    evpool = rep.pool.tolist()
    n = len(actions)
    # For each event: the first later event that is neither a release nor a
    # completion.  Releases followed by a new segment or an OOM belong to an
    # allocation (the allocator freeing cache to retry); others are empty_cache.
    next_sig = [-1] * (n + 1)
    next_at = [-1] * (n + 1)  # the event index of next_sig
    nxt, nxt_at = -1, -1
    for k in range(n - 1, -1, -1):
        next_sig[k], next_at[k] = nxt, nxt_at
        if actions[k] not in RELEASE_RUN:
            nxt, nxt_at = actions[k], k
    could_fail = _could_fail(rep, actions, sizes, next_sig, next_at) if not gc_possible else None
    served = _served_from_cache(
        rep,
        pools,
        cfg or rules.AllocatorConfig(),
        (actions, addrs, sizes, streams, evpool),
        next_sig,
        next_at,
    )
    init = rep.initial
    init_index = {a: j for j, a in enumerate(init.blk_addr.tolist())}
    kind: list[int] = []
    size: list[int] = []
    stream: list[int] = []
    pool: list[int] = []
    ref: list[int] = []
    event: list[int] = []
    seg_tag: list[int] = []
    seg_action: list[int] = []
    seg_addr: list[int] = []
    seg_size: list[int] = []
    waiting: list[int] = []  # answers waiting for the allocation they belong to
    live: dict[int, int] = {}  # address -> ALLOC row of the block there
    pending: dict[int, int] = {}  # address -> ref of a block whose free is pending
    in_empty_cache = False
    for k in range(n):
        act = actions[k]
        if act == Action.ALLOC:
            i = len(kind)
            kind.append(ALLOC)
            size.append(sizes[k])
            stream.append(streams[k])
            pool.append(_private(pools, evpool[k]))
            ref.append(NO_REF)
            event.append(k)
            live[addrs[k]] = i
            for j in waiting:
                seg_tag[j] = i
            waiting.clear()
            in_empty_cache = False
        elif act == Action.FREE_REQUESTED:
            a = addrs[k]
            r = live.pop(a, None)
            if r is None:
                r = -2 - init_index[a] if a in init_index else NO_REF
                init_index.pop(a, None)
            if r == NO_REF:
                continue
            immediate = k + 1 < n and actions[k + 1] == Action.FREE_COMPLETED and addrs[k + 1] == a
            kind.append(FREE if immediate else FREE_REQ)
            size.append(sizes[k])
            stream.append(streams[k])
            pool.append(-1)
            ref.append(r)
            event.append(k)
            if not immediate:
                pending[a] = r
            in_empty_cache = False
        elif act == Action.FREE_COMPLETED:
            a = addrs[k]
            if (
                k > 0
                and actions[k - 1] == Action.FREE_REQUESTED
                and addrs[k - 1] == a
                and a not in pending
            ):
                continue  # the completion of an immediate FREE
            r = pending.pop(a, None)
            if r is None:  # pending since before the window
                r = -2 - init_index[a] if a in init_index else NO_REF
                init_index.pop(a, None)
            if r == NO_REF:
                continue
            kind.append(FREE_DONE)
            size.append(sizes[k])
            stream.append(streams[k])
            pool.append(-1)
            ref.append(r)
            event.append(k)
        elif act == Action.OOM:
            i = len(kind)
            kind.append(OOM)
            size.append(sizes[k])
            stream.append(streams[k])
            pool.append(-1)
            ref.append(NO_REF)
            event.append(k)
            for j in waiting:
                seg_tag[j] = i
            waiting.clear()
            in_empty_cache = False
        elif act in SEGMENT_ACTIONS:
            seg_action.append(act)
            seg_addr.append(addrs[k])
            seg_size.append(sizes[k])
            is_release = act in (Action.SEGMENT_FREE, Action.SEGMENT_UNMAP)
            # Cache released inside an allocation comes right before its new
            # segment (or its OOM); a malloc never releases a private pool
            # while capturing, so such releases are the program's too.
            by_program = (
                not retries_possible
                or _private(pools, evpool[k]) >= 0
                or (emptied is not None and bool(emptied[k]))
                or next_sig[k] not in (Action.SEGMENT_ALLOC, Action.SEGMENT_MAP, Action.OOM)
                or (could_fail is not None and not could_fail(k))
                or (act == Action.SEGMENT_FREE and served is not None and served(k))
            )
            if is_release and by_program:
                if not in_empty_cache:
                    kind.append(EMPTY_CACHE)
                    size.append(0)
                    stream.append(streams[k])
                    pool.append(-1)
                    ref.append(NO_REF)
                    event.append(k)
                    in_empty_cache = True
                seg_tag.append(len(kind) - 1)
            else:
                seg_tag.append(-1)
                waiting.append(len(seg_tag) - 1)
    # Answers after the last allocation (an interrupted malloc): tag past the end.
    for j in waiting:
        seg_tag[j] = len(kind)
    pools_init = np.array([_private(pools, p) for p in init.seg_pool.tolist()], np.int32)
    return Requests(
        kind=np.array(kind, np.int8),
        size=np.array(size, np.int64),
        stream=np.array(stream, np.int64),
        pool=np.array(pool, np.int32),
        ref=np.array(ref, np.int64),
        event=np.array(event, np.int64),
        initial=init,
        initial_pool=pools_init,
        seg_tag=np.array(seg_tag, np.int64),
        seg_action=np.array(seg_action, np.int8),
        seg_addr=np.array(seg_addr, np.int64),
        seg_size=np.array(seg_size, np.int64),
        n_events=n,
        time_us=rep.time_us,
        replay_inconsistencies=rep.inconsistencies,
    )
