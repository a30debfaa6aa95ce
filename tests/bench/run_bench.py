"""`make bench`: vramscope's speed and memory on big snapshots, as ratios against pickle.load.

This machine is noisy, so every number is a ratio against a reference measured
in the same run on the same file: plain ``pickle.load`` (which vramscope must
never use on user files, but which is the speed users know).  Each command
runs in a fresh subprocess started by ``launch.py`` (a small process, so that
``ru_maxrss`` is the command's own: Linux carries a parent's peak over into a
vfork'ed child); wall time is from its fork to its exit.  Peak memory: the larger
of ``wait4``'s and, from one more (untimed) run, the sampled peak of the command
and its children together (a forked parse and the background cache write).

Files: the bundled 1M-event recording and a 10M-event file tiled from it with
``tile_trace.py`` (generated into a temporary directory, or kept with
``--keep DIR``); any FILE given is measured too (e.g. a real 10M recording).
``--quick``: the 1M file only.

Rows per file: cold ``vramscope summary --json`` (empty cache), the re-open
with the cache present (and, for information, with only the column cache),
the GUI's first full window (``--screenshot``, cold), and through the real
widgets (``gui_bench.py``): timeline pan/zoom redraw, time-travel seek and
the call tree at the peak.  Targets are printed with PASS / MISS;
they are goals, not test assertions.

Then (``bench_parallel.py``; ``--no-parallel`` skips them) the independent runs per
file - one what-if setting, ``--recommend``, ``advise``, a batch estimate - and a
directory of 64 rank files, each one after the other, and as the command decides on 2
cores (``--small-cores``, through ``taskset``) and on all the CPUs this process may use
(their count is in the rows and the last line).

``--gui-only``: pickle.load and the GUI first window only, one after the other.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
BIG = DATA / "transformer_long_python_1000k.pickle.xz"
HERE = Path(__file__).resolve().parent

REFERENCE = "import pickle, sys\nwith open(sys.argv[1], 'rb') as f: pickle.load(f)\n"
# (name, target, unit): ratios against pickle.load, or milliseconds (10M events and up).
TARGETS = {
    "cold": 0.15,
    "cold_rss": 0.30,
    "cached": 0.03,
    "gui": 0.25,
    "redraw_ms": 30.0,
    "seek_ms": 50.0,
    "calltree_ms": 1000.0,
}
INTERACTIVE_FROM_EVENTS = 5_000_000  # the ms targets are set "at 10M events"


def read_stamps(log: Path, start: float) -> dict:
    """Stage stamps a command wrote (``VRAMSCOPE_STAGE_LOG``), as seconds from its fork."""
    out: dict[str, float] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            name, _, t = line.partition(" ")
            out.setdefault(name, float(t) - start)
        log.unlink()
    return out


def measure_stamped(cmd: list[str], env: dict, log: Path, capture: bool = False):
    """measure() with the command's start-up stage stamps: (seconds, MiB, stdout, stamps)."""
    log.unlink(missing_ok=True)
    t, m, out = measure(cmd, dict(env, VRAMSCOPE_STAGE_LOG=str(log)), capture=capture)
    return t, m, out, read_stamps(log, LAST_START[0])


LAST_START = [0.0]  # the fork time of the last measure()d command (launch.py's clock)


def measure(cmd: list[str], env: dict | None = None, capture: bool = False, sample: bool = False):
    """(seconds, peak RSS MiB, stdout) of one subprocess run, through ``launch.py``:
    timed from its fork to its exit, peak RSS its own (the largest process of its tree;
    ``sample``: of the whole tree at once, sampled - a run not to time)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as rec:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "launch.py"),
                *(["--sample"] if sample else []),
                rec.name,
                *cmd,
            ],
            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        out, err = proc.communicate()
        got = json.loads(Path(rec.name).read_text() or "{}")
    if proc.returncode != 0 or got.get("status") != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}\n{err.decode()[-2000:]}")
    LAST_START[0] = got["start"]
    return got["seconds"], got["tree_rss_mib"], out


def best_of(n: int, cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    runs = [measure(cmd, env) for _ in range(n)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def cpus() -> int:
    """The CPUs this process (and so every command it starts) may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def has_gui() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("PySide6", "pyqtgraph"))


