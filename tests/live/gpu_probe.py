"""What the agent's allocator calls cost on this torch (GPU machine).

    python tests/live/gpu_probe.py

Fills the ring buffer with a real training loop, then times ``stats`` (the
segments-only fast path + memory_stats), the full ``_snapshot()`` behind
``trace``, and checks that the fast path returns the same segments.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))


def main() -> int:
    import torch
    import train_small

    from vramscope.capture import start
    from vramscope.capture.live.allocator import LiveAllocator

    start(max_entries=int(sys.argv[1]) if len(sys.argv) > 1 else 100_000, dump_signal=None)
    dev = train_small.pick_device()
    model, opt = train_small.build(1024, 6, dev)
    step = train_small.make_step(model, opt, 16, 512, 1024, dev)
    out = {"torch": torch.__version__}
    for n in (5, 80):
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        la = LiveAllocator()
        t0 = time.perf_counter()
        _stats, segs, fast, consistent = la.stats()
        t_stats = time.perf_counter() - t0
        t0 = time.perf_counter()
        snap, _, _ = la.snapshot()
        t_full = time.perf_counter() - t0
        full_segs = snap["segments"]
        same = [(s["address"], s["total_size"], len(s["blocks"])) for s in segs] == [
            (s["address"], s["total_size"], len(s["blocks"])) for s in full_segs
        ]
        out[f"after_{n}_more_steps"] = {
            "fast_path": fast,
            "consistent": consistent,
            "same_segments": same,
            "segments": len(segs),
            "trace_entries": len(snap["device_traces"][0]),
            "stats_s": round(t_stats, 5),
            "full_snapshot_s": round(t_full, 4),
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
