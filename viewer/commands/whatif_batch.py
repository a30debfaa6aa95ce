"""``vramscope whatif FILE --batch-scale F``: the recorded run at another batch size.

Kept beside :mod:`.whatif` (which parses the arguments and loads the case):
each ``--batch-scale`` is combined with each ``--conf``; rows are the
what-if rows (``peak_reserved_bytes``, ``oom``, ...) plus ``batch_scale``
(and ``batch`` when the recorded one was given), and the judgement of every
allocation is summarised per rule (``scaling`` in JSON, a table in text).
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

from ..model.core import parallel
from ..model.core.progress import Progress, stage_words
from ..model.core.units import format_bytes as fb
from ..model.core.units import plural
from ..model.remedies import batch_scale, evidence, explain, scaling
from ..model.whatif import native_sim
from ..model.whatif.predictions import (
    TABLE_COLUMNS,
    Prediction,
    aligned,
    rank,
    table_head,
    table_row,
    window_notes,
)
from .device_choice import device_fields, device_line


def scale_label(scale: float, batch: int | None) -> str:
    """``batch x0.5`` or, with the recorded batch known, ``batch x0.5 (16)``."""
    text = f"batch x{scale:g}"
    if batch:
        b = Fraction(scale).limit_denominator(1 << 20) * batch
        text += f" ({b.numerator})" if b.denominator == 1 else f" ({float(b):.1f})"
    return text


def batch_rows(
    case,
    confs: list[str],
    scales: list[float],
    batch: int | None = None,
    limit: int | None = None,
    recommend: bool = False,
    device: int | None = None,
    tp=None,
) -> tuple[list[dict], str]:
    """The rows of every scale in ``scales`` x setting in ``confs``: (``whatif
    --batch-scale ... --json``'s list, its text); ``device`` as the caller named it."""
    show = tp.show if tp is not None and tp.enabled else (lambda *a, **k: None)
    show(stage_words("judge"), None, force=True)
    evd = evidence.gather(case)
    judgement = scaling.judge(case, batch, evd)
    rows_explain = explain.rule_table(case, judgement, evd)
    preds: list[Prediction] = []
    extra: list[dict] = []
    pairs = [(f, conf) for f in scales for conf in confs]
    total = len(pairs)
    scaled = {f: batch_scale.scaled_case(case, judgement, f) for f in scales}
    # The rows' runs are independent: side by side on every core (serially for a small
    # case); each estimate's draws are in turn (estimate_range).
    show(f"simulating {plural(total, 'batch row')}", 0.0, force=True)
    results = parallel.pmap(
        lambda pair: scaled[pair[0]].simulate(case.config_of(pair[1]), limit),
        pairs,
        work=parallel.simulation_work(len(case.requests), native_sim.use_native()),
        progress=Progress(lambda _s, x: show(f"simulating {plural(total, 'batch row')}", x / 2)),
    )
    for k, ((f, conf), result) in enumerate(zip(pairs, results)):
        show(
            f"estimating {k + 1}/{total}: batch x{f:g} {conf or '(defaults)'}", 0.5 + k / total / 2
        )
        cfg = case.config_of(conf)
        # Library workspaces make the figure an estimate (the model's one rule, as advise
        # and the GUI label it): the range says how far.
        estimate = batch_scale.is_estimate(judgement, f)
        est = batch_scale.estimate_range(case, judgement, f, cfg, limit) if estimate else None
        label = scale_label(f, batch) + ("" if conf == "recorded" else f" {conf or '(defaults)'}")
        if estimate:
            label += " (estimate)"
        p = Prediction(
            label, cfg, case.limit if limit is None else limit, result, program_changed=True
        )
        preds.append(p)
        info = {
            "batch_scale": f,
            "conf": conf,
            "peak_reserved_is_estimate": estimate,
            "uncertain_allocations": est.workspaces if est else 0,
            "peak_reserved_sensitivity_bytes": [est.low, est.high] if est else None,
            "peak_reserved_estimate": est.to_dict() if est else None,
        }
        if batch:
            info["batch"] = float(f * batch)
        extra.append(info)
    if tp is not None:
        tp.clear()
    return scaled_answer(
        case,
        preds,
        extra,
        format_table,
        ("scaling", rows_explain),
        explain.format_rule_table(rows_explain),
        recommend=recommend,
        device=device,
        limit=limit,
    )


def scaled_answer(
    case,
    preds: list[Prediction],
    extra: list[dict],
    table,
    judgement: tuple[str, object],
    judgement_text: str,
    *,
    recommend: bool,
    device: int | None,
    limit: int | None,
) -> tuple[list[dict], str]:
    """(rows, text) of the recorded run scaled along one axis (batch or sequence): ranked
    by predicted peak when ``recommend``; each row the prediction's fields, its scale's
    (``extra``), the device's and ``judgement`` (a key and the per-rule explanation); the
    text the device line, ``table(case, preds, extra, ranked=, limit=)`` and
    ``judgement_text``."""
    if recommend:
        order = rank(preds)
        extra = [extra[preds.index(p)] for p in order]
        preds = order
    given = SimpleNamespace(device=device)
    dev = device_fields(case, given)
    key, explanation = judgement
    out = []
    for p, info in zip(preds, extra):
        d = p.to_dict(case)
        d.update(info)
        d.update(dev)
        d[key] = explanation
        out.append(d)
    line = device_line(case, given)
    text = (
        (line + "\n" if line else "")
        + table(case, preds, extra, ranked=recommend, limit=limit)
        + "\n"
        + judgement_text
    )
    return out, text


def table_text(
    case,
    preds: list[Prediction],
    rows: list[tuple[str, ...]],
    notes: list[str],
    ranked: bool,
    limit: int | None,
) -> str:
    """A scaled what-if's table: its head, the aligned ``rows``, their ``notes``, what the
    trace's window cannot show and, when ``ranked``, how the rows are ordered."""
    lines = [table_head(case, limit), *aligned(rows)]
    lines.extend(notes)
    lines.extend(window_notes(case, preds))
    if ranked:
        lines.append("ranked by predicted peak reserved (lowest first; OOMs last)")
    return "\n".join(lines)


def format_table(
    case, preds: list[Prediction], extra: list[dict], ranked: bool = False, limit: int | None = None
) -> str:
    """The batch rows as text: each row's peak (one value, or the range the library's
    workspace choices span, marked an estimate), and for a row that runs out of memory
    "out of memory" where a percentage against the recorded run would read as a saving."""
    rows: list[tuple[str, ...]] = [TABLE_COLUMNS]
    notes = []
    for p, info in zip(preds, extra):
        d = p.to_dict(case)
        oom = d["oom"]
        est = info.get("peak_reserved_estimate")
        peak = fb(d["peak_reserved_bytes"])
        span = batch_scale.range_words(est["low_bytes"], est["high_bytes"]) if est else None
        if span:
            # The row's label says "(estimate)"; a range whose ends read the same is one
            # value.
            peak = span
        if oom is not None:
            peak += " until the OOM"
        rows.append(table_row(case, p, d, peak))
        if oom is not None:
            notes.append(
                f"  {p.conf}: runs out of memory at event {oom['event']}: {oom['verdict']}"
            )
        if est:
            n = est.get("in_doubt") or plural(est["workspace_allocations"], "library workspace")
            if span:
                notes.append(
                    f"  {p.conf}: estimate {span.replace(' - ', ' to ')} over the "
                    f"sizes {n} may take: "
                    f"{est.get('why_range', batch_scale.RANGE_WHAT)}; "
                    f"{fb(d['peak_reserved_bytes'])} assumes "
                    "the recorded ones (as judged: weight part kept, the rest scaled)"
                )
            else:
                notes.append(
                    f"  {p.conf}: an estimate: {n} may take other sizes at this "
                    "batch; "
                    "every size tried gives the same peak"
                    + ("" if est["low_bytes"] == est["high_bytes"] else " to the figures shown")
                    + f", {fb(est['low_bytes'])}"
                )
    return table_text(case, preds, rows, notes, ranked, limit)