def tiled_file(source: Path, events: int, directory: Path) -> Path:
    """A snapshot of ``events`` events tiled from ``source`` (kept in ``directory``)."""
    out = directory / f"tiled_{events // 1_000_000}M.pickle"
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    need = source.stat().st_size * (events / 1_000_000) * 2.5  # the file and a cache entry
    free = shutil.disk_usage(directory).free
    if free < need:
        raise SystemExit(
            f"not enough disk in {directory} for a {events:,}-event file "
            f"({free / 2**30:.1f} GiB free, {need / 2**30:.1f} GiB needed)"
        )
    print(f"generating {out.name} ({events:,} events) with tile_trace.py ...", flush=True)
    t = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(HERE / "tile_trace.py"),
            str(source),
            str(out),
            "--events",
            str(events),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"  {out.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t:.0f} s", flush=True)
    return out


def bench_file(
    path: Path, tmp: Path, repeat: int, gui: bool, env: dict, skip_interactive: bool = False
) -> dict:
    py = sys.executable
    size = path.stat().st_size
    big = size > 300 << 20
    # Big files: best of 2 (one run right after the reference freed ~4 GB is noisy here).
    n = max(2, repeat // 2) if big else repeat
    row: dict = {"file": path.name, "mib": size / 2**20, "cpus": cpus()}
    row["ref_s"], row["ref_mib"] = best_of(n, [py, "-c", REFERENCE, str(path)], env)
    summary = [py, "-m", "vramscope.viewer", "summary", str(path), "--json"]
    # Cold: an empty cache each run (writing it included).
    cold = []
    for i in range(n):
        cache = tmp / f"cold{i}"
        t, m, out, stamps = measure_stamped(
            summary, dict(env, VRAMSCOPE_CACHE_DIR=str(cache)), tmp / "stages.log", capture=True
        )
        if not cold or t < min(c[0] for c in cold):
            row["cold_stamps"] = stamps
        cold.append((t, m))
        row["events"] = json.loads(out)["trace_events"]
        if i < n - 1:
            wait_for_cache(cache)  # the background cache write must not overlap the next run
            shutil.rmtree(cache, ignore_errors=True)
    row["cold_s"] = min(c[0] for c in cold)
    warm = dict(env, VRAMSCOPE_CACHE_DIR=str(tmp / f"cold{n - 1}"))  # primed by the last run
    row["cache_write_s"] = wait_for_cache(tmp / f"cold{n - 1}")
    # Memory from one more cold run, sampled over the command and its children (a forked
    # parse and the background cache write count too); its time is not used.
    sampled = tmp / "cold_sampled"
    _, row["cold_mib"], _ = measure(
        summary, dict(env, VRAMSCOPE_CACHE_DIR=str(sampled)), sample=True
    )
    row["cold_mib"] = max(row["cold_mib"], max(c[1] for c in cold))
    wait_for_cache(sampled)
    shutil.rmtree(sampled, ignore_errors=True)
    row["cached_s"], _ = best_of(repeat, summary, warm)
    row["columns_s"], _ = best_of(n, summary, dict(warm, VRAMSCOPE_NO_RESULT_CACHE="1"))
    # Where the cold open's time goes: each stage on its own, in one fresh process.
    stage_runs = [
        json.loads(
            measure(
                [py, str(HERE / "stages.py"), str(path), "--json"]
                + (["--serial"] if i == 0 else []),
                env,
                capture=True,
            )[2]
        )
        for i in range(n)
    ]
    row["stages"] = {k: min(r[k] for r in stage_runs if k in r) for k in set().union(*stage_runs)}
    if not skip_interactive:
        row.update(model_numbers(path, warm))
    if gui:
        row.update(gui_first_window(path, tmp, n, env))
        if not skip_interactive:
            _, _, out = measure(
                [py, str(HERE / "gui_bench.py"), str(path), "--json"], warm, capture=True
            )
            row["widgets"] = json.loads(out)
    for d in tmp.glob("cold*"):
        shutil.rmtree(d, ignore_errors=True)
    return row


def gui_first_window(path: Path, tmp: Path, n: int, env: dict, ref: list | None = None) -> dict:
    """The GUI first window's row: best of ``n`` cold runs (an empty cache each time), then
    one more, sampled, for the memory.  ``ref``: also run the pickle.load reference before
    each GUI run and append its (seconds, MiB) there (what the machine's load does to
    one, it does to the other)."""
    py = sys.executable
    gui_cmd = [py, "-m", "vramscope.viewer", str(path), "--screenshot"]
    runs = []
    for i in range(n + 1):
        if ref is not None and i < n:
            ref.append(measure([py, "-c", REFERENCE, str(path)], env)[:2])
        gui_cache = tmp / "gui"
        runs.append(
            first_window(
                gui_cmd,
                tmp / "shot.png",
                dict(
                    env,
                    VRAMSCOPE_CACHE_DIR=str(gui_cache),
                    VRAMSCOPE_STAGE_LOG=str(tmp / "gui_stages.log"),
                ),
                sample=i == n,
            )
        )
        shutil.rmtree(gui_cache, ignore_errors=True)
    best = min(runs[:n], key=lambda r: r[0])
    return {
        "gui_s": best[0],
        "gui_exit_s": best[1],
        "gui_stamps": best[3],
        "gui_mib": max(r[2] for r in runs),
        "gui_runs_s": [r[0] for r in runs[:n]],
    }


def bench_gui_only(path: Path, tmp: Path, repeat: int, env: dict) -> dict:
    """``--gui-only``: pickle.load and the GUI first window, one after the other ``repeat``
    times (best of each kept), without the summary, stage and interactive rows."""
    ref: list = []
    row: dict = {"file": path.name, "mib": path.stat().st_size / 2**20, "cpus": cpus()}
    row.update(gui_first_window(path, tmp, repeat, env, ref))
    row["ref_s"], row["ref_mib"] = min(r[0] for r in ref), min(r[1] for r in ref)
    row["ref_runs_s"] = [r[0] for r in ref]
    return row


def gui_report(rows: list[dict]) -> None:
    """The ``--gui-only`` table: the first window against pickle.load, and when the
    process reached each start-up stage in its best run."""
    print()
    print("GUI first window, cold (best of the runs; ratio against pickle.load, same run)")
    print(
        f"{'file':<38}{'pickle.load':>12}{'first window':>22}{'complete PNG':>14}{'exit':>8}"
        f"{'peak RSS':>10}"
    )
    for r in rows:
        ratio = r["gui_s"] / r["ref_s"]
        print(
            f"{r['file']:<38}{r['ref_s']:>11.2f}s{r['gui_s']:>7.2f}s {ratio:>5.3f}x "
            f"{verdict(ratio, TARGETS['gui'])}{r['gui_stamps'].get('png_on_disk', 0):>13.2f}s"
            f"{r['gui_exit_s']:>7.2f}s{r['gui_mib']:>8.0f}M"
        )
        runs = ", ".join(
            f"{g:.2f}/{p:.2f}" for g, p in zip(r["gui_runs_s"], r["ref_runs_s"], strict=False)
        )
        med = statistics.median(r["gui_runs_s"]) / statistics.median(r["ref_runs_s"])
        print(f"{'  each run, first window/pickle.load':<38}{runs} (medians: {med:.3f}x)")
        stamps = sorted(r["gui_stamps"].items(), key=lambda kv: kv[1])
        print(f"{'  stages (s from start)':<38}" + ", ".join(f"{k} {v:.2f}" for k, v in stamps))
    print(f"target: GUI first window, cold <= {TARGETS['gui']}x")


def first_window(
    cmd: list[str], png: Path, env: dict, sample: bool = False
) -> tuple[float, float, float, dict]:
    """(seconds until the first paint of the loaded window (the ``first_paint`` stamp;
    without one, the screenshot on disk), seconds until the
    process exits - it writes the column cache after the window -, peak RSS MiB, its
    start-up stage stamps).
    Both times count from the launcher's fork of the command (a shared monotonic clock)."""
    png.unlink(missing_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".json") as rec:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "launch.py"),
                *(["--sample"] if sample else []),
                rec.name,
                *cmd,
                str(png),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        shown_at, last = None, -1
        while proc.poll() is None and shown_at is None:
            size = png.stat().st_size if png.exists() else -1
            if size > 0 and size == last:  # written and no longer growing
                shown_at = time.perf_counter() - 0.005
            last = size
            time.sleep(0.005)
        _, err = proc.communicate()
        got = json.loads(Path(rec.name).read_text() or "{}")
    if proc.returncode != 0 or got.get("status") != 0 or not png.exists():
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}\n{err.decode()[-2000:]}")
    exit_s = got["seconds"]
    shown = shown_at - got["start"] if shown_at is not None else exit_s
    log = env.get("VRAMSCOPE_STAGE_LOG")
    stamps = read_stamps(Path(log), got["start"]) if log else {}
    # The first window is the first paint of the loaded window (stamped right after it
    # is painted); the memory categories are built off the GUI thread and drawn
    # when it lands, so the PNG - the complete picture, categories included - may come
    # later: that is "complete" (stamps["png_on_disk"]).
    stamps["png_on_disk"] = shown
    if "first_paint" in stamps:
        shown = min(shown, stamps["first_paint"])
    return shown, exit_s, got["tree_rss_mib"], stamps


