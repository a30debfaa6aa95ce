"""Where a cold ``MemoryBreakdown.build`` spends its time, function by function (not a test).

    .venv/bin/python tests/bench/profile_categories.py FILE [--warm] [--serial]

Loads FILE (the column cache helps: ``VRAMSCOPE_CACHE_DIR``), replays it as ``summary``
does, then builds the categories once in this fresh process (the cold build a ``summary``
pays) with the steps wrapped: per step its wall seconds, this thread's user and system
CPU seconds and minor page faults (fresh memory), inclusive of the steps it calls.
``--serial``: without the second thread (steps then add up); ``--warm``: a second build;
``--no-cache``: the snapshot parsed from the file, as a cold ``summary`` has it.
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
import time

ROWS: dict[str, list[float]] = {}


def _usage() -> tuple[float, float, float, int]:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return time.perf_counter(), r.ru_utime, r.ru_stime, r.ru_minflt


def wrap(owner, name: str, label: str) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*a, **k):
        u0 = _usage()
        try:
            return fn(*a, **k)
        finally:
            u1 = _usage()
            row = ROWS.setdefault(label, [0.0, 0.0, 0.0, 0, 0])
            for i in range(4):
                row[i] += u1[i] - u0[i]
            row[4] += 1

    setattr(owner, name, timed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--serial", action="store_true")
    ap.add_argument(
        "--no-cache",
        action="store_true",
        help="parse the file (as a cold summary does), not the column cache",
    )
    args = ap.parse_args(argv)
    from vramscope.viewer.model.categories import MemoryBreakdown, classify, iterations
    from vramscope.viewer.model.categories import breakdown as report
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.replay import device
    from vramscope.viewer.model.replay.timeline import build_timeline, oom_events

    snap = load_snapshot(args.file, use_cache=not args.no_cache)
    tl = build_timeline(snap, keyframes=False, emit=oom_events(snap))
    if args.serial:
        report.OVERLAP_MIN_EVENTS = 1 << 62
    from vramscope.viewer.model.categories import native_passes as native

    steps = [
        (report, "lean_intervals"),
        (device, "link_lifetimes"),
        (native, "alloc_lifetimes"),
        (report, "find_phases"),
        (iterations, "event_evidence"),
        (iterations, "fill_phases"),
        (native, "phases"),
        (iterations, "PhaseRuns"),
        (iterations, "_annotation_ranges"),
        (iterations, "_split_by_curve"),
        (iterations, "_iterations"),
        (iterations, "_span_peaks"),
        (report, "classify"),
        (classify, "_window_native"),
        (classify, "_window"),
        (classify, "_refine_by_sizes"),
        (classify, "_workspaces"),
        (report, "find_leaks"),
        (report, "leak_frames"),
        (report, "_mark_leaked"),
        (report.sk, "stack_kinds"),
        (iterations, "stack_codes"),
    ]
    for owner, name in steps:
        if hasattr(owner, name):  # older or newer code: what it has
            wrap(owner, name, name)
    for rnd in range(2 if args.warm else 1):
        ROWS.clear()
        u0 = _usage()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        for d in tl.devices:
            bd = MemoryBreakdown.build(snap, tl, d)
        u1 = _usage()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"{'warm' if rnd else 'cold'} build: wall {u1[0] - u0[0]:.3f} s, process user "
            f"{r1.ru_utime - r0.ru_utime:.3f} sys {r1.ru_stime - r0.ru_stime:.3f}, faults "
            f"{r1.ru_minflt - r0.ru_minflt:,}; {len(bd.intervals):,} allocations, "
            f"{len(bd.iterations)} iterations, {len(bd.leaks)} leaks"
        )
        print(
            f"  {'step (inclusive, this thread)':32s} {'wall':>7s} {'user':>7s} {'sys':>7s} "
            f"{'faults':>9s} calls"
        )
        for label, (w, u, s, f, c) in ROWS.items():
            print(f"  {label:32s} {w:7.3f} {u:7.3f} {s:7.3f} {f:9,d} {c}")
        for rep in tl.devices.values():
            rep._derived.pop("lifetimes", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
