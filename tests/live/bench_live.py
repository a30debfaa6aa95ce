"""Overhead of live attach on a real training loop (GPU machine).

    python tests/live/bench_live.py [--phases 10] [--phase-steps 100] [--json OUT]

The training process (``tests/workloads/live_train.py --bench-phases``)
alternates phases without and with the agent; recording is on in both.
While the agent is up, this process attaches like the viewer does and
polls ``stats`` at 2 Hz and ``trace`` at 0.5 Hz (honouring the agent's
``retry_after_s`` when it spaces requests to stay within its budget).
Reported: step time mean and median per condition, and the overhead in %.
The budget is 1 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def poller(hs: Path, stop: threading.Event, counts: dict) -> None:
    from vramscope.viewer.model.live.client import AttachError
    from vramscope.viewer.model.live.session import LiveSession

    while not stop.is_set():
        f = hs / "agent.json"
        if not f.exists():
            time.sleep(0.1)
            continue
        try:
            endpoint = json.loads(f.read_text())["endpoint"]
            s = LiveSession(endpoint)
            s.connect()
        except (AttachError, ValueError, OSError, KeyError):
            time.sleep(0.1)
            continue
        next_stats = next_trace = time.monotonic()
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_stats:
                    s.poll_stats()
                    counts["stats"] += 1
                    next_stats = now + 0.5
                if now >= next_trace:
                    tu = s.poll_trace()
                    if tu.throttled:
                        counts["trace_throttled"] += 1
                        next_trace = now + max(2.0, tu.retry_after_s)
                    else:
                        counts["trace"] += 1
                        counts["trace_events"] += tu.added
                        next_trace = now + 2.0
                time.sleep(max(0.0, min(next_stats, next_trace) - time.monotonic()))
        except AttachError:
            pass  # the agent stopped at the end of its phase
        finally:
            s.close()


def summarize(phases: list[dict], skip: int) -> dict:
    off = [t for p in phases if not p["agent"] for t in p["times"][skip:]]
    on = [t for p in phases if p["agent"] for t in p["times"][skip:]]
    res = {}
    for name, xs in (("no_agent", off), ("agent_polled", on)):
        res[name] = {
            "steps": len(xs),
            "mean_ms": statistics.fmean(xs) * 1e3,
            "median_ms": statistics.median(xs) * 1e3,
        }
    res["overhead_mean_pct"] = 100 * (
        res["agent_polled"]["mean_ms"] / res["no_agent"]["mean_ms"] - 1
    )
    res["overhead_median_pct"] = 100 * (
        res["agent_polled"]["median_ms"] / res["no_agent"]["median_ms"] - 1
    )
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phases", type=int, default=10)
    p.add_argument("--phase-steps", type=int, default=100)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--skip", type=int, default=3, help="steps left out at each phase start")
    p.add_argument(
        "--max-entries",
        type=int,
        default=100_000,
        help="the recorder's ring buffer (the trace request's cost grows with it)",
    )
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    hs = Path(tempfile.mkdtemp(prefix="vsl-bench-"))
    rt = Path(tempfile.mkdtemp(prefix="vsl-", dir="/tmp"))
    os.chmod(rt, 0o700)
    env = dict(
        os.environ,
        VRAMSCOPE_RUNTIME_DIR=str(rt),
        PYTHONUNBUFFERED="1",
        LIVE_MAX_ENTRIES=str(args.max_entries),
    )
    cmd = [
        sys.executable,
        str(REPO / "tests/workloads/live_train.py"),
        "--bench-phases",
        str(args.phases),
        "--phase-steps",
        str(args.phase_steps),
        "--width",
        str(args.width),
        "--layers",
        str(args.layers),
        "--batch",
        str(args.batch),
        "--seq",
        str(args.seq),
        "--handshake-dir",
        str(hs),
    ]
    counts = {"stats": 0, "trace": 0, "trace_throttled": 0, "trace_events": 0}
    stop = threading.Event()
    t = threading.Thread(target=poller, args=(hs, stop, counts), daemon=True)
    t.start()
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=1800)
    stop.set()
    t.join(5)
    sys.stdout.write(proc.stdout[-3000:])
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        return proc.returncode
    phases = json.loads((hs / "bench.json").read_text())["phases"]
    res = summarize(phases, args.skip)
    res["polls"] = counts
    res["config"] = vars(args)
    res["governors"] = [p["governors"] for p in phases if p["agent"]]
    print(json.dumps({k: v for k, v in res.items() if k != "config"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
