"""Per-stage breakdown of a cold open, in one fresh process: where the time goes.

    python tests/bench/stages.py SNAPSHOT [--json] [--threads N]

Stages, each timed on its own (wall and this process's CPU seconds, so a busy
machine shows as wall >> CPU): ``import`` (numpy and the model), ``read`` (the
whole file read once: the physical floor), ``map`` (the file mapped; its
pages are mapped by the parser's threads as they read), ``parse`` (the compiled parser on all
cores, ``--threads``), ``columns`` (the parser's answer to a :class:`Snapshot`),
``replay`` (:func:`build_timeline` as ``summary`` runs it) and ``summary``
(:func:`summarize`), of which ``categories`` is the memory categories' build.
``parse_serial`` is the same parse on one thread, for scale.  Run by
``run_bench.py``; the GUI's first paint is measured there (whole processes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Clock:
    def __init__(self) -> None:
        self.rows: dict[str, tuple[float, float]] = {}

    def __call__(self, name: str):
        clock = self

        class _Stage:
            def __enter__(self):
                self.t, self.c = time.perf_counter(), _cpu()

            def __exit__(self, *exc):
                clock.rows[name] = (time.perf_counter() - self.t, _cpu() - self.c)

        return _Stage()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="parser threads (default: all cores)")
    p.add_argument("--serial", action="store_true", help="also time a one-thread parse")
    args = p.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    clock = Clock()
    with clock("import"):
        import numpy  # noqa: F401

        from vramscope.viewer.early import parse_handover
        from vramscope.viewer.model.io import fast_pickle
        from vramscope.viewer.model.io.load import _to_snapshot
        from vramscope.viewer.model.replay.timeline import build_timeline, oom_events
        from vramscope.viewer.model.reports.summary import summarize
    threads = args.threads or parse_handover.parse_threads()
    with clock("read"):
        with open(args.file, "rb") as f:
            data = f.read()
    del data
    with open(args.file, "rb") as f:
        with clock("map"):
            mapped = parse_handover.map_file(f)
        with clock("parse"):
            fast = fast_pickle.native_loads(mapped, -1, None, threads, file_mapped=True)
        if args.serial:
            with clock("parse_serial"):
                f.seek(0)
                fast_pickle.native_loads(f.readinto, os.fstat(f.fileno()).st_size, None, 1)
        mapped.close()
    if fast is None:
        print("the compiled parser handed the file back (or is not built)", file=sys.stderr)
        return 2
    with clock("columns"):
        snap = _to_snapshot(fast.obj, fast_pickle.Progress(), "pickle", fast.native)
    del fast
    with clock("replay"):
        timeline = build_timeline(snap, keyframes=False, emit=oom_events(snap))
    # ``categories``: the part of ``summary`` spent in MemoryBreakdown.build,
    # timed from inside it (summary includes it; it is not run twice).
    from vramscope.viewer.model.categories import MemoryBreakdown

    build = MemoryBreakdown.build.__func__

    def timed_build(cls, *a, **k):
        with clock("categories"):
            return build(cls, *a, **k)

    MemoryBreakdown.build = classmethod(timed_build)
    with clock("summary"):
        summarize(snap, timeline, None)
    MemoryBreakdown.build = classmethod(build)
    out = {
        "threads": threads,
        "events": int(len(snap.trace.action)),
        **{f"{k}_s": v[0] for k, v in clock.rows.items()},
        **{f"{k}_cpu_s": v[1] for k, v in clock.rows.items()},
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, (wall, cpu) in clock.rows.items():
            print(f"{k:>14}: {wall:7.3f} s wall {cpu:7.3f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
