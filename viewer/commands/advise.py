"""``vramscope advise FILE [--memory-limit SIZE] [--batch N] [--json]``: what would make it fit.

Lists the remedies that apply to the recording (smaller batch, allocator
settings, freeing what is kept, checkpointing, autocast, 8-bit optimizer),
each with its predicted peak reserved, the saving, whether it was simulated
through the allocator model or estimated, the one-line change and where in
the code; and the largest batch (scale) that fits the memory limit.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from ..model.core.progress import Progress, stage_words
from .answers import Answer
from .arg_types import add_device_option, positive_int
from .device_choice import device_fields, device_line
from .tty_progress import TerminalProgress
from .whatif import case_command, glue_values, parse_bytes

# Run as the process (cli.main): it ends right after the answer, without freeing the
# case's columns, the evidence and every remedy's curve one by one.
EXIT_WITHOUT_TEARDOWN = True


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
        "--seq",
        type=positive_int,
        metavar="N",
        help="the sequence length the recording ran with: a sequence model's answer then "
        "names the longest sequence that fits in tokens (else as a scale)",
    )
    add_device_option(p, "analyse")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-cache", action="store_true", help="parse the file even if cached")
    return p


def main(argv: list[str]) -> int:
    argv = glue_values(argv)
    args = parser().parse_args(argv)
    return case_command(
        "advise",
        args,
        argv,
        lambda case, tp: answer(
            case, args.file, args.batch, args.memory_limit, args.device, _stages(tp), args.seq
        ),
        # advise() simulates the recorded run beside its judgement.
        recorded_first=False,
    )


def answer(
    case,
    file: str,
    batch: int | None = None,
    limit: int | None = None,
    device: int | None = None,
    progress: Progress | None = None,
    seq: int | None = None,
) -> Answer:
    """The advice for a prepared what-if ``case`` of ``file`` (``device``: as the caller
    named it, None when chosen): the one pipeline the CLI, the MCP tool ``advise`` and
    ``Recording.advise()`` render; the :class:`~.answers.Answer`'s ``result`` is the
    :class:`~..model.remedies.advise.Advice` itself.  :class:`~..model.SnapshotError` for
    a recording the model cannot follow."""
    from ..model.remedies.advise import advise, format_text

    # The self-check's run is advise()'s too (cached in the case), simulated there beside
    # the judgement.
    result = advise(case, batch, limit, progress)
    check = case.self_check()
    given = SimpleNamespace(device=device)
    data = {"file": file, **device_fields(case, given)}
    data.update(result.to_dict())
    text = format_text(result)
    if result.batch_not_judged is None:
        # A sequence model's longest sequence, beside the largest batch (same limit).
        from ..model.remedies.seq_scale import longest_seq

        longest = longest_seq(case, result.memory_limit_bytes, seq)
        if longest is not None:
            data["longest_seq_that_fits"] = longest.to_dict()
            text = _beside_batch(text, longest.words())
    line = device_line(case, given)
    text = (line + "\n" if line else "") + text
    return Answer(data, text, check.warnings(), result)


def _beside_batch(text: str, line: str) -> str:
    """``text`` with ``line`` after its largest-batch line (at the end without one)."""
    lines = text.split("\n")
    for i, old in enumerate(lines):
        if old.startswith(("largest batch", "no batch size fits")):
            lines.insert(i + 1, line)
            return "\n".join(lines)
    return text + "\n" + line


def _stages(tp: TerminalProgress) -> Progress | None:
    """advise()'s progress as "searching the largest batch that fits  40%"."""
    if not tp.enabled:
        return None
    return Progress(lambda stage, f: tp.show(stage_words(stage), f))
