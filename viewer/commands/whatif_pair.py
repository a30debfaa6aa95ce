"""``vramscope whatif A --with B --batch N --sizes NA,NB``: the run at another size of one
knob, predicted from two recordings of the program at two sizes of it.

Kept beside :mod:`.whatif` (which parses the arguments): the model's one function is
:func:`..model.remedies.two_recordings.predict_pair`; this module checks the options,
loads both files and renders the rows (the what-if rows, ``peak_reserved_bytes``,
``oom``, ..., plus the pair's keys: ``knob``, ``matching``, ``peak_reserved_estimate``)
and the what-if table with a line saying what was matched.  The MCP tool ``whatif`` and
``Recording.whatif(with_=...)`` render the same :func:`pair_answer`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from fractions import Fraction
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from .answers import Answer, print_answer

if TYPE_CHECKING:
    from ..model.core.progress import Progress
    from ..model.remedies.two_recordings import PairPrediction

#: The knob's name in words (the model's :data:`~..model.remedies.two_recordings.KNOB_WORDS`,
#: here too so that checking the options loads no model).
KNOB_WORDS = {"batch": "batch", "seq": "sequence length"}
KNOB_PLURAL = {"batch": "batch sizes", "seq": "sequence lengths"}


#: How each front end names the question's parameters in its errors: the CLI's options,
#: the MCP tool's arguments, the Python API's keywords.
CLI_NAMES = {
    "with": "--with",
    "batch": "--batch",
    "batch_scale": "--batch-scale",
    "seq": "--seq",
    "seq_scale": "--seq-scale",
    "sizes": "--sizes",
}
MCP_NAMES = {
    "with": "with_file",
    "batch": "batch",
    "batch_scale": "batch_scale",
    "seq": "seq",
    "seq_scale": "seq_scale",
    "sizes": "sizes",
}
API_NAMES = {**MCP_NAMES, "with": "other"}


class PairOptionError(ValueError):
    """A combination of options the pair question cannot take (one line)."""


def error_words(exc: Exception, names: dict[str, str] = CLI_NAMES) -> str:
    """A :class:`~..model.remedies.two_recordings.PairError`'s line with the parameter
    that would answer it in the front end's own name (``names``)."""
    needs = getattr(exc, "needs", None)
    return f"{exc} ({names[needs]} A,B)" if needs in names else str(exc)


