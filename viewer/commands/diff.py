"""``vramscope diff A B [--json]``: what grew between two snapshots."""

from __future__ import annotations

import argparse
import sys

from ..model import SnapshotError
from ..model.io.remote import load_any
from ..model.replay.timeline import build_timeline
from ..model.reports import aligned
from ..model.reports.diff import diff_snapshots, format_text
from .answers import Answer, print_answer


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
    p.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="stacks listed by growth and by shrink (default: %(default)s)",
    )
    p.add_argument(
        "--by",
        choices=("stack", "line", "function"),
        default="stack",
        help="match allocations across the files by their whole (user) stack "
        "(default), by the allocating line only, or by the allocating "
        "function only (ignores line numbers: survives code edits)",
    )
    p.add_argument(
        "--all-frames",
        action="store_true",
        help="key stacks by every frame, torch internals included (default: your own frames only)",
    )
    p.add_argument(
        "--no-peaks",
        action="store_true",
        help="skip replaying the traces for the peaks' deltas (and the aligned comparison)",
    )
    p.add_argument(
        "--change",
        metavar="REMEDY",
        help="the change made between A and B, as advise names it "
        "(smaller_batch, free_kept, gradient_checkpointing, bf16_autocast, "
        "8bit_optimizer, set_to_none, allocator:SETTINGS): the comparison "
        "says how far advise's prediction on A was from B (default: the "
        "change the files show - other allocator settings, checkpointing, "
        "a leak gone)",
    )
    p.add_argument(
        "--no-cache", action="store_true", help="parse the files even if their columns are cached"
    )
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
    got = answer(
        a,
        b,
        change=args.change,
        top=args.top,
        by=args.by,
        all_frames=args.all_frames,
        peaks=not args.no_peaks,
    )
    return print_answer(got, args.json)


def answer(
    a,
    b,
    change: str | None = None,
    top: int = 10,
    by: str = "stack",
    all_frames: bool = False,
    peaks: bool = True,
    stages=None,
) -> Answer:
    """The comparison of the loaded snapshots ``a`` (before) and ``b`` (after): the one
    pipeline the CLI, the MCP tool ``diff`` and ``Recording.diff()`` render.  ``by``:
    "stack", "line" or "function" (``--by``); ``stages``: the MCP tool's progress
    (``slice(lo, hi, label)`` and ``at(fraction, label)``), or None."""

    def part(lo: float, hi: float, label: str):
        return stages.slice(lo, hi, label) if stages is not None else None

    def at(fraction: float, label: str) -> None:
        if stages is not None:
            stages.at(fraction, label)

    timelines = (
        None
        if not peaks
        else (
            build_timeline(a, part(0.4, 0.55, "replaying A")),
            build_timeline(b, part(0.55, 0.7, "replaying B")),
        )
    )
    at(0.7, "comparing the stacks")
    diff = diff_snapshots(
        a,
        b,
        fold=not all_frames,
        lines=by != "function",
        depth=None if by == "stack" else 1,
        timelines=timelines,
    )
    al = None
    if timelines is not None:
        at(0.8, "aligning the iterations")
        al = aligned.align(a, b, *timelines)
        chosen = change or (al.detected_change if al is not None else None)
        if al is not None and chosen:
            al.prediction_error = aligned.prediction_error(
                a,
                al.b_peak_reserved,
                chosen,
                device=al.devices[0],
                progress=part(0.85, 1.0, f"advise's prediction for {chosen}"),
            )
            if al.prediction_error is None:
                al.notes.append(f"advise makes no prediction for {chosen} on A")
    data = diff.to_dict(top=top)
    text = format_text(diff, top=top)
    if al is not None:
        data.update(al.to_dict(top=max(top, 1)))
        text += "\n\n" + "\n".join(aligned.format_text(al, top=top))
    return Answer(data, text)
