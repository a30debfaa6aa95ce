"""``vramscope summary FILE [--json]``: the analysis, headless."""

from __future__ import annotations

import argparse
import json
import sys

from ..model import SnapshotError
from ..model.load import load_snapshot
from ..model.summary import format_text, summarize


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope summary",
        description="Print a snapshot's memory figures (equal to torch.cuda.memory_stats() "
        "at the same instant) and, after an OOM, why it happened.",
    )
    p.add_argument("file", help="snapshot file (.pickle, gzip/xz, or JSON)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        snap = load_snapshot(args.file)
    except SnapshotError as exc:
        print(f"vramscope: error: {args.file}: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"vramscope: error: {args.file}: not enough memory to load it", file=sys.stderr)
        return 2
    summary = summarize(snap)
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_text(summary))
    return 0
