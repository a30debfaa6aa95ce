"""Benchmark (not a test): a live update that extends the replay vs a full rebuild.

    python tests/live/bench_live_extend.py [FILE]

A ring of FILE's trace (default: the 1M-event file in tests/data) minus its last
``--new`` events is built live; then the update that brings those events is applied
(:class:`LiveDocumentSource`), and a full ``Document.build`` of the same ring is timed
in the same run.  The target: the update costs <= 10 % of the rebuild.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.live.doc_source import LiveDocumentSource
    from vramscope.viewer.model.view.document import Document

    ap = argparse.ArgumentParser()
    ap.add_argument(
        "file",
        nargs="?",
        default=str(HERE.parent / "data" / "transformer_long_python_1000k.pickle.xz"),
    )
    ap.add_argument("--new", type=int, default=2000, help="events in the update")
    args = ap.parse_args()
    snap = load_snapshot(args.file)
    full = Document.build(snap)
    dev = full.trace_device()
    rep = full.timeline.replay(dev)
    n = full.n_events(dev)
    fields = [f.name for f in dataclasses.fields(snap.trace)]

    def ring(k: int):
        rows = int(rep.rows[k]) + 1
        return dataclasses.replace(
            full.at(dev, k).snap,
            trace=type(snap.trace)(**{f: getattr(snap.trace, f)[:rows] for f in fields}),
        )

    before, after = ring(n - 1 - args.new), ring(n - 1)
    source = LiveDocumentSource()
    source.apply(before, 0)
    t0 = time.perf_counter()
    doc = source.apply(after, 0)
    doc.intervals(dev)
    doc.curves(dev)
    t_update = time.perf_counter() - t0
    t0 = time.perf_counter()
    Document.build(after)
    t_full = time.perf_counter() - t0
    print(
        f"{n:,} events, update of {args.new:,}: {t_update * 1e3:.1f} ms; full rebuild "
        f"{t_full * 1e3:.1f} ms; ratio {t_update / t_full:.3f} (target <= 0.10); "
        f"extends {source.extends}, fallbacks {source.fallbacks}"
    )
    return 0 if t_update <= 0.10 * t_full and not source.fallbacks else 1


if __name__ == "__main__":
    sys.exit(main())
