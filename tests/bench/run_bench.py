"""`make bench`: vramscope's load speed and memory as ratios against pickle.load.

This machine is noisy, so every number is a ratio against a reference measured
in the same run on the same file: plain ``pickle.load`` (which vramscope must
never use on user files, but which is the speed users know).  Each command
runs in a fresh subprocess; wall time and peak RSS come from ``wait4``.
Targets are printed beside the ratios; they are goals, not test assertions.
"""

from __future__ import annotations

import argparse
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
BIG = DATA / "transformer_long_python_1000k.pickle.xz"

REFERENCE = "import pickle, sys\nwith open(sys.argv[1], 'rb') as f: pickle.load(f)\n"


def measure(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one subprocess run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}\n{proc.stderr.read().decode()}")
    return elapsed, usage.ru_maxrss / 1024


def best_of(n: int, cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    runs = [measure(cmd, env) for _ in range(n)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (best is kept)")
    parser.add_argument("files", nargs="*", help="snapshot pickles (default: bundled 1M events)")
    args = parser.parse_args()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(f) for f in args.files]
        if not files:
            plain = Path(tmp) / "transformer_long_python_1000k.pickle"
            plain.write_bytes(lzma.decompress(BIG.read_bytes()))
            files = [DATA / "gpt2_oom.pickle", plain]
        rows = []
        for path in files:
            ref_t, ref_m = best_of(args.repeat, [py, "-c", REFERENCE, str(path)])
            summary = [py, "-m", "vramscope.viewer", "summary", str(path), "--json"]
            # Cold: an empty cache each run (its write included); warm: primed.
            cold = [measure(summary, dict(env, VRAMSCOPE_CACHE_DIR=f"{tmp}/cold{i}"))
                    for i in range(args.repeat)]
            sum_t, sum_m = min(c[0] for c in cold), min(c[1] for c in cold)
            warm_env = dict(env, VRAMSCOPE_CACHE_DIR=f"{tmp}/warm")
            measure(summary, warm_env)
            warm_t, _ = best_of(args.repeat, summary, warm_env)
            shot = str(Path(tmp) / "shot.png")
            gui_t, _ = best_of(1, [py, "-m", "vramscope.viewer", str(path), "--screenshot", shot],
                               dict(env, VRAMSCOPE_CACHE_DIR=f"{tmp}/gui"))
            size = path.stat().st_size / 2**20
            rows.append((path.name, size, ref_t, ref_m, sum_t, sum_m, warm_t, gui_t))
    print(f"{'file':<40}{'MiB':>6}{'pickle.load':>12}{'cold':>8}{'ratio':>7}{'RSS':>7}"
          f"{'cached':>8}{'ratio':>7}{'GUI':>8}{'ratio':>7}")
    for name, size, ref_t, ref_m, sum_t, sum_m, warm_t, gui_t in rows:
        print(f"{name:<40}{size:>6.1f}{ref_t:>11.2f}s{sum_t:>7.2f}s{sum_t / ref_t:>6.2f}x"
              f"{sum_m / ref_m:>6.2f}x{warm_t:>7.2f}s{warm_t / ref_t:>6.2f}x"
              f"{gui_t:>7.2f}s{gui_t / ref_t:>6.2f}x")
    print("cold/cached = `vramscope summary --json` with an empty / a primed cache; "
          "GUI = `vramscope FILE --screenshot`, cold; RSS = peak RSS ratio")
    print("targets (issue 5, 1M+ events): cold <= 0.15x time and <= 0.3x RSS; "
          "cached <= 0.03x; GUI <= 0.25x")
    print()
    timeline_bench(Path(args.files[-1]) if args.files else BIG)
    return 0


def timeline_bench(path: Path) -> None:
    """Time travel on one snapshot: replay, seek, stacked layout, call tree."""
    import random
    import statistics

    from vramscope.viewer.model import load_snapshot
    from vramscope.viewer.model.calltree import call_tree
    from vramscope.viewer.model.frames import frame_categories
    from vramscope.viewer.model.stacking import stacked_layout
    from vramscope.viewer.model.timeline import build_timeline, intervals

    snap = load_snapshot(path)
    t = time.perf_counter()
    tl = build_timeline(snap)
    replay_s = time.perf_counter() - t
    device = min(tl.devices)
    rep = tl.replay(device)
    rng = random.Random(0)
    seeks = []
    for _ in range(200):
        k = rng.randrange(len(rep))
        t = time.perf_counter()
        tl.snapshot_at(device, k)
        seeks.append(time.perf_counter() - t)
    iv = intervals(rep)
    views = []
    for _ in range(20):
        a = rng.randrange(len(rep))
        b = min(len(rep) - 1, a + rng.randrange(1, len(rep)))
        t = time.perf_counter()
        stacked_layout(iv, a, b, 1400)
        views.append(time.perf_counter() - t)
    cats = frame_categories(snap.frames)
    k = rep.peak("allocated")[1]
    t = time.perf_counter()
    at = tl.snapshot_at(device, k)
    live = at.blocks.state <= 1
    call_tree(snap, at.blocks.stack[live], at.blocks.size[live], cats)
    tree_s = time.perf_counter() - t
    print(f"time travel on {path.name} ({len(rep):,} events, keyframe every "
          f"{rep.keyframe_every} events):")
    print(f"  replay (build timeline)        {replay_s:8.2f} s")
    print(f"  seek to a random event          {statistics.median(seeks) * 1e3:8.1f} ms median, "
          f"{max(seeks) * 1e3:.1f} ms max   (target <= 50 ms)")
    print(f"  stacked timeline layout         {statistics.median(views) * 1e3:8.1f} ms median, "
          f"{max(views) * 1e3:.1f} ms max   (part of a redraw; target <= 30 ms)")
    print(f"  call tree at the peak           {tree_s * 1e3:8.1f} ms            (target <= 1 s)")


if __name__ == "__main__":
    sys.exit(main())
