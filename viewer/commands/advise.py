"""``vramscope advise FILE [--memory-limit SIZE] [--batch N] [--json]``: what would make it fit.

Lists the remedies that apply to the recording (smaller batch, allocator
settings, freeing what is kept, checkpointing, autocast, 8-bit optimizer),
each with its predicted peak reserved, the saving, whether it was simulated
through the allocator model or estimated, the one-line change and where in
the code; and the largest batch (scale) that fits the memory limit.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ..model.core.progress import Progress
from .arg_types import positive_int
from .device_choice import device_fields, device_line
from .tty_progress import TerminalProgress
from .whatif import glue_values, load_case, parse_bytes, reported


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope advise",
        description="Rank the changes that would make a recorded run fit by predicted peak "
        "reserved memory: simulated through a model of PyTorch's caching allocator where the "
        "recording allows it, estimated from what the memory is otherwise.",
        epilog="example: vramscope advise oom.pickle --batch 16 --memory-limit 10GiB",
    )
    p.add_argument("file", help="snapshot with a trace (recorded with _record_memory_history)")
    p.add_argument(
        "--memory-limit",
        type=parse_bytes,
        metavar="SIZE",
        help="bytes the process may reserve (10GB, 9.5GiB); default: the "
        "recording's, from the sidecar or inferred, else the GPU's total memory",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        metavar="N",
        help="the batch size the recording ran with: the answer then names the "
        "largest batch that fits (largest_batch_that_fits)",
    )
    p.add_argument(
        "--device",
        type=int,
        metavar="N",
        help="device to analyse (default: the "
        "last OOM's, else the one with the highest reserved peak)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-cache", action="store_true", help="parse the file even if cached")
    return p


def main(argv: list[str]) -> int:
    argv = glue_values(argv)
    args = parser().parse_args(argv)
    if args.file.startswith("ssh://"):  # run where the file is when vramscope is there
        from .remote_run import answered_there

        code = answered_there("advise", args, argv)
        if code is not None:
            return code
    # On a terminal, a progress line on stderr (dozens of simulations); piped: none.
    with TerminalProgress("vramscope advise") as tp:
        case = load_case(args, tp)
        if isinstance(case, int):
            return case

        def run():
            case.simulate("recorded", progress=tp.stage("self-check at the recorded settings"))
            return answer(case, args.file, args.batch, args.memory_limit, args.device, _stages(tp))

        # An inconsistent recording: one line naming where (SnapshotError), no traceback.
        got = reported(args, tp, run)
        if isinstance(got, int):
            return got
    for warning in got.warnings:
        print(f"vramscope: warning: {warning}", file=sys.stderr)
    if args.json:
        json.dump(got.data, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(got.text)
    return 0


@dataclass(frozen=True)
class Answer:
    """What ``vramscope advise`` answers: ``data`` (its ``--json``), ``text`` (what it
    prints without), ``warnings`` (its stderr lines, without the ``vramscope: warning:``)
    and the :class:`~..model.remedies.advise.Advice` itself."""

    data: dict
    text: str
    warnings: list[str]
    advice: Any


def answer(
    case,
    file: str,
    batch: int | None = None,
    limit: int | None = None,
    device: int | None = None,
    progress: Progress | None = None,
) -> Answer:
    """The advice for a prepared what-if ``case`` of ``file`` (``device``: as the caller
    named it, None when chosen): the one pipeline the CLI, the MCP tool ``advise`` and
    ``Recording.advise()`` render.  :class:`~..model.SnapshotError` for a recording the
    model cannot follow."""
    from ..model.remedies.advise import advise, format_text

    case.simulate("recorded")  # (cached in the case: the self-check's run)
    check = case.self_check()
    result = advise(case, batch, limit, progress)
    given = SimpleNamespace(device=device)
    data = {"file": file, **device_fields(case, given)}
    data.update(result.to_dict())
    line = device_line(case, given)
    text = (line + "\n" if line else "") + format_text(result)
    warnings = (
        []
        if check.ok
        else [
            f"the allocator model does not reproduce this recording ({check.first_difference}); "
            "predictions are approximate"
        ]
    )
    return Answer(data, text, warnings, result)


_STAGE_TEXT = {
    "judge": "judging how each allocation scales with the batch",
    "search": "searching the largest batch that fits",
    "allocator": "simulating allocator settings",
}


def _stages(tp: TerminalProgress) -> Progress | None:
    """advise()'s progress as "searching the largest batch that fits  40%"."""
    if not tp.enabled:
        return None
    return Progress(lambda stage, f: tp.show(_STAGE_TEXT.get(stage, stage), f))
