"""Benchmark (not a test): what recording costs.

1. Training-step time of a real model (a transformer encoder, AdamW) with
   recording off, ``stacks="python"`` and ``stacks="all"``.
2. Dump time against the number of trace entries: the history of that same
   training loop kept in a ring buffer of N entries, then ``dump()``; the
   snapshot call (symbolisation for ``stacks="all"`` happens here) and the
   pickle write are timed apart.

Needs a CUDA GPU.  Prints two tables; ``--json FILE`` also saves the numbers.

    python tests/capture/bench_capture.py            # ~2-3 minutes on an H100
    python tests/capture/bench_capture.py --quick    # ~1 minute
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE.parent / "workloads"


def _train_small():
    spec = importlib.util.spec_from_file_location("train_small", WORKLOADS / "train_small.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _timed_steps(torch, step, n: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def bench_steps(
    torch, record, step, out: Path, steps: int, warmup: int, repeats: int
) -> list[dict]:
    """Median-of-repeats time per step for each recording mode."""
    rows = []
    for mode in ("off", "python", "all"):
        times = []
        for _ in range(repeats):
            if mode == "off":
                for _ in range(warmup):
                    step()
                times.append(_timed_steps(torch, step, steps))
            else:
                with record(
                    out=out, stacks=mode, max_entries=100_000, dump_on_exit=False, dump_signal=None
                ):
                    for _ in range(warmup):
                        step()
                    times.append(_timed_steps(torch, step, steps))
        times.sort()
        rows.append({"mode": mode, "ms_per_step": 1000 * times[len(times) // 2]})
    base = rows[0]["ms_per_step"]
    for r in rows:
        r["overhead_pct"] = 100 * (r["ms_per_step"] / base - 1)
    return rows


def entries_per_step(torch, record, step, out: Path) -> tuple[float, float]:
    """Trace entries one step adds, and the time of the process's first snapshot.

    The first ``_snapshot()`` of a process can pay a one-time cost (2.3 s seen
    on torch 2.11 when recording started before CUDA init; ~0 s here, where
    recording starts after the model is on the GPU).
    """
    with record(out=out, max_entries=10_000_000, dump_on_exit=False, dump_signal=None):
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        snap = torch.cuda.memory._snapshot()
        first = time.perf_counter() - t0
    dev = torch.cuda.current_device()
    return len(snap["device_traces"][dev]) / 3, first


def bench_dumps(
    torch, record, step, out: Path, per_step: float, sizes: dict[str, list[int]]
) -> list[dict]:
    rows = []
    for stacks, counts in sizes.items():
        for n in counts:
            with record(
                out=out, stacks=stacks, max_entries=n, dump_on_exit=False, dump_signal=None
            ) as rec:
                for _ in range(math.ceil(n / per_step) + 1):
                    step()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                path = rec.dump()
                total = time.perf_counter() - t0
            side = json.loads(path.with_suffix(".json").read_text())
            rows.append(
                {
                    "stacks": stacks,
                    "entries": side["n_trace"],
                    "dump_s": total,
                    "snapshot_s": side["snapshot_call_s"],
                    "write_s": side["write_s"],
                    "MB": side["bytes"] / 1e6,
                }
            )
            path.unlink()
            path.with_suffix(".json").unlink()
            print(f"  dumped {stacks:6} {side['n_trace']:>8} entries in {total:.2f} s", flush=True)
    return rows


def bench_oom_dump(torch, record, step, out: Path, steps: int) -> dict:
    """Time of the snapshot written at an OOM, after ``steps`` recorded steps."""
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    with record(out=out, dump_on_exit=False, dump_signal=None) as rec:
        for _ in range(steps):
            step()
        try:
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            pass
    side = json.loads(rec.last_oom_path.with_suffix(".json").read_text())
    return {
        "entries": side["n_trace"],
        "snapshot_s": side["snapshot_call_s"],
        "write_s": side["write_s"],
        "MB": side["bytes"] / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer steps and sizes")
    p.add_argument("--full", action="store_true", help="also 100k entries with stacks=all (slow)")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("bench_capture: needs a CUDA GPU", file=sys.stderr)
        return 2
    from vramscope.capture import record

    ts = _train_small()
    device = f"cuda:{torch.cuda.current_device()}"
    model, opt = ts.build(args.width, args.layers, device)
    step = ts.make_step(model, opt, args.batch, args.seq, args.width, device)
    steps, warmup, repeats = (10, 3, 1) if args.quick else (30, 5, 3)
    sizes = {"python": [1_000, 10_000, 100_000], "all": [1_000, 10_000]}
    if args.quick:
        sizes = {"python": [1_000, 100_000], "all": [1_000]}
    if args.full:
        sizes["all"].append(100_000)

    params = sum(p.numel() for p in model.parameters())
    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, model {params / 1e6:.1f}M "
        f"params (width {args.width}, {args.layers} layers, batch {args.batch}x{args.seq})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        # First, before anything else in this process takes a snapshot or
        # records C++ stacks (either pays torch's one-time symboliser start-up).
        per_step, first_snapshot_s = entries_per_step(torch, record, step, out)
        step_rows = bench_steps(torch, record, step, out, steps, warmup, repeats)
        print("\nstep time")
        print(f"{'recording':>10} {'ms/step':>9} {'overhead':>9}")
        for r in step_rows:
            print(f"{r['mode']:>10} {r['ms_per_step']:9.2f} {r['overhead_pct']:8.1f}%")
        print(f"\nfirst snapshot of the process: {first_snapshot_s:.2f} s")
        print(f"{per_step:.0f} trace entries per step; dumping:")
        dump_rows = bench_dumps(torch, record, step, out, per_step, sizes)
        oom_row = bench_oom_dump(torch, record, step, out, 3)
    print("\ndump time vs trace entries")
    print(f"{'stacks':>7} {'entries':>9} {'dump s':>8} {'snapshot s':>11} {'write s':>8} {'MB':>8}")
    for r in dump_rows:
        print(
            f"{r['stacks']:>7} {r['entries']:>9} {r['dump_s']:8.2f} {r['snapshot_s']:11.2f} "
            f"{r['write_s']:8.2f} {r['MB']:8.1f}"
        )
    print(
        f"\nOOM dump ({oom_row['entries']} entries): snapshot {oom_row['snapshot_s']:.2f} s, "
        f"write {oom_row['write_s']:.2f} s, {oom_row['MB']:.1f} MB"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(),
                    "steps": step_rows,
                    "entries_per_step": per_step,
                    "first_snapshot_s": first_snapshot_s,
                    "dumps": dump_rows,
                    "oom_dump": oom_row,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
