"""Benchmark: one what-if setting with the C model and the Python model.

On the bundled 1M-event trace (or FILE), times ``simulate`` for
``expandable_segments:True`` and ``max_split_size_mb:64`` with each model and
reports the time as a ratio of plain ``pickle.load`` of the same (decompressed)
file measured in the same run, and the peak RSS.  Every measurement runs in its
own subprocess: the request stream is prepared once and handed over pickled, so
a subprocess holds only it and the simulation (``sim RSS``: the peak during
``simulate`` over the RSS before it, the peak reset through /proc/self/clear_refs;
its ratio is to pickle.load's whole peak RSS).  Targets (10M events): one setting <= 0.15x
pickle.load's time and <= 0.3x its peak RSS.

    .venv/bin/python tests/bench/bench_whatif_native.py [FILE] [--repeat N] [--no-python]
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "tests" / "data" / "transformer_long_python_1000k.pickle.xz"
SETTINGS = ["expandable_segments:True", "max_split_size_mb:64"]

CHILD = r"""
import gc, json, pickle, resource, sys, time

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0

def reset_peak():
    # Linux: writing 5 resets VmHWM, the peak RSS, so the simulation's own peak shows.
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return status("VmRSS:")

kind, path = sys.argv[1], sys.argv[2]
if kind == "pickle":
    with open(path, "rb") as f:
        raw = f.read()
    import io
    rss_in = reset_peak()
    t = time.perf_counter()
    pickle.load(io.BytesIO(raw))
    dt = time.perf_counter() - t
else:
    from vramscope.viewer.model.core import allocator_rules as rules
    from vramscope.viewer.model.whatif import native_sim
    from vramscope.viewer.model.whatif.run import simulate_python
    with open(path, "rb") as f:
        reqs, limit, gpu = pickle.load(f)
    cfg = rules.parse_conf(sys.argv[3])
    rss_in = reset_peak()
    t = time.perf_counter()
    if kind == "c":
        res = native_sim.simulate(reqs, cfg, limit, gpu)
        assert res is not None, native_sim.last_fallback
    else:
        res = simulate_python(reqs, cfg, limit, gpu)
    dt = time.perf_counter() - t
out = {"s": dt, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
       "rss_before_kb": rss_in, "hwm_kb": status("VmHWM:")}
if kind != "pickle":
    out["peak_reserved"] = res.peak_reserved
    out["n_events"] = len(res.events)
print(json.dumps(out))
"""


def child(*args: str) -> dict:
    path = str(ROOT.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, PYTHONPATH=path)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=1, help="best of N per measurement")
    ap.add_argument("--no-python", action="store_true", help="time the C model only")
    args = ap.parse_args(argv)
    from vramscope.viewer.model import load_snapshot
    from vramscope.viewer.model.whatif import prepare

    path = Path(args.file)
    with tempfile.TemporaryDirectory(prefix="bench-whatif-") as tmp:
        raw = path.read_bytes()
        if raw[:6] == b"\xfd7zXZ\x00":
            raw = lzma.decompress(raw)
        plain = Path(tmp) / "trace.pickle"
        plain.write_bytes(raw)
        del raw
        t = time.perf_counter()
        snap = load_snapshot(path)
        case = prepare(snap)
        t_prepare = time.perf_counter() - t
        n_events = len(snap.trace)
        stream = Path(tmp) / "requests.pickle"
        with open(stream, "wb") as f:
            pickle.dump((case.requests, case.limit, case.gpu_bytes), f, protocol=5)
        n_req = len(case.requests)
        del snap, case

        def best(*a):
            runs = [child(*a) for _ in range(args.repeat)]
            return min(runs, key=lambda r: r["s"])

        ref = best("pickle", str(plain))
        print(
            f"{path.name}: {n_events:,} events, {n_req:,} requests "
            f"(prepare {t_prepare:.2f} s, not timed below)"
        )
        print(
            f"reference pickle.load: {ref['s']:.2f} s, peak RSS {ref['rss_kb'] / 1024:.0f} MiB "
            f"(of which pickle.load itself {(ref['hwm_kb'] - ref['rss_before_kb']) / 1024:.0f} "
            "MiB over the bytes read)"
        )
        print(
            f"{'setting':28} {'model':6} {'seconds':>8} {'x pickle':>9} {'peak RSS':>9} "
            f"{'x pickle':>9} {'sim RSS':>8} {'x pickle':>6}"
        )
        ok = True
        for conf in SETTINGS:
            got = {}
            for kind in ("c",) + (() if args.no_python else ("python",)):
                r = best(kind, str(stream), conf)
                got[kind] = r
                grow = (r["hwm_kb"] - r["rss_before_kb"]) / 1024
                print(
                    f"{conf:28} {kind:6} {r['s']:8.3f} {r['s'] / ref['s']:9.3f} "
                    f"{r['rss_kb'] / 1024:8.0f}M {r['rss_kb'] / ref['rss_kb']:9.3f} "
                    f"{grow:7.0f}M {grow * 1024 / ref['rss_kb']:6.3f}"
                )
            if "python" in got:
                same = all(got["c"][k] == got["python"][k] for k in ("peak_reserved", "n_events"))
                ok &= same
                print(
                    f"{'':28} C/Python speed-up {got['python']['s'] / got['c']['s']:.1f}x, "
                    f"same peak and events: {same}"
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
