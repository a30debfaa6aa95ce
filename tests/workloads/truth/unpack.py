"""Unpack what record_all.py brought back: small files into the repo, the rest aside.

    python tests/workloads/truth/unpack.py FETCHED_OUT_DIR [--dest tests/data/truth]
        [--overflow ../shared/truth] [--max-file 2000000] [--max-total 15000000]

Snapshots (``.pickle.xz``) go to ``--dest``, smallest first, while each is
at most ``--max-file`` bytes and the total there stays within
``--max-total``; the others (and the logs, profiler timelines) go to
``--overflow`` with their sidecars.  Every truth file, search and
driver_report.json goes to ``--dest`` (a moved snapshot's truth file to both).  Tar
members are extracted by plain name only: nothing with a path, a link or an odd name
is written.
"""

from __future__ import annotations

import argparse
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_SAFE = re.compile(r"^[A-Za-z0-9_.+-]+$")


def members(src: Path):
    """(name, bytes) of every regular, plainly named file in the tars under ``src``."""
    for tar_path in sorted(src.glob("*.tar")):
        with tarfile.open(tar_path) as tf:
            for m in tf.getmembers():
                name = m.name[2:] if m.name.startswith("./") else m.name  # tar -C DIR .
                if m.isdir() and name in ("", "."):
                    continue
                if not m.isfile() or not _SAFE.match(name):
                    print(f"skipped {tar_path.name}:{m.name!r} (not a plain file name)")
                    continue
                f = tf.extractfile(m)
                if f is not None:
                    yield name, f.read()
    report = src / "driver_report.json"
    if report.is_file():
        yield report.name, report.read_bytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="the fetched $OUT directory (truth_*.tar, driver_report.json)")
    ap.add_argument("--dest", default=str(ROOT / "tests" / "data" / "truth"))
    ap.add_argument("--overflow", default=str(ROOT.parent / "shared" / "truth"))
    ap.add_argument("--max-file", type=int, default=2_000_000)
    ap.add_argument("--max-total", type=int, default=15_000_000)
    args = ap.parse_args(argv)
    src, dest, over = Path(args.src), Path(args.dest), Path(args.overflow)
    files = dict(members(src))
    if not files:
        print(f"nothing to unpack in {src}", file=sys.stderr)
        return 1
    dest.mkdir(parents=True, exist_ok=True)
    over.mkdir(parents=True, exist_ok=True)
    small = {n: b for n, b in files.items() if n.endswith(".json")}
    total = sum(len(b) for b in small.values())
    rest = {n: b for n, b in files.items() if n not in small}
    for name in sorted((n for n in rest if n.endswith(".pickle.xz")), key=lambda n: len(rest[n])):
        n = len(rest[name])
        if n <= args.max_file and total + n <= args.max_total:
            small[name] = rest.pop(name)
            total += n
    # A sidecar stays with its snapshot; truth files go to both places when it moved.
    for name in [n for n in rest if n.endswith(".pickle.xz")]:
        stem = name[: -len(".pickle.xz")]
        if f"{stem}.json" in small:
            rest[f"{stem}.json"] = small.pop(f"{stem}.json")
            total -= len(rest[f"{stem}.json"])
        if f"{stem}.truth.json" in small:
            rest[f"{stem}.truth.json"] = small[f"{stem}.truth.json"]
    for name, data in small.items():
        (dest / name).write_bytes(data)
    for name, data in rest.items():
        (over / name).write_bytes(data)
    print(
        f"{len(small)} files ({total / 1e6:.1f} MB) -> {dest}; {len(rest)} files "
        f"({sum(map(len, rest.values())) / 1e6:.1f} MB) -> {over}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
