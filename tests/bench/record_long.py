"""Record a real snapshot of about N allocator events, the reference for the benchmark.

The same workload as ``tests/data/transformer_long_python_1000k`` (an
``nn.TransformerEncoder``, 6 layers, d=512, AdamW, Python stacks), run until
the ring buffer of ``--events`` entries is full, then dumped with torch's own
``_dump_snapshot``; a JSON sidecar beside it holds ``memory_stats()`` of that
moment (as ``tests/data/*.json`` do), so the replay's figures can be checked.
Needs a CUDA GPU (run it on the device machine):

    python tests/bench/record_long.py --events 10000000 --out /tmp/real_10M.pickle
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000_000, help="ring buffer entries")
    p.add_argument("--out", required=True)
    p.add_argument("--max-seconds", type=float, default=240.0, help="stop training then")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    args = p.parse_args(argv)

    import torch

    from tests.workloads.train_small import build, make_step

    if not torch.cuda.is_available():
        print("record_long.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device = "cuda:0"
    model, opt = build(args.width, args.layers, device)
    step = make_step(model, opt, batch=16, seq=128, width=args.width, device=device)
    step()  # warm up (cuBLAS workspaces, AdamW states) before recording
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=args.events, stacks="python")
    start = time.perf_counter()
    calib = 20
    for _ in range(calib):
        step()
    torch.cuda.synchronize()
    per_step = len(torch.cuda.memory._snapshot()["device_traces"][0]) / calib
    steps_needed = int(args.events / max(per_step, 1) * 1.01) + 1
    steps = calib
    while steps < steps_needed and time.perf_counter() - start < args.max_seconds:
        step()
        steps += 1
    torch.cuda.synchronize()
    train_s = time.perf_counter() - start
    stats = torch.cuda.memory_stats()
    t = time.perf_counter()
    torch.cuda.memory._dump_snapshot(args.out)
    dump_s = time.perf_counter() - t
    torch.cuda.memory._record_memory_history(enabled=None)
    out = Path(args.out)
    n_trace = int(min(args.events, steps * per_step))
    side = {
        "name": out.stem,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "memory_stats": {
            k: v
            for k, v in stats.items()
            if k.endswith((".all.current", ".all.peak")) or "." not in k
        },
        "workload": f"nn.TransformerEncoder ({args.layers} layers, d={args.width}) with AdamW, "
        f"{steps} steps, ring buffer of {args.events} entries, stacks=python",
        "events_per_step": per_step,
        "steps": steps,
        "approx_trace_events": n_trace,
        "train_s": train_s,
        "dump_s": dump_s,
        "bytes": out.stat().st_size,
    }
    out.with_suffix(".json").write_text(json.dumps(side, indent=1))
    print(json.dumps({k: v for k, v in side.items() if k != "memory_stats"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
