"""How the batch-size judgement went, in words and JSON: per rule, counts, bytes and examples."""

from __future__ import annotations

import numpy as np

from ..core.units import format_bytes as fb
from . import scaling

EXAMPLES = 3


def where(snap, stack: int) -> str:
    """``file.py:LINE (function)`` of the innermost Python frame of ``stack`` ('' if none)."""
    if stack < 0:
        return ""
    for f in snap.stacks.frame_ids(stack).tolist():
        fn = snap.frames.filename_of(f)
        if fn.endswith(".py"):
            return (
                f"{fn.replace(chr(92), '/').rsplit('/', 1)[-1]}:{int(snap.frames.line[f])} "
                f"({snap.frames.name_of(f)})"
            )
    return ""


def rule_table(case, judgement: scaling.Judgement, evd) -> list[dict]:
    """:meth:`~.scaling.Judgement.summary` plus the largest allocations of each rule."""
    rows = judgement.summary()
    masks = {(rule, scales): m for rule, scales, _, m in judgement.row_masks()}
    for row in rows:
        idx = np.flatnonzero(masks[(row["rule"], row["scales"])])
        order = idx[np.argsort(-judgement.size[idx], kind="stable")]
        seen, examples = set(), []
        for i in order.tolist():
            # As printed: two sites without a Python frame read the same.
            at = where(case.snap, int(evd.site[i])) or "(no Python frame)"
            key = (int(judgement.size[i]), at)
            if key in seen:
                continue
            seen.add(key)
            examples.append(
                {"requested_bytes": int(judgement.size[i]), "event": case.event_of(i), "where": at}
            )
            if len(examples) == EXAMPLES:
                break
        row["examples"] = examples
    return rows


def format_rule_table(rows: list[dict]) -> str:
    """Text lines: how the allocations were judged."""
    lines = [
        "how each allocation was judged to scale with the batch "
        "(requested bytes over the whole recording):"
    ]
    width = max([13, *(len(r["rule"]) for r in rows)])
    for r in rows:
        verb = "scales" if r["scales"] else "fixed "
        noun = "allocation " if r["allocations"] == 1 else "allocations"  # (columns kept)
        lines.append(
            f"  {verb} {r['rule']:<{width}} {r['allocations']:>7} {noun} "
            f"{fb(r['requested_bytes']):>11}  {r['reason']}"
        )
        for ex in r["examples"][:2]:
            lines.append(f"{'':>24}e.g. {fb(ex['requested_bytes'])} at {ex['where']}")
    return "\n".join(lines)
