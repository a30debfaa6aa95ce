"""``vramscope diff A B [--json]``: what grew between two snapshots."""

from __future__ import annotations

import argparse
import json
import sys

from ..model import SnapshotError
from ..model.reports import aligned
from ..model.reports.diff import diff_snapshots, format_text
from ..model.io.remote import load_any
from ..model.replay.timeline import build_timeline


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope diff",
        description="Compare two snapshots (A before, B after): the differences of their "
        "memory figures (equal to the differences of torch.cuda.memory_stats()), per device "
        "and pool, and live bytes by allocation stack: added, removed, changed, sorted by "
        "growth.",
    )
    p.add_argument("a", metavar="A", help="the earlier (or baseline) snapshot")
    p.add_argument("b", metavar="B", help="the later (or changed) snapshot")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="stacks listed by growth and by shrink (default: %(default)s)")
    p.add_argument("--by", choices=("stack", "line", "function"), default="stack",
                   help="match allocations across the files by their whole (user) stack "
                        "(default), by the allocating line only, or by the allocating "
                        "function only (ignores line numbers: survives code edits)")
    p.add_argument("--all-frames", action="store_true",
                   help="key stacks by every frame, torch internals included (default: "
                        "your own frames only)")
    p.add_argument("--no-peaks", action="store_true",
                   help="skip replaying the traces for the peaks' deltas (and the aligned "
                        "comparison)")
    p.add_argument("--change", metavar="REMEDY",
                   help="the change made between A and B, as advise names it "
                        "(smaller_batch, free_kept, gradient_checkpointing, bf16_autocast, "
                        "8bit_optimizer, set_to_none, allocator:SETTINGS): the comparison "
                        "says how far advise's prediction on A was from B (default: the "
                        "change the files show - other allocator settings, checkpointing, "
                        "a leak gone)")
    p.add_argument("--no-cache", action="store_true",
                   help="parse the files even if their columns are cached")
    return p


def _load(path: str, use_cache: bool):
    try:
        return load_any(path, use_cache=use_cache), None
    except SnapshotError as exc:
        return None, f"{path}: {exc}"
    except MemoryError:
        return None, f"{path}: not enough memory to load it"


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.top < 0:
        print("vramscope: error: --top must be at least 0", file=sys.stderr)
        return 2
    snaps = []
    for path in (args.a, args.b):
        snap, error = _load(path, not args.no_cache)
        if error:
            print(f"vramscope: error: {error}", file=sys.stderr)
            return 2
        snaps.append(snap)
    a, b = snaps
    timelines = None if args.no_peaks else (build_timeline(a), build_timeline(b))
    diff = diff_snapshots(a, b, fold=not args.all_frames, lines=args.by != "function",
                          depth=None if args.by == "stack" else 1, timelines=timelines)
    al = None
    if timelines is not None:
        al = aligned.align(a, b, *timelines)
        change = args.change or (al.detected_change if al is not None else None)
        if al is not None and change:
            al.prediction_error = aligned.prediction_error(a, al.b_peak_reserved, change,
                                                           device=al.devices[0])
            if al.prediction_error is None:
                al.notes.append(f"advise makes no prediction for {change} on A")
    if args.json:
        out = diff.to_dict(top=args.top)
        if al is not None:
            out.update(al.to_dict(top=max(args.top, 1)))
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_text(diff, top=args.top))
        if al is not None:
            print()
            print("\n".join(aligned.format_text(al, top=args.top)))
    return 0
