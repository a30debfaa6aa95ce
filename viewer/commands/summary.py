"""``vramscope summary FILE [--json]``: the analysis, headless.

``vramscope summary DIR [--json]``: a directory of per-rank snapshots (written
by the capture module under torchrun): one entry per rank, outliers flagged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..model import SnapshotError
from ..model.load import load_snapshot
from ..model.summary import format_text, summarize
from ..model.timeline import build_timeline


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope summary",
        description="Print a snapshot's memory figures (equal to torch.cuda.memory_stats() "
        "at the same instant) and, after an OOM, why it happened.",
    )
    p.add_argument("file", help="snapshot file (.pickle, gzip/xz, or JSON), or a directory "
                   "of per-rank snapshots (one entry per rank, outlier ranks flagged)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--at", type=int, metavar="EVENT",
                   help="report the state after trace event EVENT (0-based, of --device)")
    p.add_argument("--no-cache", action="store_true",
                   help="parse the file even if its columns are cached")
    p.add_argument("--device", type=int, metavar="N",
                   help="device whose trace --at indexes (default: the first with events)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if os.path.isdir(args.file):
        return _directory(args)
    try:
        snap = load_snapshot(args.file, use_cache=not args.no_cache)
    except SnapshotError as exc:
        print(f"vramscope: error: {args.file}: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"vramscope: error: {args.file}: not enough memory to load it", file=sys.stderr)
        return 2
    timeline = build_timeline(snap)
    at = None
    if args.at is not None:
        device = args.device if args.device is not None else min(timeline.devices, default=None)
        rep = timeline.replay(device) if device is not None else None
        if rep is None or not len(rep):
            print(f"vramscope: error: {args.file}: no trace events"
                  + (f" on device {device}" if device is not None else ""), file=sys.stderr)
            return 2
        k = args.at if args.at >= 0 else len(rep) + args.at
        if not 0 <= k < len(rep):
            print(f"vramscope: error: --at {args.at} is outside 0..{len(rep) - 1}",
                  file=sys.stderr)
            return 2
        at = (device, k)
    summary = summarize(snap, timeline, at)
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_text(summary))
    return 0


def _directory(args) -> int:
    """One entry per rank of a directory written by the capture module."""
    from ..model import ranks

    if args.at is not None:
        print("vramscope: error: --at needs a snapshot file, not a directory", file=sys.stderr)
        return 2
    try:
        overview = ranks.load_ranks(args.file, use_cache=not args.no_cache)
    except SnapshotError as exc:
        print(f"vramscope: error: {args.file}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(overview.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(ranks.format_text(overview))
    return 0
