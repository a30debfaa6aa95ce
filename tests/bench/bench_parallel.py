"""Bench rows for independent work on every core (``viewer/model/core/parallel.py``):
what-if settings, ``--recommend``, ``advise``, a batch estimate, and a directory of
64 rank files, each one after the other (``VRAMSCOPE_JOBS=1`` / ``--jobs 1``), on a
pool of every CPU (forced: ``VRAMSCOPE_JOBS=N`` / ``--jobs N``) and as the command
decides by default (the pool where it pays).

Every figure is a ratio against ``pickle.load`` of the same data in the same run
(for the rank directory: of its 64 files in one process), as in ``run_bench.py``;
peak memory is the whole process tree's (forked workers' shared pages counted once:
the sum of PSS, sampled by ``launch.py --sample`` in one more, untimed, run).

``run_bench.py`` prints these rows after its own (``--no-parallel`` skips them);
alone::

    .venv/bin/python tests/bench/bench_parallel.py [FILE] [--ranks-only] [--repeat N]
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

# (row, command arguments after the file, runs on a pool at all)
COMMANDS = [
    (
        "whatif, one setting",
        ["whatif", "{file}", "--conf", "expandable_segments:True", "--json"],
        False,
    ),
    ("whatif --recommend", ["whatif", "{file}", "--recommend", "--json"], True),
    ("advise", ["advise", "{file}", "--json"], True),
    ("batch estimate (x0.5)", ["whatif", "{file}", "--batch-scale", "0.5", "--json"], True),
]
# Goal: the pool at least this share of a perfect speed-up (min(CPUs, items) times).
EFFICIENCY_TARGET = 0.6
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


def _three(
    measure, cmd: list[str], env: dict, repeat: int, serial_env: dict, pool_env: dict, pooled: bool
) -> dict:
    """Serial, forced pool and default: best seconds of ``repeat`` and sampled peak MiB."""
    out: dict = {}
    for name, e in (("serial", serial_env), ("pool", pool_env), ("default", env)):
        if not pooled and name == "pool":
            continue
        c = cmd(name) if callable(cmd) else cmd
        times = [measure(c, e)[0] for _ in range(repeat)]
        out[f"{name}_s"] = min(times)
        out[f"{name}_mib"] = measure(c, e, sample=True)[1]
    return out


def sim_rows(path: Path, measure, env: dict, repeat: int = 1) -> list[dict]:
    """The simulation rows of one snapshot file (its column cache primed first)."""
    py = sys.executable
    jobs = str(cpus())
    base = {k: v for k, v in env.items() if k != "VRAMSCOPE_JOBS"}
    serial_env, pool_env = dict(base, VRAMSCOPE_JOBS="1"), dict(base, VRAMSCOPE_JOBS=jobs)
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
    for label, args, pooled in COMMANDS:
        cmd = [py, "-m", "vramscope.viewer", *(a.format(file=path) for a in args)]
        print(f"  {path.name}: {label} ...", flush=True)
        row = {
            "file": path.name,
            "row": label,
            "ref_s": ref_s,
            "ref_mib": ref_mib,
            "workers": int(jobs),
            "items": 9 if "recommend" in label else None,
        }
        row.update(_three(measure, cmd, base, repeat, serial_env, pool_env, pooled))
        rows.append(row)
    return rows


def rank_rows(tmp: Path, measure, env: dict, repeat: int = 1, keep: Path | None = None) -> dict:
    """The rank directory row: ``summary DIR --json --no-cache`` with ``--jobs 1``,
    ``--jobs N`` and the default."""
    py = sys.executable
    d = rank_directory((keep or tmp) / f"ranks{RANK_FILES}")
    base = {k: v for k, v in env.items() if k != "VRAMSCOPE_JOBS"}
    ref_s = min(measure([py, "-c", REFERENCE_MANY, str(d)], base)[0] for _ in range(repeat))
    ref_mib = measure([py, "-c", REFERENCE_MANY, str(d)], base)[1]
    jobs = str(cpus())

    def cmd(name: str) -> list[str]:
        extra = {"serial": ["--jobs", "1"], "pool": ["--jobs", jobs], "default": []}[name]
        return [py, "-m", "vramscope.viewer", "summary", str(d), "--json", "--no-cache", *extra]

    print(f"  rank directory of {RANK_FILES} files ...", flush=True)
    mib = sum(p.stat().st_size for p in d.glob("*.pickle")) / 2**20
    row = {
        "file": f"{RANK_FILES} rank files ({mib:.0f} MiB)",
        "row": "summary DIR",
        "ref_s": ref_s,
        "ref_mib": ref_mib,
        "workers": int(jobs),
        "items": RANK_FILES,
    }
    row.update(_three(measure, cmd, base, repeat, base, base, True))
    return row


def report(rows: list[dict]) -> None:
    print()
    print(
        "independent runs on every core: seconds and ratio against pickle.load of the same "
        "data (same run); serial = one after the other, pool = forced on every CPU, "
        "default = as the command decides"
    )
    hdr = (
        f"{'file':<34}{'row':<24}{'pickle.load':>12}{'serial':>16}{'pool':>16}"
        f"{'default':>16}{'speed-up':>10}  {'peak MiB serial/pool (x load)':>30}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        ref = r["ref_s"]

        def cell(key: str, r=r, ref=ref) -> str:
            v = r.get(key)
            return f"{v:>6.2f}s {v / ref:>6.2f}x" if v is not None else f"{'-':>15}"

        speed = r["serial_s"] / r["pool_s"] if r.get("pool_s") else None
        perfect = min(r["workers"], r.get("items") or r["workers"])
        verdict = (
            "" if speed is None else (" PASS" if speed >= EFFICIENCY_TARGET * perfect else " MISS")
        )
        mem = (
            f"{r['serial_mib']:>6.0f}/{r.get('pool_mib', r['serial_mib']):<6.0f}"
            f"({r['serial_mib'] / r['ref_mib']:.2f}x/"
            f"{r.get('pool_mib', r['serial_mib']) / r['ref_mib']:.2f}x)"
        )
        print(
            f"{r['file']:<34}{r['row']:<24}{ref:>11.2f}s {cell('serial_s'):>16}"
            f"{cell('pool_s'):>16}{cell('default_s'):>16}"
            f"{(f'{speed:.2f}x' if speed else '-'):>9}{verdict:<5} {mem:>26}"
        )
    print(
        f"target: the pool's speed-up >= {EFFICIENCY_TARGET} x min(CPUs, independent "
        f"runs) ({cpus()} CPUs here); peak MiB: the whole tree (forked workers' shared "
        "pages once)"
    )


def main(argv: list[str]) -> int:
    import argparse

    sys.path.insert(0, str(HERE))
    from run_bench import measure  # launch.py-based, as every other row

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", nargs="?", help="a snapshot pickle (default: the bundled 1M)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--ranks-only", action="store_true")
    args = p.parse_args(argv)
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
            rows += sim_rows(path, measure, env, args.repeat)
        rows.append(rank_rows(tmp, measure, env, args.repeat))
        shutil.rmtree(tmp / "cache", ignore_errors=True)
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
