"""Benchmark: a live update of a 1M-entry ring, extended vs rebuilt.

A live session's ring holds the last 1M trace events; every poll brings k new
events and drops the k oldest.  Before, each update rebuilt the timeline (a full
replay of the ring, its curve summary and intervals); now
:meth:`Timeline.extend` replays the k new events from the kept state.  The
reference is the rebuild measured in the same run, so the ratio travels
between machines.  Target: one update <= 10 % of a rebuild.

The ring's events are the bundled 1M-event recording with one training step
repeated after it (``tile_trace.find_period``: the allocator is in the same
state at both ends of the step, so the extra events replay consistently).
"steady" is the median update; "amortised" includes the compactions that
rebuild the ring once the dropped events pass a quarter of it.

    .venv/bin/python tests/bench/bench_live_update.py [--ring N] [--updates U]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.tile_trace import find_period  # noqa: E402
from vramscope.viewer.model import load_snapshot  # noqa: E402
from vramscope.viewer.model.core.snapshot import Trace  # noqa: E402
from vramscope.viewer.model.replay import layout_snapshot  # noqa: E402
from vramscope.viewer.model.replay.timeline import build_timeline  # noqa: E402

DEFAULT = ROOT / "tests" / "data" / "transformer_long_python_1000k.pickle.xz"


def tiled_trace(snap, rep, events: int) -> Trace:
    """The trace (one device) with its longest repeating step (events i+1..j) repeated
    after event j: the state after the repeats equals the state after j, so the rest
    of the trace, and the final segments, stay valid."""
    i, j = find_period(rep)
    n = len(snap.trace)
    extra = events - n
    window = np.arange(i + 1, j + 1)
    reps = -(-extra // len(window)) if extra > 0 else 0
    idx = np.concatenate([np.arange(j + 1), np.tile(window, reps), np.arange(j + 1, n)])
    return Trace(**{f.name: getattr(snap.trace, f.name)[idx] for f in dataclasses.fields(Trace)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--ring", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=12)
    ap.add_argument("--sizes", default="1000,10000,100000")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    snap = load_snapshot(args.file)
    base = build_timeline(snap).replay(0)
    ring = min(args.ring, len(snap.trace))
    total = ring + max(sizes) * args.updates
    long = dataclasses.replace(snap, trace=tiled_trace(snap, base, total))
    full = build_timeline(long)  # the layout at any moment: the live snapshots' segments
    if full.replay(0).inconsistencies:
        print(
            f"warning: the tiled trace replays with {full.replay(0).inconsistencies} "
            "inconsistencies"
        )

    def ring_snap(lo: int, hi: int):
        trace = Trace(
            **{f.name: getattr(long.trace, f.name)[lo:hi] for f in dataclasses.fields(Trace)}
        )
        at = layout_snapshot(long, full.replay(0).layout_after(hi - 1), 0)
        return dataclasses.replace(at, trace=trace)

    def rebuild(s):
        tl = build_timeline(s)
        tl.replay(0).curve_index()
        tl.intervals(0)
        return tl

    first = ring_snap(0, ring)
    t_full = []
    for _ in range(5):
        t = time.perf_counter()
        rebuild(first)
        t_full.append(time.perf_counter() - t)
    ref = statistics.median(t_full)
    print(
        f"ring of {ring} events; reference: rebuild (replay + curve summary + intervals) "
        f"{ref * 1e3:.1f} ms (median of 5; each update is compared with a rebuild of "
        f"its own ring, timed right after it)"
    )
    worst = 0.0
    verdicts: list[str] = []
    for k in sizes:
        tl = build_timeline(first, live=True)
        tl.replay(0).curve_index()
        tl.intervals(0)
        lo, hi = 0, ring
        times, refs, rebuilt = [], [], 0
        for _ in range(args.updates):
            s = ring_snap(lo + k, hi + k)  # what the live source delivers (not timed)
            t = time.perf_counter()
            if tl.extend(s, ring - k, dropped=k):
                tl.replay(0).curve_index()
                tl.intervals(0)
                rebuilt += 1
            times.append(time.perf_counter() - t)
            # The reference beside each update (this machine's load changes over a run).
            t = time.perf_counter()
            rebuild(s)
            refs.append(time.perf_counter() - t)
            lo, hi = lo + k, hi + k
        ratios = [a / b for a, b in zip(times, refs)]
        steady = statistics.median(ratios)
        amortised = sum(times) / sum(refs)
        worst = max(worst, steady)
        verdicts.append(f"{k}: {'met' if steady <= 0.10 else 'NOT met'} ({steady:.1%})")
        rep = tl.replay(0)
        print(
            f"  +{k:>7} events/update: steady {statistics.median(times) * 1e3:7.2f} ms = "
            f"{steady:6.1%} of a rebuild (median ratio); amortised {amortised:6.1%} "
            f"({rebuilt} compactions in {args.updates} updates; "
            f"{rep.inconsistencies} inconsistencies)"
        )
    # What the live window does per update: the document (labels, OOM verdicts, timeline).
    from vramscope.viewer.model.view.document import Document

    for k in [x for x in sizes if x <= 10_000]:
        doc = Document.build(first, live=True)
        lo, hi = 0, ring
        ratios = []
        for _ in range(min(args.updates, 6)):
            s = ring_snap(lo + k, hi + k)
            t = time.perf_counter()
            doc = doc.extend(s, ring - k, dropped=k)
            doc.intervals(0)
            doc.curves(0)
            t_ext = time.perf_counter() - t
            t = time.perf_counter()
            Document.build(s)
            ratios.append(t_ext / (time.perf_counter() - t))
            lo, hi = lo + k, hi + k
        print(
            f"  document: +{k:>6} events/update: Document.extend = "
            f"{statistics.median(ratios):6.1%} of Document.build (median ratio)"
        )
    print(
        "target: an update of a 1M ring <= 10% of a rebuild, per events/update: "
        + "; ".join(verdicts)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
