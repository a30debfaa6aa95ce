"""Check a big real snapshot's replay: exact final layout, and peaks against the sidecar.

    python tests/bench/check_replay.py SNAPSHOT.pickle

The checks of ``tests/model/test_replay.py`` for a file too big for the test
suite (a 10M-event recording): replaying the whole trace reproduces the final
snapshot block for block, with no inconsistency; with a sidecar (``NAME.json``
with ``memory_stats``), the replayed curves end at the allocator's current
counters, and their peaks are compared with ``*.all.peak`` (equal when the
recorded window holds the run's peak).  Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

COUNTERS = {
    "requested": "requested_bytes",
    "allocated": "allocated_bytes",
    "active": "active_bytes",
    "reserved": "reserved_bytes",
}


def main(argv: list[str] | None = None) -> int:
    from vramscope.viewer.model import load_snapshot, memory_stats
    from vramscope.viewer.model.replay.timeline import build_timeline

    path = Path((argv or sys.argv[1:])[0])
    t = time.perf_counter()
    snap = load_snapshot(path, use_cache=False)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    tl = build_timeline(snap, keyframes=False)
    rep = tl.replay(0)
    replay_s = time.perf_counter() - t
    final = tl.snapshot_at(0, len(rep) - 1)

    def blocks(s):
        order = np.argsort(s.blocks.address, kind="stable")
        return [s.blocks.address[order], s.blocks.size[order], s.blocks.state[order]]

    same_blocks = all(np.array_equal(a, b) for a, b in zip(blocks(final), blocks(snap)))
    out = {
        "file": path.name,
        "events": len(rep),
        "inconsistencies": rep.inconsistencies,
        "final_blocks_equal": bool(same_blocks),
        "final_stats_equal": memory_stats(final) == memory_stats(snap),
        "load_s": round(load_s, 2),
        "replay_s": round(replay_s, 2),
    }
    side = path.with_suffix(".json")
    if side.exists():
        stats = json.loads(side.read_text())["memory_stats"]
        last = rep.curve_index().values(len(rep) - 1, len(rep) - 1)
        for curve, counter in COUNTERS.items():
            out[f"{curve}_current_equal"] = int(last[curve][0]) == stats[f"{counter}.all.current"]
            out[f"{curve}_peak"] = [rep.peak(curve)[0], stats[f"{counter}.all.peak"]]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