def wait_for_cache(directory: Path, limit_s: float = 120.0) -> float:
    """Seconds until the column cache written after the summary's output (in the
    background) is complete: an entry there and no temporary file left."""
    t = time.perf_counter()
    while time.perf_counter() - t < limit_s:
        names = [p.name for p in directory.glob("*")] if directory.exists() else []
        if any(not n.startswith(".tmp") and n != "results" for n in names) and not any(
            n.startswith(".tmp") for n in names
        ):
            break
        time.sleep(0.05)
    return time.perf_counter() - t


def model_numbers(path: Path, env: dict) -> dict:
    """Replay, seek and call tree without Qt, in a fresh process (the cache primed)."""
    _, _, out = measure([sys.executable, __file__, "--model-child", str(path)], env, capture=True)
    return json.loads(out)


def model_child(path: str) -> int:
    """Time the model's time travel on one snapshot; print JSON."""
    import random

    from vramscope.viewer.model import load_snapshot
    from vramscope.viewer.model.analysis.calltree import call_tree
    from vramscope.viewer.model.core.frames import frame_categories
    from vramscope.viewer.model.replay import native_available
    from vramscope.viewer.model.replay.timeline import build_timeline, intervals

    t = time.perf_counter()
    snap = load_snapshot(path)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    tl = build_timeline(snap)
    device = min(tl.devices)
    rep = tl.replay(device)
    rep.peak("allocated")
    replay_s = time.perf_counter() - t
    rng = random.Random(0)
    seeks = []
    for _ in range(100):
        k = rng.randrange(len(rep))
        t = time.perf_counter()
        tl.snapshot_at(device, k)
        seeks.append(time.perf_counter() - t)
    t = time.perf_counter()
    iv = intervals(rep)
    intervals_s = time.perf_counter() - t
    cats = frame_categories(snap.frames)
    k = rep.peak("allocated")[1]
    t = time.perf_counter()
    at = tl.snapshot_at(device, k)
    live = at.blocks.state <= 1
    call_tree(snap, at.blocks.stack[live], at.blocks.size[live], cats)
    tree_s = time.perf_counter() - t
    print(
        json.dumps(
            {
                "native": native_available(),
                "columns_load_s": load_s,
                "replay_s": replay_s,
                "keyframe_every": rep.keyframe_every,
                "intervals_s": intervals_s,
                "model_seek_ms": statistics.median(seeks) * 1e3,
                "model_seek_max_ms": max(seeks) * 1e3,
                "model_calltree_ms": tree_s * 1e3,
                "intervals": len(iv),
            }
        )
    )
    return 0


