"""Edits of a what-if request stream: the recorded run without some allocations, or
with some freed earlier.

Used to simulate remedies that remove memory the program keeps (a leak, the
outputs an evaluation loop keeps without ``no_grad``): the allocations go,
with their frees; the recorded segment answers tagged to them are dropped
(they were the answer to a request that is no longer made).  A tensor the changed
program would release sooner (DDP's gradients under the bucket view) keeps its
allocation and has its free moved.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..whatif import Case
from ..whatif import requests as rq


def _freeing(reqs: rq.Requests) -> np.ndarray:
    """Per request: a free (immediate, requested or completed) of an allocation in the
    window."""
    is_free = (reqs.kind == rq.FREE) | (reqs.kind == rq.FREE_REQ) | (reqs.kind == rq.FREE_DONE)
    return is_free & (reqs.ref >= 0)


def without(case: Case, drop: np.ndarray) -> Case:
    """``case`` with the ALLOC requests in ``drop`` (bool per request) and their frees removed."""
    reqs = case.requests
    drop = drop & (reqs.kind == rq.ALLOC)
    gone = drop.copy()
    freeing = _freeing(reqs)
    gone[freeing] = drop[reqs.ref[freeing]]
    return _rows_dropped(case, gone, freeing)


def _rows_dropped(case: Case, gone: np.ndarray, freeing: np.ndarray | None = None) -> Case:
    """``case`` without the rows of ``gone`` (none of them an allocation a kept row
    frees), the kept rows' references and the recorded answers renumbered.  ``freeing``:
    :func:`_freeing` of its requests when the caller has it."""
    reqs = case.requests
    n = len(reqs)
    refs = reqs.ref
    if freeing is None:
        freeing = _freeing(reqs)
    keep = ~gone
    # The kept rows as indices, found once for every column taken below.
    rows = np.flatnonzero(keep)
    new_index = np.cumsum(keep)  # old request -> new request (for kept rows), less 1
    new_index -= 1
    kept_ref = refs[rows]
    m = freeing[rows]
    kept_ref[m] = new_index[kept_ref[m]]
    tag = reqs.seg_tag
    tag_ok = (tag >= 0) & (tag < n)
    seg_keep = ~tag_ok | keep[np.clip(tag, 0, max(n - 1, 0))]
    new_tag = tag.copy()
    new_tag[tag_ok] = new_index[tag[tag_ok]]
    new_tag[tag >= n] = int(keep.sum())
    out_reqs = dataclasses.replace(
        reqs,
        kind=reqs.kind[rows],
        size=reqs.size[rows],
        stream=reqs.stream[rows],
        pool=reqs.pool[rows],
        ref=kept_ref,
        event=reqs.event[rows],
        seg_tag=new_tag[seg_keep],
        seg_action=reqs.seg_action[seg_keep],
        seg_addr=reqs.seg_addr[seg_keep],
        seg_size=reqs.seg_size[seg_keep],
    )
    return case.with_requests(out_reqs)


def frees_moved(case: Case, moves: list[tuple[int, int]]) -> Case:
    """``case`` with allocation ``a`` freed right after request ``k`` instead of where it
    was (or never), for each ``(a, k)`` in ``moves`` (``k >= a``): a tensor the program
    would release earlier."""
    if not moves:
        return case
    reqs = case.requests
    moved = np.zeros(len(reqs), bool)
    moved[[a for a, _ in moves]] = True
    freeing = _freeing(reqs)
    gone = np.zeros(len(reqs), bool)
    gone[freeing] = moved[reqs.ref[freeing]]
    # A dropped row's index maps to the kept row before it: a free placed after it lands
    # where it would have.
    new_index = np.cumsum(~gone) - 1
    return freed_after(
        _rows_dropped(case, gone), [(int(new_index[a]), int(new_index[k])) for a, k in moves]
    )


def freed_after(case: Case, frees: list[tuple[int, int]]) -> Case:
    """``case`` with a FREE of allocation ``a`` inserted right after request ``k``, for each
    ``(a, k)`` in ``frees`` (a kept tensor released when the program would drop it)."""
    if not frees:
        return case
    reqs = case.requests
    allocs = np.array([a for a, _ in frees], np.int64)
    return with_rows(
        case,
        np.array([k for _, k in frees], np.int64),
        np.full(len(frees), rq.FREE, np.int8),
        reqs.size[allocs],
        reqs.stream[allocs],
        allocs,
        np.full(len(frees), -1, np.int64),
    )


def with_rows(
    case: Case,
    after: np.ndarray,
    kind: np.ndarray,
    size: np.ndarray,
    stream: np.ndarray,
    ref_old: np.ndarray,
    ref_new: np.ndarray,
) -> Case:
    """``case`` with new rows: row ``i`` right after request ``after[i]`` (rows after the
    same request keep their given order), of ``kind`` (ALLOC or FREE), ``size`` and
    ``stream``; a new FREE frees request ``ref_old[i]`` of ``case`` when that is >= 0,
    else new row ``ref_new[i]`` (an allocation made again: a tensor the changed program
    frees and makes anew)."""
    reqs = case.requests
    n, m = len(reqs), len(after)
    if not m:
        return case
    after = np.asarray(after, np.int64)
    # One order for old and new rows: an old row j sorts as (j, 0), a new one as (after, 1).
    key_pos = np.concatenate([np.arange(n, dtype=np.int64), after])
    key_new = np.concatenate([np.zeros(n, np.int8), np.ones(m, np.int8)])
    key_seq = np.concatenate([np.zeros(n, np.int64), np.arange(m, dtype=np.int64)])
    order = np.lexsort((key_seq, key_new, key_pos))
    position = np.empty(n + m, np.int64)
    position[order] = np.arange(n + m)
    old_at, new_at = position[:n], position[n:]
    total = n + m
    out_kind = np.empty(total, reqs.kind.dtype)
    out_size = np.empty(total, np.int64)
    out_stream = np.empty(total, np.int64)
    out_pool = np.empty(total, reqs.pool.dtype)
    out_ref = np.empty(total, np.int64)
    out_event = np.empty(total, np.int64)
    out_kind[old_at], out_size[old_at], out_stream[old_at] = reqs.kind, reqs.size, reqs.stream
    out_pool[old_at], out_event[old_at] = reqs.pool, reqs.event
    r = reqs.ref.copy()
    ok = r >= 0
    r[ok] = old_at[r[ok]]
    out_ref[old_at] = r
    out_kind[new_at] = kind
    out_size[new_at] = size
    out_stream[new_at] = stream
    out_pool[new_at] = -1
    out_event[new_at] = reqs.event[np.clip(after, 0, max(n - 1, 0))] if n else 0
    frees_old = np.asarray(ref_old, np.int64)
    frees_new = np.asarray(ref_new, np.int64)
    new_ref = np.full(m, -1, np.int64)
    o = frees_old >= 0
    new_ref[o] = old_at[frees_old[o]]
    w = ~o & (frees_new >= 0)
    new_ref[w] = new_at[frees_new[w]]
    out_ref[new_at] = new_ref
    tag = reqs.seg_tag.copy()
    ok = (tag >= 0) & (tag < n)
    tag[ok] = old_at[tag[ok]]
    tag[reqs.seg_tag >= n] = total
    out_reqs = dataclasses.replace(
        reqs,
        kind=out_kind,
        size=out_size,
        stream=out_stream,
        pool=out_pool,
        ref=out_ref,
        event=out_event,
        seg_tag=tag,
    )
    return case.with_requests(out_reqs)