def parse_sizes(text: str | None, names: dict[str, str] = CLI_NAMES) -> tuple[int, int] | None:
    """``--sizes 4,8`` -> (4, 8): the knob's value of A and of B (None: not given);
    :class:`PairOptionError` for anything else (the parameters named by ``names``)."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        got = tuple(int(p) for p in parts)
    except ValueError:
        got = ()
    sz = names["sizes"]
    if len(got) != 2 or min(got) <= 0:
        raise PairOptionError(f"{sz} takes two positive whole numbers, A's and B's: {text!r}")
    if got[0] == got[1]:
        raise PairOptionError(f"{sz}: A and B must be recorded at two sizes: {text!r}")
    return got[0], got[1]


def question(
    batch: int | None,
    batch_scales: list[float],
    seq: int | None,
    seq_scales: list[float],
    sizes: tuple[int, int] | None,
    names: dict[str, str] = CLI_NAMES,
) -> tuple[str, list[Fraction | int], bool]:
    """(knob, the targets, relative): what the options ask of two recordings;
    :class:`PairOptionError` for a combination they cannot answer, naming the parameters
    as the front end does (``names``: :data:`CLI_NAMES`, :data:`MCP_NAMES`,
    :data:`API_NAMES`)."""
    nm = names
    batch_asked = batch is not None or bool(batch_scales)
    seq_asked = seq is not None or bool(seq_scales)
    if batch_asked and seq_asked:
        raise PairOptionError(
            f"{nm['with']} predicts along one knob: give {nm['batch']}/{nm['batch_scale']} "
            f"or {nm['seq']}/{nm['seq_scale']}"
        )
    if not (batch_asked or seq_asked):
        raise PairOptionError(
            f"{nm['with']} needs the size to predict: {nm['batch']} N or {nm['seq']} N "
            f"(with {nm['sizes']} A,B), or {nm['batch_scale']} F / {nm['seq_scale']} F "
            "relative to A"
        )
    knob = "batch" if batch_asked else "seq"
    n = batch if batch_asked else seq
    scales = batch_scales if batch_asked else seq_scales
    if n is not None and scales:
        raise PairOptionError(f"{nm[knob]} N and {nm[knob + '_scale']} F ask the same: give one")
    if n is not None:
        if sizes is None:
            raise PairOptionError(
                f"{nm[knob]} {n} with {nm['with']} needs the two recordings' "
                f"{KNOB_PLURAL[knob]}: {nm['sizes']} A,B (or ask {nm[knob + '_scale']} F "
                "relative to A)"
            )
        return knob, [n], False
    return knob, [Fraction(f).limit_denominator(1 << 20) for f in scales], True


def pair_answer(
    case_a,
    case_b,
    knob: str,
    targets: list,
    relative: bool,
    sizes: tuple[int, int] | None = None,
    confs: list[str] | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
    device: int | None = None,
) -> Answer:
    """The rows of every target x setting, predicted from ``case_a`` and ``case_b``
    (prepared what-if cases): the one pipeline the CLI, the MCP tool ``whatif`` (with
    ``with_file``) and ``Recording.whatif(with_=...)`` render.
    :class:`~..model.remedies.two_recordings.PairError` for a question they cannot answer."""
    from ..model.core.units import format_bytes as fb
    from ..model.remedies import batch_scale
    from ..model.remedies.two_recordings import predict_pair
    from ..model.whatif.predictions import (
        TABLE_COLUMNS,
        Prediction,
        aligned,
        table_head,
        table_row,
        window_notes,
    )
    from .device_choice import device_fields, device_line

    confs = confs or ["recorded"]
    given = SimpleNamespace(device=device)
    dev = device_fields(case_a, given)
    preds: list[PairPrediction] = []
    matched = None
    for tgt in targets:
        for conf in confs:
            p = predict_pair(
                case_a,
                case_b,
                knob,
                target=None if relative else tgt,
                scale=tgt if relative else None,
                sizes=sizes,
                conf=conf,
                limit=limit,
                progress=progress,
                matched=matched,
            )
            matched = p.match
            preds.append(p)
    rows: list[dict[str, Any]] = []
    table: list[tuple[str, ...]] = [TABLE_COLUMNS]
    notes: list[str] = []
    for p in preds:
        assert p.case is not None
        lim = case_a.limit if limit is None else limit
        pred = Prediction(p.label(), p.case.config_of(p.conf), lim, p.result, program_changed=True)
        d = pred.to_dict(p.case)
        d.update(p.fields())
        d.update(dev)
        rows.append(d)
        peak = fb(d["peak_reserved_bytes"])
        span = (
            batch_scale.range_words(p.low, p.high)
            if p.low is not None and p.high is not None
            else None
        )
        if span:
            peak = span
        if d["oom"] is not None:
            peak += " until the OOM"
            notes.append(
                f"  {p.label()}: runs out of memory at event {d['oom']['event']}: "
                f"{d['oom']['verdict']}"
            )
        table.append(table_row(p.case, pred, d, peak))
        if p.is_estimate:
            notes.append(
                f"  {p.label()}: estimate {fb(p.low or 0)} to {fb(p.high or 0)}, "
                f"{fb(d['peak_reserved_bytes'])} at the fitted sizes: " + "; ".join(p.why())
            )
    first = preds[0]
    line = device_line(case_a, given)
    lines = [
        *([line] if line else []),
        table_head(case_a, limit),
        f"from two recordings: {first.match.words()}; "
        f"{first.affine} sized affinely in the {KNOB_WORDS[knob]}"
        + (f", {first.superlinear} faster than it" if first.superlinear else ""),
    ]
    if relative:
        lines.append(
            f"B/A = {float(first.ratio):g}: inferred from the matched allocations "
            f"({first.ratio_agree} of the {first.ratio_changed} that changed size grew by "
            f"it); give --sizes A,B to predict absolute {KNOB_PLURAL[knob]}"
        )
    lines += aligned(table)
    lines += notes
    lines += window_notes(first.case, []) if first.case is not None else []
    lines.append('"vs recorded" compares with recording A')
    return Answer(rows, "\n".join(lines), [], preds)


def run(
    args: argparse.Namespace,
    confs: list[str],
    load: Callable[[argparse.Namespace, Any], Any],
    reported: Callable[[argparse.Namespace, Any, Callable[[], Any]], Any],
) -> int:
    """``vramscope whatif A --with B ...``: check the options, load both files (``load``:
    :func:`.whatif.load_case`), print the answer (``reported``: :func:`.whatif.reported`,
    which turns an unreadable file into one line and exit 2)."""
    from ..model.remedies.two_recordings import PairError
    from .tty_progress import TerminalProgress

    try:
        if not args.with_file:
            raise PairOptionError("--sizes goes with --with B (a second recording)")
        if args.recommend:
            raise PairOptionError("--with does not take --recommend: give the settings (--conf)")
        sizes = parse_sizes(args.sizes)
        knob, targets, relative = question(
            args.batch, args.batch_scale, args.seq, list(args.seq_scale or []), sizes
        )
    except PairOptionError as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return 2
    with TerminalProgress("vramscope whatif") as tp:
        cases = []
        for path in (args.file, args.with_file):
            one = argparse.Namespace(**{**vars(args), "file": path})
            case = load(one, tp)
            if isinstance(case, int):
                return case
            cases.append(case)

        def work() -> Answer:
            return pair_answer(
                cases[0],
                cases[1],
                knob,
                targets,
                relative,
                sizes,
                confs,
                args.memory_limit,
                device=args.device,
            )

        try:
            got = reported(args, tp, work)
        except PairError as exc:
            tp.clear()
            print(f"vramscope: error: {error_words(exc)}", file=sys.stderr)
            return 2
        if isinstance(got, int):
            return got
    return print_answer(got, args.json)
