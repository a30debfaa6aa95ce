"""Bench rows for independent work on every core (``viewer/model/core/parallel.py``):
what-if settings, ``--recommend``, ``advise``, a batch estimate, and a directory of
64 rank files, each one after the other (``VRAMSCOPE_JOBS=1`` / ``--jobs 1``), and as
the command decides (the pool where it pays) on two cores (``taskset`` to the first two
CPUs this process may use: a 2-core machine, parse threads and pool alike) and on all
of them, so that a regression on either shows; the core count is in every row.  Where
there are no more than two CPUs, the 2-core column is the all-core one (not run twice).

Every figure is a ratio against ``pickle.load`` of the same data in the same run
(for the rank directory: of its 64 files in one process), as in ``run_bench.py``;
peak memory is the whole process tree's (forked workers' shared pages counted once:
the sum of PSS, sampled by ``launch.py --sample`` in one more, untimed, run).

``run_bench.py`` prints these rows after its own (``--no-parallel`` skips them);
alone::

    .venv/bin/python tests/bench/bench_parallel.py [FILE] [--ranks-only] [--repeat N]
        [--only whatif,advise] [--no-ranks] [--json OUT]

(``tests/bench/gpu_bench.sh`` runs the what-if and advise rows so, best of 3, on the GPU
host's 10M-event file.)
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT / "tests" / "data"
TRUTH = DATA / "truth"
RANK_FILES = 64

# (key for --only, row, command arguments after the file, runs on a pool at all)
COMMANDS = [
    (
        "whatif",
        "whatif, one setting",
        ["whatif", "{file}", "--conf", "expandable_segments:True", "--json"],
        False,
    ),
    ("recommend", "whatif --recommend", ["whatif", "{file}", "--recommend", "--json"], True),
    ("advise", "advise", ["advise", "{file}", "--json"], True),
    (
        "batch",
        "batch estimate (x0.5)",
        ["whatif", "{file}", "--batch-scale", "0.5", "--json"],
        True,
    ),
]
# Goal: on all cores at least this share of a perfect speed-up over one after the other
# (min(CPUs, items) times).
EFFICIENCY_TARGET = 0.6
SAME = 1.05  # all cores against two: within this, the same (one run's noise)
TWO = 2  # the cores of the small machine each row is also measured on
# Columns: one after the other, as the command decides on TWO cores, on all of them.
CONFIGS = ("serial", "two", "all")
REFERENCE_MANY = (
    "import pickle, sys, pathlib\n"
    "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.pickle')):\n"
    "    with open(p, 'rb') as f: pickle.load(f)\n"
)


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def two_cores(small: int = TWO) -> list[str] | None:
    """The prefix that runs a command on the first ``small`` CPUs this process may use
    (``taskset -c A,B``), or None where there are no more than that (the all-core run is
    the small machine's) or no ``taskset``."""
    if cpus() <= small or shutil.which("taskset") is None:
        return None
    try:
        first = sorted(os.sched_getaffinity(0))[:small]
    except (AttributeError, OSError):
        return None
    return ["taskset", "-c", ",".join(str(c) for c in first)]


def rank_directory(out: Path, n: int = RANK_FILES) -> Path:
    """``n`` distinct real snapshots (the truth recordings, decompressed) under capture
    names, each with its sidecar made a rank's: a rank directory as torchrun writes it."""
    out.mkdir(parents=True, exist_ok=True)
    sources = sorted(TRUTH.glob("*.pickle.xz"))
    if len(sources) < n:
        sources += sorted(DATA.glob("*.pickle"))
    if len(sources) < n:
        raise SystemExit(f"only {len(sources)} real snapshots for a {n}-rank directory")
    for rank, src in enumerate(sources[:n]):
        stem = (
            f"bench-node-{rank // 8}_pid{5000 + rank}_rank{rank}_cuda{rank % 8}_exit_"
            f"20250301-142510-{rank:03d}"
        )
        target = out / f"{stem}.pickle"
        if not target.exists():
            raw = src.read_bytes()
            target.write_bytes(lzma.decompress(raw) if src.suffix == ".xz" else raw)
        side = src.parent / (src.name.split(".pickle")[0] + ".json")
        meta = json.loads(side.read_text()) if side.exists() else {}
        meta.update(
            rank=rank,
            world_size=n,
            local_rank=rank % 8,
            device=rank % 8,
            host=f"bench-node-{rank // 8}",
            pid=5000 + rank,
            reason="exit",
        )
        (out / f"{stem}.json").write_text(json.dumps(meta))
    return out


def _configs(measure, cmd, env: dict, repeat: int, serial_env: dict, small: int = TWO) -> dict:
    """One after the other, on ``small`` cores and on all: best seconds of ``repeat``
    each (``two_s`` is ``all_s`` where :func:`two_cores` is None), and the sampled peak
    MiB of the serial and the all-core run.  ``cmd``: the command, or ``cmd(config)``."""
    out: dict = {"cpus": cpus(), "small_cores": small}
    prefix = two_cores(small)
    out["two_cpus"] = prefix[-1] if prefix else None
    for name in CONFIGS:
        if name == "two" and prefix is None:
            continue
        c = cmd(name) if callable(cmd) else cmd
        c = [*prefix, *c] if name == "two" and prefix else c
        e = serial_env if name == "serial" else env
        out[f"{name}_s"] = min(measure(c, e)[0] for _ in range(repeat))
        if name != "two":
            out[f"{name}_mib"] = measure(c, e, sample=True)[1]
    if prefix is None:
        out["two_s"] = out["all_s"]
    return out


def sim_rows(
    path: Path,
    measure,
    env: dict,
    repeat: int = 1,
    only: list[str] | None = None,
    small: int = TWO,
) -> list[dict]:
    """The simulation rows of one snapshot file (its column cache primed first);
    ``only``: those of these keys (COMMANDS); ``small``: the small machine's cores."""
    py = sys.executable
    base = {k: v for k, v in env.items() if k != "VRAMSCOPE_JOBS"}
    serial_env = dict(base, VRAMSCOPE_JOBS="1")
    ref_s = min(
        measure(
            [
                py,
                "-c",
                "import pickle, sys\nwith open(sys.argv[1], 'rb') as f: pickle.load(f)\n",
                str(path),
            ],
            base,
        )[0]
        for _ in range(repeat)
    )
    ref_mib = measure(
        [
            py,
            "-c",
            "import pickle, sys\nwith open(sys.argv[1], 'rb') as f: pickle.load(f)\n",
            str(path),
        ],
        base,
    )[1]
    measure([py, "-m", "vramscope.viewer", "summary", str(path)], base)  # the column cache
    rows = []
    for key, label, args, pooled in COMMANDS:
        if only is not None and key not in only:
            continue
        cmd = [py, "-m", "vramscope.viewer", *(a.format(file=path) for a in args)]
        print(f"  {path.name}: {label} ...", flush=True)
        row = {
            "file": path.name,
            "row": label,
            "ref_s": ref_s,
            "ref_mib": ref_mib,
            "pooled": pooled,
            "items": 9 if "recommend" in label else None,
        }
        row.update(_configs(measure, cmd, base, repeat, serial_env, small))
        rows.append(row)
    return rows


def rank_rows(
    tmp: Path, measure, env: dict, repeat: int = 1, keep: Path | None = None, small: int = TWO
) -> dict:
    """The rank directory row: ``summary DIR --json --no-cache`` with ``--jobs 1``, and
    by default on TWO cores and on all."""
    py = sys.executable
    d = rank_directory((keep or tmp) / f"ranks{RANK_FILES}")
    base = {k: v for k, v in env.items() if k != "VRAMSCOPE_JOBS"}
    ref_s = min(measure([py, "-c", REFERENCE_MANY, str(d)], base)[0] for _ in range(repeat))
    ref_mib = measure([py, "-c", REFERENCE_MANY, str(d)], base)[1]

    def cmd(name: str) -> list[str]:
        extra = ["--jobs", "1"] if name == "serial" else []
        return [py, "-m", "vramscope.viewer", "summary", str(d), "--json", "--no-cache", *extra]

    print(f"  rank directory of {RANK_FILES} files ...", flush=True)
    mib = sum(p.stat().st_size for p in d.glob("*.pickle")) / 2**20
    row = {
        "file": f"{RANK_FILES} rank files ({mib:.0f} MiB)",
        "row": "summary DIR",
        "ref_s": ref_s,
        "ref_mib": ref_mib,
        "pooled": True,
        "items": RANK_FILES,
    }
    row.update(_configs(measure, cmd, base, repeat, base, small))
    return row


def report(rows: list[dict]) -> None:
    n = rows[0]["cpus"] if rows else cpus()
    two = rows[0].get("two_cpus") if rows else None
    small = rows[0].get("small_cores", TWO) if rows else TWO
    print()
    print(
        "independent runs: seconds and ratio against pickle.load of the same data (same "
        f"run); serial = one after the other; {small} cores = as the command decides, "
        + (
            f"on CPUs {two} (taskset)"
            if two
            else f"on all {n} CPUs (no more here: that column is the all one)"
        )
        + f"; all = as it decides, on all {n} CPUs"
    )
    hdr = (
        f"{'file':<34}{'row':<24}{'pickle.load':>12}{'serial':>16}{f'{small} cores':>16}"
        f"{'all cores':>16}{f'all/{small}':>7}{'speed-up':>10}  "
        f"{'peak MiB serial/all (x load)':>29}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        ref = r["ref_s"]

        def cell(key: str, r=r, ref=ref) -> str:
            v = r.get(key)
            return f"{v:>6.2f}s {v / ref:>6.2f}x" if v is not None else f"{'-':>15}"

        # All cores no slower than two (beyond one run's noise); a pooled row also a
        # speed-up over one after the other.
        faster = r["all_s"] <= r["two_s"] * SAME if r.get("two_cpus") else True
        speed = r["serial_s"] / r["all_s"] if r["pooled"] else None
        # (the efficiency goal where the independent runs are known: --recommend's
        # settings, the rank files; advise and a batch estimate mix them with serial work)
        items = r.get("items")
        slow = speed is not None and items and speed < EFFICIENCY_TARGET * min(r["cpus"], items)
        verdict = " MISS" if not faster or slow else " PASS"
        mem = (
            f"{r['serial_mib']:>6.0f}/{r['all_mib']:<6.0f}"
            f"({r['serial_mib'] / r['ref_mib']:.2f}x/{r['all_mib'] / r['ref_mib']:.2f}x)"
        )
        ratio = f"{r['all_s'] / r['two_s']:.2f}" if r.get("two_cpus") else "-"
        print(
            f"{r['file']:<34}{r['row']:<24}{ref:>11.2f}s {cell('serial_s'):>16}"
            f"{cell('two_s'):>16}{cell('all_s'):>16}{ratio:>7}"
            f"{(f'{speed:.2f}x' if speed else '-'):>9}{verdict:<5} {mem:>26}"
        )
    print(
        f"target: all cores no slower than {small} (all/{small} <= {SAME}), and where the "
        f"independent runs are known (--recommend, the rank files) a speed-up over serial "
        f">= {EFFICIENCY_TARGET} x min(CPUs, runs); "
        "peak MiB: the whole tree (forked workers' shared pages once)"
    )


def main(argv: list[str]) -> int:
    import argparse

    sys.path.insert(0, str(HERE))
    from run_bench import measure  # launch.py-based, as every other row

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", nargs="?", help="a snapshot pickle (default: the bundled 1M)")
    p.add_argument("--repeat", type=int, default=1, help="runs per cell (best kept)")
    p.add_argument("--ranks-only", action="store_true", help="only the rank directory row")
    p.add_argument("--no-ranks", action="store_true", help="without the rank directory row")
    keys = [key for key, *_ in COMMANDS]
    p.add_argument(
        "--only", metavar="KEYS", help="only these rows of FILE, comma-separated: " + ",".join(keys)
    )
    p.add_argument(
        "--small-cores",
        type=int,
        default=TWO,
        metavar="N",
        help=f"the small machine's cores, the column beside all of them (default {TWO})",
    )
    p.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = p.parse_args(argv)
    if args.small_cores < 1:
        p.error("--small-cores: at least 1")
    only = [k.strip() for k in args.only.split(",")] if args.only else None
    unknown = sorted(set(only or []) - set(keys))
    if unknown:
        p.error(f"--only: no row {', '.join(unknown)} (rows: {', '.join(keys)})")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    with tempfile.TemporaryDirectory(prefix="vramscope-bench-par-") as t:
        tmp = Path(t)
        env["VRAMSCOPE_CACHE_DIR"] = str(tmp / "cache")
        rows = []
        if not args.ranks_only:
            path = Path(args.file) if args.file else tmp / "transformer_long_python_1000k.pickle"
            if not args.file:
                path.write_bytes(
                    lzma.decompress((DATA / "transformer_long_python_1000k.pickle.xz").read_bytes())
                )
            rows += sim_rows(path, measure, env, args.repeat, only, args.small_cores)
        if not args.no_ranks:
            rows.append(rank_rows(tmp, measure, env, args.repeat, small=args.small_cores))
        shutil.rmtree(tmp / "cache", ignore_errors=True)
    report(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
