"""Out of memory in the compiled replay: a MemoryError, never a hang or a crash.

The C state is built (``new_state``) with the GIL held; a failed allocation there must
raise at once.  A real snapshot's layouts hold a few hundred blocks, whose buffers come
from memory the process already has, so a limit cannot make them fail predictably.  The
child process therefore cuts the free blocks of a real layout (same segments, same
allocated blocks, same bytes) into ~600k pieces: the state's block table and hash map are
then tens of MiB each, mapped on their own, and an address-space limit (``RLIMIT_AS``)
decides exactly whether they fit.  The child raises the limit step by step from just above
its current size until the state builds; every step short of that must end in
MemoryError.  The steps are far smaller than the block table's last doubling, so some
limit admits the hash map (allocated first) and refuses the block table: the failure is
in the block helpers, with the GIL held.  The second test makes the event loop run out
(see CHILD_RUN).

A subprocess, because the limit is process-wide and a failure may hang (the test's
timeout catches that) or kill the process (a signal shows as a negative return code).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import DATA
from tests.native_gate import needs
from vramscope.viewer.model.replay import native_available

pytestmark = [
    needs(native_available(), "replay_core extension not built"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's"
    ),
]

SNAPSHOT = DATA / "fragmentation_oom.pickle"  # 1.7 GiB free at the end: room for many pieces
TIMEOUT_S = 60

CHILD = r"""
import dataclasses
import resource
import sys

import numpy as np

from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model._native import replay_core  # the compiled module, or ImportError
from vramscope.viewer.model.replay import FREE, replay_device

PIECES = 700_000  # free blocks wanted: a block table of 2**20 slots, a hash map of 2**22
STEP = 4 << 20  # limit increments, far below the block table's last doubling (~28 MiB)


def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def cut_free_blocks(layout, pieces):
    # Free blocks cut into pieces of equal size (the last one of a block takes the rest).
    free = layout.blk_state == FREE
    piece = -(-int(layout.blk_size[free].sum()) // pieces)
    piece = -(-piece // 512) * 512
    count = np.where(free, np.maximum(layout.blk_size // piece, 1), 1)
    row = np.repeat(np.arange(layout.n_blocks), count)
    ends = np.cumsum(count)
    off = (np.arange(len(row)) - np.repeat(ends - count, count)) * piece
    last = np.zeros(len(row), bool)
    last[ends - 1] = True
    cols = {f: getattr(layout, f)[row] for f in ("blk_requested", "blk_state", "blk_stack",
                                                "blk_alloc")}
    return dataclasses.replace(layout, blk_addr=layout.blk_addr[row] + off,
                               blk_size=np.where(last, layout.blk_size[row] - off, piece),
                               **cols)


snap = load_snapshot(sys.argv[1])
rep = replay_device(snap, 0, native=True)
big = cut_free_blocks(rep.layout_after(len(rep) - 1), PIECES)
assert big.blk_size.sum() == rep.layout_after(len(rep) - 1).blk_size.sum()
n = big.n_blocks
# Once without a limit: the state builds, and what it caches on the way exists before
# the limits are set.
assert len(replay_core.layout(rep._native_state(big))[6]) == 8 * n

soft, hard = resource.getrlimit(resource.RLIMIT_AS)
refused = 0
for margin in range(2 * STEP, 1 << 31, STEP):
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + margin, hard))
    try:
        state = rep._native_state(big)
    except MemoryError:
        refused += 1
        continue
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    break
else:
    raise SystemExit("the state never built")
built = len(replay_core.layout(state)[6]) // 8
print(f"MemoryError under {refused} limits; {built} of {n} blocks built under VmSize + "
      f"{margin >> 20} MiB")
"""


# The event loop lets go of the GIL: a failed allocation there is noted in the state and
# raised once the loop holds the GIL again.  Real traces keep a few hundred blocks alive,
# so the events here are made to need a million: one 1 GiB segment beside the snapshot's,
# then 1M allocations of 512 bytes that split it (block table and hash map: 84 MiB, grown
# by doubling, so the limits below stop some growths of the one and some of the other).
# After the MemoryError the state must still work, as live sessions keep theirs: every
# allocated block is found by its address, and a segment can replace the split one.
CHILD_RUN = r"""
import resource
import sys

import numpy as np

from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model._native import replay_core
from vramscope.viewer.model.replay import replay_device

N = 1_000_000


def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def events(action, addr, size):
    k = len(addr)
    return (np.full(k, action, np.int8) if np.isscalar(action) else action, addr,
            size, np.zeros(k, np.int32), np.zeros(k, np.int64))


def run(state, evs):
    replay_core.run(state, *evs, 0, 0, np.zeros(0, np.int64), None, None)


snap = load_snapshot(sys.argv[1])
rep = replay_device(snap, 0, native=True)
ends = rep.initial.seg_addr + rep.initial.seg_size
base = (((int(ends.max()) if len(ends) else 0) >> 30) + 1) << 30
act = np.zeros(N + 1, np.int8)
act[0] = 3  # segment_alloc, then allocs
size = np.full(N + 1, 512, np.int64)
size[0] = 1 << 30
split = events(act, np.concatenate([[base], base + 512 * np.arange(N)]).astype(np.int64), size)
segment = tuple(c[:1] for c in split)

soft, hard = resource.getrlimit(resource.RLIMIT_AS)
for margin_mib in range(4, 80, 4):
    state = rep._native_state(rep.initial)
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + (margin_mib << 20), hard))
    try:
        run(state, split)
        outcome = "no error"
    except MemoryError:
        outcome = "MemoryError"
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    cols = replay_core.layout(state)
    held = np.frombuffer(cols[6], np.int64)[np.frombuffer(cols[9], np.int8) == 0].copy()
    run(state, events(1, held, np.zeros(len(held), np.int64)))  # free_requested each
    missed = replay_core.inconsistencies(state)
    run(state, segment)
    blocks = len(replay_core.layout(state)[6]) // 8 - rep.initial.n_blocks
    print(f"{margin_mib} MiB: {outcome}; {missed} lookups missed; then {blocks} new block(s)")