def verdict(value: float | None, target: float) -> str:
    if value is None:
        return "  -  "
    return "PASS " if value <= target else "MISS "


STAGES = [
    "import",
    "read",
    "map",
    "parse",
    "parse_serial",
    "columns",
    "replay",
    "summary",
    "categories",
]  # categories: the part of summary that classifies


def stage_report(rows: list[dict]) -> None:
    """The per-stage breakdown: in-process stages (stages.py) and when the whole cold
    processes reached theirs (VRAMSCOPE_STAGE_LOG stamps)."""
    print()
    print(
        "per-stage breakdown, cold open (seconds; best of the runs; wall, CPU in brackets "
        "where a busy machine makes them differ)"
    )
    hdr = f"{'file':<34}" + "".join(f"{s:>16}" for s in STAGES)
    print(hdr)
    for r in rows:
        st = r.get("stages", {})
        cells = []
        for s in STAGES:
            if f"{s}_s" not in st:
                cells.append(f"{'-':>16}")
                continue
            label = f"{st[f'{s}_s']:.3f} ({st.get(f'{s}_cpu_s', 0):.2f})"
            cells.append(f"{label:>16}")
        print(f"{r['file']:<34}" + "".join(cells))
    print(
        f"(in one fresh process each: import = numpy + the model; read = the whole file "
        f"once, the floor; map = mmap + populate; parse = the compiled parser on "
        f"{rows[0].get('stages', {}).get('threads', '?')} threads, parse_serial on one; "
        f"columns = the answer to a Snapshot; replay = build_timeline as summary runs it; "
        f"categories = the part of summary that classifies the memory)"
    )
    print(
        f"{'whole processes, seconds from start':<34}{'parse started':>15}{'parse done':>12}"
        f"{'columns done':>14}{'output/exit':>13}{'document built':>16}{'first paint':>13}"
        f"{'complete PNG':>14}"
    )
    for r in rows:
        c, g = r.get("cold_stamps", {}), r.get("gui_stamps", {})

        def f(x):
            return f"{x:.3f}" if x is not None else "-"

        doc = g.get("document_done")
        paint = r["gui_s"] - doc if doc is not None and "gui_s" in r else None
        print(
            f"{r['file'] + ' (summary)':<34}{f(c.get('parse_start')):>15}"
            f"{f(c.get('parse_done')):>12}{f(c.get('columns_done')):>14}{f(r['cold_s']):>13}"
        )
        if c.get("replay_done") is not None:
            print(
                f"{'  then (summary)':<34}{'imported':>15}{'replay done':>12}{'summary':>14}"
                f"{'output':>13}{'exit':>16}"
            )
            print(
                f"{'':<34}{f(c.get('imported')):>15}{f(c.get('replay_done')):>12}"
                f"{f(c.get('summary_done')):>14}{f(c.get('output_done')):>13}"
                f"{f(r['cold_s']):>16}"
            )
        if g:
            print(
                f"{r['file'] + ' (GUI)':<34}{f(g.get('parse_start')):>15}"
                f"{f(g.get('parse_done')):>12}{f(g.get('columns_done')):>14}"
                f"{f(r.get('gui_s')):>13}{f(doc):>16}{f(paint):>13}"
                f"{f(g.get('png_on_disk')):>14}"
            )
    print(
        "(summary: after columns done come the replay, the summary and the output; GUI: "
        "first paint = the loaded window's first paint - document built; complete PNG = the "
        "screenshot, categories drawn, on disk; a parse is started only for "
        "uncompressed files of 4 MiB and more)"
    )


