"""Benchmark: the batch-size what-if and ``advise`` on the bundled 1M-event trace.

No target of its own in the issue; printed as ratios against references measured in
the same run (plain ``pickle.load`` of the same decompressed file, and one what-if
simulation of the recorded settings), so they travel between machines:

* judging every allocation (evidence + rules, with the categories when present);
* one batch-scaled simulation (should cost about one what-if simulation);
* the whole ``advise`` (the largest-fitting-batch bisection and the allocator settings
  are a dozen or two simulations).

    .venv/bin/python tests/bench/bench_advise.py [FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_whatif import DEFAULT, pickle_load_seconds, timed


def main(argv: list[str]) -> int:
    from vramscope.viewer.model import load_snapshot
    from vramscope.viewer.model.remedies import batch_scale, evidence, scaling
    from vramscope.viewer.model.remedies.advise import advise
    from vramscope.viewer.model.whatif import prepare

    path = Path(argv[0]) if argv else DEFAULT
    t_pickle = pickle_load_seconds(path)
    snap = load_snapshot(path)
    case = prepare(snap)
    _, t_sim = timed(lambda: case.simulate("expandable_segments:True"))
    evd, t_evd = timed(lambda: evidence.gather(case))
    j, t_judge = timed(lambda: scaling.judge(case, None, evd))
    _, t_scaled = timed(lambda: batch_scale.scaled_case(case, j, 0.5).simulate())
    adv, t_advise = timed(lambda: advise(case, None, 8 << 30))
    print(f"{path.name}: {len(snap.trace)} events, {len(case.requests)} requests")
    print(f"reference pickle.load          {t_pickle:7.2f} s")
    print(f"reference one simulation       {t_sim:7.2f} s")
    print(f"evidence (+ categories)        {t_evd:7.2f} s  = {t_evd / t_pickle:.2f}x pickle.load")
    print(
        f"judgement (rules)              {t_judge:7.2f} s  = {t_judge / t_pickle:.2f}x pickle.load"
    )
    print(
        f"one batch-scaled simulation    {t_scaled:7.2f} s  = {t_scaled / t_sim:.2f}x a simulation"
    )
    print(
        f"advise (8 GiB limit, {len(adv.remedies)} remedies) {t_advise:7.2f} s  = "
        f"{t_advise / t_pickle:.1f}x pickle.load, {t_advise / t_sim:.1f}x a simulation"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
