"""The state before the first event, walked back from the final snapshot.

The recording may have started late or its ring buffer may have wrapped.
Segments created or freed inside the window are undone, blocks freed inside
the window without an allocation there were "allocated before recording",
and blocks alive at the end without an allocation in the window were alive
throughout.  Blocks allocated inside the window are exact; a block allocated
before the window and freed inside it has its size inferred by rounding
(marked ``alloc_event == -1``).
"""

from __future__ import annotations

import bisect
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..core import allocator_rules as rules
from ..core.snapshot import Action, BlockState, Snapshot
from .layout import ALLOCATED, BEFORE_RECORDING, FREE, PENDING
from .native_loop import _core, use_native
from .state import Known, _State

# From this many events the scan for the first frees runs beside the segments' walk back.
CONCURRENT_SCAN_EVENTS = 1 << 19


def _seed(
    snap: Snapshot,
    device: int,
    actions: np.ndarray,
    addrs: np.ndarray,
    reqs: np.ndarray,
    streams: np.ndarray,
    native: bool | None = None,
) -> _State:
    """The state before the first event, walked back from the final snapshot
    (``actions``/``addrs``/``reqs``/``streams``: the device's event columns)."""
    segs, blocks = snap.segments, snap.blocks
    settings = snap.allocator_settings
    st = _State(settings)
    on_dev = np.flatnonzero(segs.device == device)
    default_pool = snap.ordinary_pool or 0
    st.known = known_facts(snap, device)
    # The compiled scan of every event (no GIL) on a thread while the segments are
    # walked back here: on a long trace the two take about as long.
    scan: Future | None = None
    if use_native(native) and len(actions) >= CONCURRENT_SCAN_EVENTS:
        pool = ThreadPoolExecutor(1)
        scan = pool.submit(_first_frees, actions, addrs, native)
        pool.shutdown(wait=False)
    ranges = _initial_ranges(segs, on_dev, actions, addrs, reqs, streams, default_pool)
    seg_end = None
    for addr in sorted(ranges):
        if seg_end is not None and addr < seg_end:  # overlapping guesses: keep the first
            st.inconsistencies += 1
            continue
        st.segs[addr] = ranges[addr]
        st.seg_starts.append(addr)
        st.seg_blocks[addr] = []
        seg_end = addr + ranges[addr][0]
    # Active blocks at the start: freed in the window without an allocation there,
    # or alive at the end without one.
    # (An address whose first alloc/free event is a free.)
    active: dict[int, list] = {}
    firsts, allocated = scan.result() if scan is not None else _first_frees(actions, addrs, native)
    allocated_in_window = set(allocated.tolist())
    inferred: set[int] = set()  # sizes by rounding (exact ones come from the final snapshot)
    for act, addr, req in zip(
        actions[firsts].tolist(), addrs[firsts].tolist(), reqs[firsts].tolist()
    ):
        state = ALLOCATED if act == 1 else PENDING
        active[addr] = [st.round(req), state, req, -1, BEFORE_RECORDING, None]
        inferred.add(addr)
    final_blocks = np.flatnonzero(
        np.isin(blocks.segment, on_dev)
        & (blocks.state != BlockState.FREE)
        & (blocks.state != BlockState.UNKNOWN)
    )
    for b in final_blocks.tolist():
        addr = int(blocks.address[b])
        if addr in allocated_in_window:
            continue
        entry = [
            int(blocks.size[b]),
            int(blocks.state[b]),
            int(blocks.requested_size[b]),
            int(blocks.stack[b]),
            BEFORE_RECORDING,
            None,
        ]
        if addr in active:  # freed in the window: keep its in-window first state
            entry[1] = active[addr][1]
        active[addr] = entry
        inferred.discard(addr)
    # Lay them into the segments; the rest of each segment is free.
    ordered = sorted(active)
    for seg_addr in st.seg_starts:
        end = seg_addr + st.segs[seg_addr][0]
        # In a large-pool segment no free block of 1 MiB or less exists (the allocator
        # splits off only bigger remainders): such a gap after a block whose size was
        # inferred by rounding is that block's unsplit remainder.
        absorbs = not st.segs[seg_addr][2] and not st.segs[seg_addr][4]
        i = bisect.bisect_left(ordered, seg_addr)
        cursor = seg_addr
        while i < len(ordered) and ordered[i] < end:
            addr = ordered[i]
            block = active[addr]
            if addr < cursor or addr in st.blocks:  # overlapping guesses: keep the first
                st.inconsistencies += 1
                i += 1
                continue
            if addr > cursor:
                st._put_block(cursor, [addr - cursor, FREE, 0, -1, BEFORE_RECORDING, seg_addr])
            block[0] = min(block[0], end - addr)
            if absorbs and addr in inferred:
                nxt = ordered[i + 1] if i + 1 < len(ordered) and ordered[i + 1] < end else end
                if 0 < nxt - addr - block[0] <= rules.SMALL_SIZE:
                    block[0] = nxt - addr
            block[5] = seg_addr
            st._put_block(addr, block)
            cursor = addr + block[0]
            i += 1
        if cursor < end:
            st._put_block(cursor, [end - cursor, FREE, 0, -1, BEFORE_RECORDING, seg_addr])
    return st


