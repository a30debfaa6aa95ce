"""Interactive speed through the real widgets: timeline redraw, seek, call tree.

    QT_QPA_PLATFORM=offscreen python tests/bench/gui_bench.py SNAPSHOT [--json]

Opens SNAPSHOT in a real :class:`MainWindow` (offscreen QApplication, 1440x900)
and times what a user waits for, each to the end of the synchronous repaint:

* redraw: one pan or zoom of the timeline: the view range changes, the
  curves' envelope and the stacked allocations' level-of-detail layout are
  recomputed (no debounce) and the timeline widget repaints;
* seek: the time-travel cursor moves to a random event: layout replayed from
  the nearest keyframe, segment map, table and header updated, window repainted;
* call tree at the peak: the Call tree tab shown at the peak of allocated memory.

Run by ``run_bench.py`` in a subprocess; prints one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--steps", type=int, default=30, help="pan/zoom steps and seeks")
    args = p.parse_args(argv)

    from vramscope.viewer._qt import app as qtapp
    from vramscope.viewer._qt.main_window import MainWindow
    from vramscope.viewer._qt.main_window.calltree_panel import AT_PEAK

    app = qtapp.application()
    window = MainWindow(persist=False)
    t = time.perf_counter()
    window.open_file(args.file)
    if qtapp.wait_for_load(window) != "loaded":
        print(f"cannot load {args.file}: {window.last_error}", file=sys.stderr)
        return 2
    load_s = time.perf_counter() - t
    window.resize(qtapp.SCREENSHOT_SIZE)
    window.show()
    for _ in range(3):
        app.processEvents()
    tl = window.timeline
    n = tl.n
    rng = random.Random(0)

    def settle() -> None:
        app.processEvents()

    # Pan / zoom: a sequence of views from the whole trace down to ~1000 events.
    redraws = []
    x_all = (tl.x_of(0), tl.x_of(n - 1))
    for i in range(args.steps):
        width = max(1000, int(n / (2 ** (i % 14))))
        a = rng.randrange(max(1, n - width))
        xa, xb = float(tl.x_of(a)), float(tl.x_of(min(n - 1, a + width)))
        t = time.perf_counter()
        tl.vb.setXRange(xa, xb, padding=0)
        tl.refresh_stack()  # what the debounce timer does 60 ms later
        tl.repaint()
        settle()
        redraws.append(time.perf_counter() - t)
    tl.vb.setXRange(*x_all, padding=0)
    tl.refresh_stack()
    settle()

    seeks = []
    for _ in range(args.steps):
        k = rng.randrange(n)
        t = time.perf_counter()
        window.set_cursor(k)
        window.repaint()
        settle()
        seeks.append(time.perf_counter() - t)

    t = time.perf_counter()
    window.tabs.setCurrentWidget(window.calltree)
    window.calltree.set_moment(AT_PEAK)
    window.refresh_calltree(force=True)
    window.repaint()
    settle()
    tree_s = time.perf_counter() - t

    result = {
        "file": os.path.basename(args.file),
        "events": n,
        "load_s": load_s,
        "redraw_median_ms": statistics.median(redraws) * 1e3,
        "redraw_max_ms": max(redraws) * 1e3,
        "seek_median_ms": statistics.median(seeks) * 1e3,
        "seek_max_ms": max(seeks) * 1e3,
        "calltree_peak_ms": tree_s * 1e3,
        "bands_last_view": tl.band_count(),
    }
    window.close()
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>20}: {v:.1f}" if isinstance(v, float) else f"{k:>20}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
