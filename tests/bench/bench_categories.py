"""Benchmark (not a test): what classifying the memory adds to a cold open, as a ratio
against pickle.load of the same file measured in the same run (target:
at most 0.05x at 10M events).

    .venv/bin/python tests/bench/bench_categories.py [--events 10000000] [--keep DIR] [FILE ...]

The file is tiled from the bundled 1M-event recording (tests/bench/tile_trace.py)
unless FILEs are given.  Rows: pickle.load (the reference, fresh process); the
classification itself, ``MemoryBreakdown.build`` (lifetimes, intervals, phases,
categories, leaks) on a loaded snapshot and its replay: its first build in a fresh
process (what a cold open pays; best of ``--repeat`` processes), and a second one in
the same process (warm, for information); and, for information, a cold
``vramscope summary --json`` (which includes it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run_bench import BIG, REFERENCE, best_of, measure, tiled_file  # noqa: E402

TARGET = 0.05
# CPU seconds of the reference too: on a shared machine, wall time depends on the load,
# CPU time much less (both ratios are printed).
REFERENCE_CPU = (
    "import pickle, sys, time\nt = time.process_time()\n"
    "with open(sys.argv[1], 'rb') as f: pickle.load(f)\n"
    "print(time.process_time() - t)\n"
)

# One fresh process per run: the first build is what a cold open pays (fresh memory,
# page faults); a second build in the same process (warm: the allocator reuses the
# first one's memory) is printed for information.
CLASSIFY = r"""
import json, resource, sys, time
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline, oom_events
from vramscope.viewer.model.categories import MemoryBreakdown
snap = load_snapshot(sys.argv[1])
tl = build_timeline(snap, keyframes=False, emit=oom_events(snap))
runs = []
for _ in range(2):
    for rep in tl.devices.values():
        rep._derived.pop("lifetimes", None)  # lifetimes are part of the work measured
    f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    c = time.process_time()
    for d in tl.devices:
        bd = MemoryBreakdown.build(snap, tl, d)
    runs.append((time.perf_counter() - t, time.process_time() - c,
                 resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f))
print(json.dumps({"classify_s": runs[0][0], "classify_cpu_s": runs[0][1],
                  "faults": runs[0][2], "warm_s": runs[1][0], "warm_cpu_s": runs[1][1],
                  "events": len(snap.trace),
                  "allocations": len(bd.intervals), "iterations": len(bd.iterations),
                  "leaks": len(bd.leaks)}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--keep", type=Path, help="keep the tiled file in this directory")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        files = args.files or [tiled_file(BIG, args.events, args.keep or tmp)]
        env = {**__import__("os").environ, "VRAMSCOPE_CACHE_DIR": str(tmp / "cache")}
        for path in files:
            ref_s, _ = best_of(args.repeat, [sys.executable, "-c", REFERENCE, str(path)], env)
            rows = [
                json.loads(
                    subprocess.run(
                        [sys.executable, "-c", CLASSIFY, str(path)],
                        capture_output=True,
                        text=True,
                        env=env,
                        check=True,
                    )
                    .stdout.strip()
                    .splitlines()[-1]
                )
                for _ in range(args.repeat)
            ]
            row = dict(rows[0])
            for key in ("classify_s", "classify_cpu_s", "faults", "warm_s", "warm_cpu_s"):
                row[key] = min(r[key] for r in rows)  # best of the fresh processes
            cold_s, _, _ = measure(
                [
                    sys.executable,
                    "-m",
                    "vramscope.viewer",
                    "summary",
                    str(path),
                    "--json",
                    "--no-cache",
                ],
                env,
                capture=True,
            )
            ref_cpu = min(
                float(
                    subprocess.run(
                        [sys.executable, "-c", REFERENCE_CPU, str(path)],
                        capture_output=True,
                        text=True,
                        env=env,
                        check=True,
                    ).stdout
                )
                for _ in range(args.repeat)
            )
            ratio = row["classify_s"] / ref_s
            ratio_cpu = row["classify_cpu_s"] / ref_cpu
            verdict = "PASS" if ratio <= TARGET else "MISS"
            print(
                f"{path.name}: {row['events']:,} events, {row['allocations']:,} allocations, "
                f"{row['iterations']} iterations, {row['leaks']} leaks"
            )
            print(
                f"  pickle.load {ref_s:.2f} s; classification {row['classify_s']:.3f} s "
                f"= {ratio:.3f}x (target <= {TARGET}x: {verdict}); cold summary --json "
                f"(includes it) {cold_s:.2f} s = {cold_s / ref_s:.3f}x"
            )
            print(
                f"  CPU time: pickle.load {ref_cpu:.2f} s; classification "
                f"{row['classify_cpu_s']:.3f} s = {ratio_cpu:.3f}x "
                f"({'PASS' if ratio_cpu <= TARGET else 'MISS'}); {row['faults']:,} page faults"
            )
            print(
                f"  warm (a second build in the same process): {row['warm_s']:.3f} s = "
                f"{row['warm_s'] / ref_s:.3f}x, CPU {row['warm_cpu_s']:.3f} s = "
                f"{row['warm_cpu_s'] / ref_cpu:.3f}x; load average "
                f"{' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
