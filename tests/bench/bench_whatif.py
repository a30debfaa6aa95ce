"""Benchmark: the what-if simulator on the bundled 1M-event trace.

Target: 1M events simulated in <= 10 s on this machine.  Seconds
travel badly between machines, so the ratio against a reference measured in
the same run is printed too: plain ``pickle.load`` of the same (decompressed)
file, and the timeline replay of the same trace.

    .venv/bin/python tests/bench/bench_whatif.py [FILE]
"""

from __future__ import annotations

import io
import lzma
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "tests" / "data" / "transformer_long_python_1000k.pickle.xz"


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def pickle_load_seconds(path: Path) -> float:
    """The reference: CPython's pickle.load of the trusted bundled file (never user files),
    decompressed first so only the unpickling is timed."""
    raw = path.read_bytes()
    if raw[:6] == b"\xfd7zXZ\x00":
        raw = lzma.decompress(raw)
    return timed(lambda: pickle.load(io.BytesIO(raw)))[1]


def main(argv: list[str]) -> int:
    from vramscope.viewer.model import load_snapshot
    from vramscope.viewer.model.replay import replay_device
    from vramscope.viewer.model.whatif import prepare

    path = Path(argv[0]) if argv else DEFAULT
    t_pickle = pickle_load_seconds(path)
    snap = load_snapshot(path)
    n_events = len(snap.trace)
    _, t_replay = timed(lambda: replay_device(snap, 0, keyframes=False))
    case, t_prepare = timed(lambda: prepare(snap))
    rec, t_rec = timed(lambda: case.simulate("recorded"))
    exp, t_exp = timed(lambda: case.simulate("expandable_segments:True"))
    split, t_split = timed(lambda: case.simulate("max_split_size_mb:64", limit=2 << 30))
    total = t_prepare + t_rec
    print(f"{path.name}: {n_events} events, {len(case.requests)} requests")
    print(f"reference pickle.load       {t_pickle:7.2f} s")
    print(f"reference timeline replay   {t_replay:7.2f} s")
    print(f"prepare (replay + requests) {t_prepare:7.2f} s")
    print(f"simulate recorded settings  {t_rec:7.2f} s")
    print(f"simulate expandable         {t_exp:7.2f} s")
    print(f"simulate max_split 64 + 2GiB limit {t_split:7.2f} s")
    print(
        f"prepare + one simulation    {total:7.2f} s  = {total / t_pickle:.2f}x pickle.load, "
        f"{total / t_replay:.1f}x replay  (target <= 10 s for 1M events)"
    )
    ok = case.self_check().ok
    print(
        f"self-check {'passed' if ok else 'FAILED'}; peak reserved {rec.peak_reserved}, "
        f"expandable {exp.peak_reserved}, max_split {split.peak_reserved}"
    )
    return 0 if ok and total <= 10 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
