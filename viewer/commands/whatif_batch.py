"""``vramscope whatif FILE --batch-scale F``: the recorded run at another batch size.

Kept beside :mod:`.whatif` (which parses the arguments and loads the case):
each ``--batch-scale`` is combined with each ``--conf``; rows are the
what-if rows (``peak_reserved_bytes``, ``oom``, ...) plus ``batch_scale``
(and ``batch`` when the recorded one was given), and the judgement of every
allocation is summarised per rule (``scaling`` in JSON, a table in text).
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction

from ..model.remedies import batch_scale, evidence, explain, scaling
from ..model.core.units import format_bytes as fb
from ..model.whatif.predictions import Prediction, format_text, rank


def scale_label(scale: float, batch: int | None) -> str:
    """``batch x0.5`` or, with the recorded batch known, ``batch x0.5 (16)``."""
    text = f"batch x{scale:g}"
    if batch:
        b = Fraction(scale).limit_denominator(1 << 20) * batch
        text += f" ({b.numerator})" if b.denominator == 1 else f" ({float(b):.1f})"
    return text


def run_batch_scales(case, confs: list[str], args, tp=None) -> int:
    """Print the rows of every ``--batch-scale`` x ``--conf`` (``tp``: the command's
    :class:`~.tty_progress.TerminalProgress`, or None)."""
    show = tp.show if tp is not None and tp.enabled else (lambda *a, **k: None)
    show("judging how each allocation scales with the batch", None, force=True)
    evd = evidence.gather(case)
    judgement = scaling.judge(case, args.batch, evd)
    rows_explain = explain.rule_table(case, judgement, evd)
    preds: list[Prediction] = []
    extra: list[dict] = []
    total = len(args.batch_scale) * len(confs)
    for a, f in enumerate(args.batch_scale):
        sc = batch_scale.scaled_case(case, judgement, f)
        for b, conf in enumerate(confs):
            show(f"simulating {a * len(confs) + b + 1}/{total}: batch x{f:g} "
                 f"{conf or '(defaults)'}", (a * len(confs) + b) / total)
            cfg = case.config_of(conf)
            result = sc.simulate(cfg, args.memory_limit)
            # Workspaces (cuDNN-like) make the figure an estimate: the range says how far.
            est = batch_scale.estimate_range(case, judgement, f, cfg, args.memory_limit)
            label = scale_label(f, args.batch) + ("" if conf == "recorded" else
                                                   f" {conf or '(defaults)'}")
            if est is not None:
                label += " (estimate)"
            p = Prediction(label, cfg, case.limit if args.memory_limit is None
                           else args.memory_limit, result, program_changed=True)
            preds.append(p)
            info = {"batch_scale": f, "conf": conf,
                    "peak_reserved_is_estimate": est is not None,
                    "uncertain_allocations": est.workspaces if est else 0,
                    "peak_reserved_sensitivity_bytes": [est.low, est.high] if est else None,
                    "peak_reserved_estimate": est.to_dict() if est else None}
            if args.batch:
                info["batch"] = float(f * args.batch)
            extra.append(info)
    if tp is not None:
        tp.clear()
    if args.recommend:
        order = rank(preds)
        extra = [extra[preds.index(p)] for p in order]
        preds = order
    if args.json:
        out = []
        for p, info in zip(preds, extra):
            d = p.to_dict(case)
            d.update(info)
            d["scaling"] = rows_explain
            out.append(d)
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_text(case, preds, ranked=args.recommend, limit=args.memory_limit))
        for p, info in zip(preds, extra):
            est = info.get("peak_reserved_estimate")
            if est:
                print(f"  {p.conf}: estimate {fb(est['low_bytes'])} to {fb(est['high_bytes'])}: "
                      f"{est['workspace_allocations']} library workspaces (cuDNN-like: not "
                      f"per-sample, freed at once): {batch_scale.RANGE_WHAT}; the figure "
                      "above assumes the recorded algorithms (weight part kept, the rest "
                      "scaled)")
        print(explain.format_rule_table(rows_explain))
    return 0