"""


def run_child(code: str) -> str:
    """The child's output; fails the test when it hangs, dies of a signal or errs."""
    # Every large buffer gets a mapping of its own, unmapped when freed: glibc would
    # otherwise raise its mmap threshold after a free and keep freed memory in the heap,
    # where the next try could take it without asking for address space.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(128 << 10))
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, os.fspath(SNAPSHOT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        out = None
    if out is None:
        pytest.fail(
            f"out of memory in the C replay hung (no answer in {TIMEOUT_S} s)", pytrace=False
        )
    assert out.returncode == 0, (
        f"the child ended with {out.returncode} "
        f"({'signal ' + str(-out.returncode) if out.returncode < 0 else 'an error'}):\n"
        f"{out.stdout}{out.stderr[-3000:]}"
    )
    return out.stdout


def test_out_of_memory_while_building_the_state_raises_memory_error():
    lines = run_child(CHILD).strip().splitlines()
    assert len(lines) == 1, lines
    m = re.fullmatch(
        r"MemoryError under (\d+) limits; (\d+) of (\d+) blocks built under "
        r"VmSize \+ (\d+) MiB",
        lines[0],
    )
    assert m, lines[0]
    refused, built, n, margin_mib = map(int, m.groups())
    assert built == n > 500_000
    # The hash map alone (2**22 slots of 12 bytes: 48 MiB) exceeds the first limits, and
    # the state as a whole needs more than 90 MiB: many limits were refused, the last ones
    # with the hash map in place.
    assert refused >= 10 and margin_mib > 90, lines[0]


def test_out_of_memory_in_the_event_loop_raises_memory_error_and_keeps_the_state():
    lines = run_child(CHILD_RUN).strip().splitlines()
    assert lines == [
        f"{m} MiB: MemoryError; 0 lookups missed; then 1 new block(s)" for m in range(4, 80, 4)
    ], lines
