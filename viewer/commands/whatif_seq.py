"""``vramscope whatif FILE --seq-scale X``: the recorded run at another sequence length.

Kept beside :mod:`.whatif` (which parses the arguments and loads the case), like
:mod:`.whatif_batch`: each ``--seq-scale`` is combined with each ``--conf``; rows are the
what-if rows (``peak_reserved_bytes``, ``oom``, ...) plus ``seq_scale`` (and ``seq`` when
the recorded length was given), always labelled estimates with their range, and the
judgement per rule (``sequence_scaling`` in JSON, a table in text).
"""

from __future__ import annotations

from fractions import Fraction

from ..model import SnapshotError
from ..model.core.progress import stage_words
from ..model.core.units import format_bytes as fb
from ..model.core.units import plural
from ..model.remedies import seq_scale
from ..model.remedies.batch_ranges import range_words
from ..model.whatif.predictions import (
    TABLE_COLUMNS,
    Prediction,
    aligned,
    table_row,
)
from .whatif_batch import scaled_answer, table_text

#: The refusal on the command line: the model's words and how to overrule them.
NO_SEQUENCE = seq_scale.NO_SEQUENCE + " (give --seq N to judge it as one anyway)"


def seq_label(scale: float, seq: int | None) -> str:
    """``seq x0.5`` or, with the recorded length known, ``seq x0.5 (128)``."""
    text = f"seq x{scale:g}"
    if seq:
        t = Fraction(scale).limit_denominator(1 << 20) * seq
        text += f" ({t.numerator})" if t.denominator == 1 else f" ({float(t):.1f})"
    return text


def judged(case, seq: int | None = None) -> seq_scale.SeqJudgement:
    """The sequence judgement of ``case``; :class:`~..model.SnapshotError` (one line,
    exit 2) for a recording without a sequence axis unless ``seq`` says it has one."""
    j = seq_scale.judge(case, seq)
    if not j.is_sequence_model and not seq:
        raise SnapshotError(NO_SEQUENCE)
    return j


def judgement_lines(j: seq_scale.SeqJudgement) -> list[str]:
    """How the allocations were judged, per rule, as text."""
    rows: list[tuple[str, ...]] = [("grows", "rule", "allocations", "requested", "why")]
    for r in j.summary():
        rows.append(
            (
                r["grows"],
                r["rule"],
                str(r["allocations"]),
                fb(r["requested_bytes"]),
                r["reason"],
            )
        )
    head = "with the sequence (attention: " + (j.attention or "not seen in the frames") + "):"
    return [head, *("  " + line for line in aligned(rows))]


def seq_rows(
    case,
    confs: list[str],
    scales: list[float],
    seq: int | None = None,
    limit: int | None = None,
    recommend: bool = False,
    device: int | None = None,
    tp=None,
) -> tuple[list[dict], str]:
    """The rows of every scale in ``scales`` x setting in ``confs``: (``whatif
    --seq-scale ... --json``'s list, its text)."""
    show = tp.show if tp is not None and tp.enabled else (lambda *a, **k: None)
    show(stage_words("judge"), None, force=True)
    j = judged(case, seq)
    summary = j.summary()
    preds: list[Prediction] = []
    extra: list[dict] = []
    pairs = [(f, conf) for f in scales for conf in confs]
    for k, (f, conf) in enumerate(pairs):
        show(f"simulating {k + 1}/{len(pairs)}: seq x{f:g} {conf or '(defaults)'}", k / len(pairs))
        cfg = case.config_of(conf)
        est, result = seq_scale.estimate_range(case, j, f, cfg, limit)
        label = seq_label(f, seq) + ("" if conf == "recorded" else f" {conf or '(defaults)'}")
        label += " (estimate)"
        preds.append(
            Prediction(
                label, cfg, case.limit if limit is None else limit, result, program_changed=True
            )
        )
        info: dict = {
            "seq_scale": f,
            "conf": conf,
            "peak_reserved_is_estimate": True,
            "uncertain_allocations": est.square_doubt + est.doubtful,
            "peak_reserved_sensitivity_bytes": [est.low, est.high],
            "peak_reserved_estimate": est.to_dict(),
            "attention": j.attention,
        }
        if seq:
            info["seq"] = float(f * seq)
        extra.append(info)
    if tp is not None:
        tp.clear()
    return scaled_answer(
        case,
        preds,
        extra,
        format_table,
        ("sequence_scaling", summary),
        "\n".join(judgement_lines(j)),
        recommend=recommend,
        device=device,
        limit=limit,
    )


def format_table(
    case, preds: list[Prediction], extra: list[dict], ranked: bool = False, limit: int | None = None
) -> str:
    """The sequence rows as text: each row's range, "until the OOM" where it runs out."""
    rows: list[tuple[str, ...]] = [TABLE_COLUMNS]
    notes = []
    for p, info in zip(preds, extra):
        d = p.to_dict(case)
        est = info["peak_reserved_estimate"]
        peak = range_words(est["low_bytes"], est["high_bytes"]) or fb(d["peak_reserved_bytes"])
        if d["oom"] is not None:
            peak += " until the OOM"
            notes.append(
                f"  {p.conf}: runs out of memory at event {d['oom']['event']}: "
                f"{d['oom']['verdict']}"
            )
        rows.append(table_row(case, p, d, peak))
        notes.append(
            f"  {p.conf}: estimate {fb(est['low_bytes'])} to {fb(est['high_bytes'])} over "
            f"{plural(est['draws'], 'simulated draw')}: {est['why_range']}; "
            f"{fb(d['peak_reserved_bytes'])} as judged"
        )
    return table_text(case, preds, rows, notes, ranked, limit)
