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

import numpy as np

from .. import allocator_rules as rules
from ..snapshot import Action, BlockState, Snapshot
from .layout import ALLOCATED, BEFORE_RECORDING, FREE, PENDING
from .native import _core, use_native
from .state import _State


def _seed(snap: Snapshot, device: int, actions: np.ndarray, addrs: np.ndarray,
          reqs: np.ndarray, streams: np.ndarray, native: bool | None = None) -> _State:
    """The state before the first event, walked back from the final snapshot
    (``actions``/``addrs``/``reqs``/``streams``: the device's event columns)."""
    segs, blocks = snap.segments, snap.blocks
    settings = snap.allocator_settings
    st = _State(settings)
    on_dev = np.flatnonzero(segs.device == device)
    final = {int(segs.address[s]): s for s in on_dev}
    # Segments: undo segment events from the end.
    sizes = {a: int(segs.total_size[s]) for a, s in final.items()}
    meta = {a: (int(segs.stream[s]), bool(segs.is_small[s]), int(segs.pool[s]),
                bool(segs.is_expandable[s])) for a, s in final.items()}
    seg_rows = np.flatnonzero((actions >= 3) & (actions <= 6))
    for r in seg_rows[::-1].tolist():
        act, addr, size = int(actions[r]), int(addrs[r]), int(reqs[r])
        if act == Action.SEGMENT_ALLOC:
            sizes.pop(addr, None)
        elif act == Action.SEGMENT_FREE:
            sizes[addr] = size
            meta[addr] = (int(streams[r]), size <= rules.SMALL_BUFFER, 0, False)
        else:  # map / unmap of an expandable segment: shrink / grow it back
            owner = max((a for a in sizes if a <= addr and meta[a][3]), default=None)
            if owner is None:
                continue
            sizes[owner] += -size if act == Action.SEGMENT_MAP else size
            if sizes[owner] <= 0:
                sizes.pop(owner)
    default_pool = snap.ordinary_pool or 0
    st.known = {a: (meta[a][1], meta[a][2]) for a in final}
    st.known[None] = (False, default_pool)  # for segments the final snapshot lacks
    seg_end = None
    for addr in sorted(sizes):
        if seg_end is not None and addr < seg_end:  # overlapping guesses: keep the first
            st.inconsistencies += 1
            continue
        stream, small, pool, exp = meta[addr]
        st.segs[addr] = [sizes[addr], stream, small, pool if addr in final else default_pool, exp]
        st.seg_starts.append(addr)
        st.seg_blocks[addr] = []
        seg_end = addr + sizes[addr]
    # Active blocks at the start: freed in the window without an allocation there,
    # or alive at the end without one.
    # (An address whose first alloc/free event is a free.)
    active: dict[int, list] = {}
    firsts, allocated = _first_frees(actions, addrs, native)
    allocated_in_window = set(allocated.tolist())
    for act, addr, req in zip(actions[firsts].tolist(), addrs[firsts].tolist(),
                              reqs[firsts].tolist()):
        state = ALLOCATED if act == 1 else PENDING
        active[addr] = [st.round(req), state, req, -1, BEFORE_RECORDING, None]
    final_blocks = np.flatnonzero(np.isin(blocks.segment, on_dev)
                                  & (blocks.state != BlockState.FREE)
                                  & (blocks.state != BlockState.UNKNOWN))
    for b in final_blocks.tolist():
        addr = int(blocks.address[b])
        if addr in allocated_in_window:
            continue
        entry = [int(blocks.size[b]), int(blocks.state[b]), int(blocks.requested_size[b]),
                 int(blocks.stack[b]), BEFORE_RECORDING, None]
        if addr in active:  # freed in the window: keep its in-window first state
            entry[1] = active[addr][1]
        active[addr] = entry
    # Lay them into the segments; the rest of each segment is free.
    ordered = sorted(active)
    for seg_addr in st.seg_starts:
        end = seg_addr + st.segs[seg_addr][0]
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
            block[5] = seg_addr
            st._put_block(addr, block)
            cursor = addr + block[0]
            i += 1
        if cursor < end:
            st._put_block(cursor, [end - cursor, FREE, 0, -1, BEFORE_RECORDING, seg_addr])
    return st


def _first_frees(actions: np.ndarray, addrs: np.ndarray,
                 native: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(indices of events that are the first alloc/free event of their address and a
    free, every address allocated in the window)."""
    if use_native(native):
        firsts, allocated = _core.seed_scan(np.ascontiguousarray(actions, np.int8),
                                            np.ascontiguousarray(addrs, np.int64))
        return np.frombuffer(firsts, np.int64), np.frombuffer(allocated, np.int64)
    touch = np.flatnonzero(actions <= 2)
    _, first = np.unique(addrs[touch], return_index=True)
    firsts = np.sort(touch[first])
    firsts = firsts[actions[firsts] != 0]
    return firsts, np.unique(addrs[actions == 0])