def report(rows: list[dict]) -> None:
    print()
    print("vramscope benchmark: ratios against pickle.load of the same file, same run")
    hdr = (
        f"{'file':<34}{'events':>11}{'MiB':>6}{'pickle.load':>13}  "
        f"{'cold summary':>22}  {'cold RSS':>16}  {'re-open':>16}  {'GUI first window':>19}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        ref = r["ref_s"]
        cold, rss, cached = r["cold_s"] / ref, r["cold_mib"] / r["ref_mib"], r["cached_s"] / ref
        gui = r["gui_s"] / ref if "gui_s" in r else None
        print(
            f"{r['file']:<34}{r['events']:>11,}{r['mib']:>6.0f}{ref:>8.2f}s"
            f"{r['ref_mib'] / 1024:>4.1f}G  "
            f"{r['cold_s']:>6.2f}s {cold:>5.3f}x {verdict(cold, TARGETS['cold'])} "
            f"{r['cold_mib']:>5.0f}M {rss:>4.2f}x {verdict(rss, TARGETS['cold_rss'])} "
            f"{r['cached_s']:>5.2f}s {cached:>5.3f}x {verdict(cached, TARGETS['cached'])}"
            + (
                f"{r['gui_s']:>5.2f}s {gui:>5.3f}x {verdict(gui, TARGETS['gui'])}"
                if gui is not None
                else "   (no PySide6: skipped)"
            )
        )
    print(
        f"targets: cold <= {TARGETS['cold']}x time and <= {TARGETS['cold_rss']}x peak RSS; "
        f"re-open (cache present) <= {TARGETS['cached']}x; GUI first window, cold <= "
        f"{TARGETS['gui']}x"
    )
    stage_report(rows)
    if not any("replay_s" in r for r in rows):
        return
    print()
    print(
        f"{'file':<34}{'re-open, columns only':>22}{'replay':>9}{'intervals':>10}"
        f"{'model seek':>17}{'native':>7}"
    )
    for r in rows:
        print(
            f"{r['file']:<34}{r['columns_s']:>9.2f}s {r['columns_s'] / r['ref_s']:>6.3f}x    "
            f"{r['replay_s']:>7.2f}s{r['intervals_s']:>9.2f}s"
            f"{r['model_seek_ms']:>7.2f} ms {r['model_seek_max_ms']:>5.1f} max"
            f"{'yes' if r['native'] else 'no':>6}"
        )
    print(
        "(re-open, columns only: the column cache without the summary's result cache; "
        "replay: every device's trace, C loop when native)"
    )
    print(
        "(GUI first window: until the loaded window's first paint (what the memory is "
        "follows, built off the GUI thread: complete PNG above); the "
        "process then writes the column cache and exits: "
        + ", ".join(
            f"{r['file']}: {r['gui_exit_s']:.1f} s, peak RSS {r['gui_mib'] / r['ref_mib']:.2f}x"
            for r in rows
            if "gui_exit_s" in r
        )
        + ")"
    )
    print(
        "(cold summary: the column cache is written after the output, in the background; "
        + ", ".join(f"{r['file']}: done {r['cache_write_s']:.1f} s after exit" for r in rows)
        + ")"
    )
    if not any("widgets" in r or "model_seek_ms" in r for r in rows):
        return
    print()
    print(
        f"{'interactive (real widgets)':<34}{'events':>11}{'redraw median/max':>22}"
        f"{'seek median/max':>22}{'call tree at peak':>22}"
    )
    for r in rows:
        w = r.get("widgets")
        if w is None:
            mt = r["model_calltree_ms"]
            print(
                f"{r['file']:<34}{r['events']:>11,}{'(no GUI)':>22}"
                f"{r['model_seek_ms']:>9.1f}/{r['model_seek_max_ms']:<6.1f}ms model"
                f"{mt:>9.1f} ms model"
            )
            continue
        judged = r["events"] >= INTERACTIVE_FROM_EVENTS

        def v(key: str, target: str, w=w, judged=judged) -> str:
            return verdict(w[key], TARGETS[target]) if judged else "     "

        print(
            f"{r['file']:<34}{r['events']:>11,}"
            f"{w['redraw_median_ms']:>8.1f}/{w['redraw_max_ms']:<6.1f}ms "
            f"{v('redraw_median_ms', 'redraw_ms')}"
            f"{w['seek_median_ms']:>8.1f}/{w['seek_max_ms']:<6.1f}ms "
            f"{v('seek_median_ms', 'seek_ms')}"
            f"{w['calltree_peak_ms']:>10.1f} ms {v('calltree_peak_ms', 'calltree_ms')}"
        )
    print(
        f"targets at {INTERACTIVE_FROM_EVENTS // 1_000_000}M+ events: redraw <= "
        f"{TARGETS['redraw_ms']:.0f} ms, seek <= {TARGETS['seek_ms']:.0f} ms, call tree at the "
        f"peak <= {TARGETS['calltree_ms'] / 1000:.0f} s (medians judged; redraw = pan/zoom "
        f"to the repainted timeline, seek = cursor move to the repainted window)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (best kept)")
    parser.add_argument("--quick", action="store_true", help="the 1M-event file only")
    parser.add_argument("--events", type=int, default=10_000_000, help="size of the tiled file")
    parser.add_argument("--keep", metavar="DIR", help="keep (and reuse) generated files here")
    parser.add_argument("--no-gui", action="store_true", help="skip the GUI rows")
    parser.add_argument(
        "--no-interactive",
        action="store_true",
        help="skip the model/widget timings (seek, redraw, call tree)",
    )
    parser.add_argument(
        "--no-parallel",
        action="store_true",
        help="skip the serial-vs-pool rows (bench_parallel.py)",
    )
    parser.add_argument(
        "--small-cores",
        type=int,
        default=2,
        metavar="N",
        help="the parallel rows also on N cores (taskset), beside all of them (default 2)",
    )
    parser.add_argument(
        "--no-remote",
        action="store_true",
        help="skip the ssh:// rows (bench_remote.py: a throttled link)",
    )
    parser.add_argument(
        "--gui-only",
        action="store_true",
        help="only pickle.load and the GUI first window, alternately (--repeat times each)",
    )
    parser.add_argument("--json", metavar="OUT", help="also write the numbers as JSON")
    parser.add_argument("--model-child", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", help="more snapshot pickles to measure")
    args = parser.parse_args()
    if args.model_child:
        return model_child(args.model_child)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    # Measure vramscope as installed: byte-compiled (pip compiles on install).  With
    # PYTHONDONTWRITEBYTECODE set, every run would otherwise recompile any source edited
    # since its .pyc was written.
    # The same for the code of shiboken6's embedded Python, which the GUI caches beside its
    # own (viewer/_qt/widgets/embedded_code.py): written by a first import of the GUI.
    writable = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for precompile in (
        ["-m", "compileall", "-q", str(ROOT / "viewer"), str(ROOT / "capture")],
        ["-c", "import vramscope.viewer._qt"],
    ):
        subprocess.run(
            [sys.executable, *precompile],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=writable,
        )
    gui = has_gui() and not args.no_gui
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vramscope-bench-") as tmp_name:
        tmp = Path(tmp_name)
        keep = Path(args.keep) if args.keep else tmp
        keep.mkdir(parents=True, exist_ok=True)
        plain = keep / "transformer_long_python_1000k.pickle"
        if not plain.exists():
            plain.write_bytes(lzma.decompress(BIG.read_bytes()))
        files = [plain]
        if not args.quick:
            files.append(tiled_file(plain, args.events, keep))
        files += [Path(f) for f in args.files]
        rows = []
        if args.gui_only:
            if not gui:
                raise SystemExit("--gui-only: no GUI here (PySide6 and pyqtgraph, or --no-gui)")
            for path in files:
                print(f"measuring {path.name}: GUI first window ...", flush=True)
                rows.append(bench_gui_only(path, tmp, args.repeat, env))
            gui_report(rows)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
            return 0
        for path in files:
            print(f"measuring {path.name} ...", flush=True)
            rows.append(bench_file(path, tmp, args.repeat, gui, env, args.no_interactive))
        par_rows: list[dict] = []
        if not args.no_parallel:
            import bench_parallel

            penv = dict(env, VRAMSCOPE_CACHE_DIR=str(tmp / "parallel-cache"))
            for path in files:
                print(f"measuring {path.name}: serial vs pool ...", flush=True)
                par_rows += bench_parallel.sim_rows(path, measure, penv, small=args.small_cores)
            par_rows.append(
                bench_parallel.rank_rows(tmp, measure, penv, keep=keep, small=args.small_cores)
            )
            shutil.rmtree(tmp / "parallel-cache", ignore_errors=True)
        remote_rows: list[dict] = []
        if not args.no_remote:
            import bench_remote

            for path in files:
                print(f"measuring summary ssh://.../{path.name} over a slow link ...", flush=True)
                remote_rows += bench_remote.remote_rows(path) or []
    report(rows)
    if remote_rows:
        bench_remote.report(remote_rows)
    if par_rows:
        bench_parallel.report(par_rows)
    if not args.no_interactive:
        # A live update extends the replay; its cost against a rebuild.
        print("\nlive update of a 1M-event ring (bench_live_update.py):", flush=True)
        subprocess.run([sys.executable, str(HERE / "bench_live_update.py")], check=False, env=env)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(
        f"\n(bench took {time.perf_counter() - started:.0f} s; {cpus()} CPUs for it "
        f"({os.cpu_count()} in the machine), load average now {load}; "
        f"python {sys.version.split()[0]})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows + par_rows + remote_rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