def known_facts(snap: Snapshot, device: int) -> Known:
    """The segment facts of ``snap``'s segments on ``device`` (see :class:`.state.Known`)."""
    segs = snap.segments
    on = np.flatnonzero(segs.device == device)
    return Known(
        segs.address[on],
        segs.total_size[on],
        segs.is_small[on],
        segs.pool[on],
        snap.ordinary_pool or 0,
    )


def _first_frees(
    actions: np.ndarray, addrs: np.ndarray, native: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(indices of events that are the first alloc/free event of their address and a
    free, every address allocated in the window)."""
    if use_native(native):
        firsts, allocated = _core.seed_scan(
            np.ascontiguousarray(actions, np.int8), np.ascontiguousarray(addrs, np.int64)
        )
        return np.frombuffer(firsts, np.int64), np.frombuffer(allocated, np.int64)
    touch = np.flatnonzero(actions <= 2)
    _, first = np.unique(addrs[touch], return_index=True)
    firsts = np.sort(touch[first])
    firsts = firsts[actions[firsts] != 0]
    return firsts, np.unique(addrs[actions == 0])


def _initial_ranges(segs, on_dev, actions, addrs, reqs, streams, default_pool: int) -> dict:
    """Segments before the first event: the final ones with the trace's segment
    events undone from the end (address -> [size, stream, small, pool, expandable]).

    Expandable segments are undone as mapped ranges, the way snapshots list them:
    undoing a map cuts its pages out of the range holding them (splitting it when
    they were in the middle), undoing an unmap puts the pages back, joining the
    ranges on either side."""
    ranges = {
        int(segs.address[s]): [
            int(segs.total_size[s]),
            int(segs.stream[s]),
            bool(segs.is_small[s]),
            int(segs.pool[s]),
            bool(segs.is_expandable[s]),
        ]
        for s in on_dev
    }
    starts = sorted(ranges)
    seg_rows = np.flatnonzero((actions >= Action.SEGMENT_ALLOC) & (actions <= Action.SEGMENT_UNMAP))
    for r in seg_rows[::-1].tolist():
        act, addr, size, stream = int(actions[r]), int(addrs[r]), int(reqs[r]), int(streams[r])
        if act == Action.SEGMENT_ALLOC:
            if ranges.pop(addr, None) is not None:
                starts.remove(addr)
        elif act == Action.SEGMENT_FREE:
            if addr not in ranges:
                bisect.insort(starts, addr)
            ranges[addr] = [size, stream, size <= rules.SMALL_BUFFER, default_pool, False]
        elif act == Action.SEGMENT_MAP:  # not mapped before: cut it out
            i = bisect.bisect_right(starts, addr) - 1
            if i < 0 or addr >= starts[i] + ranges[starts[i]][0]:
                continue
            start = starts[i]
            facts = ranges[start]
            end, cut_end = start + facts[0], addr + size
            if cut_end < end and cut_end not in ranges:  # (ranges overlap only in broken traces)
                ranges[cut_end] = [end - cut_end] + facts[1:]
                bisect.insort(starts, cut_end)
            if addr > start:
                facts[0] = addr - start
            else:
                del ranges[start]
                starts.remove(start)
        else:  # SEGMENT_UNMAP: mapped before: put it back, joining its neighbours
            i = bisect.bisect_right(starts, addr)
            left = starts[i - 1] if i > 0 else None
            if (left is not None and left + ranges[left][0] > addr) or (
                i < len(starts) and starts[i] < addr + size
            ):
                continue  # overlaps a range (an inconsistent trace)
            right = starts[i] if i < len(starts) and starts[i] == addr + size else None
            if right is not None and not (ranges[right][4] and ranges[right][1] == stream):
                right = None
            if left is not None and not (
                left + ranges[left][0] == addr and ranges[left][4] and ranges[left][1] == stream
            ):
                left = None
            if left is None:
                facts = (
                    ranges[right][1:]
                    if right is not None
                    else [stream, size % rules.LARGE_BUFFER != 0, default_pool, True]
                )
                ranges[addr] = [0] + list(facts)
                bisect.insort(starts, addr)
                left = addr
            ranges[left][0] += size
            if right is not None:
                ranges[left][0] += ranges.pop(right)[0]
                starts.remove(right)
    return ranges
