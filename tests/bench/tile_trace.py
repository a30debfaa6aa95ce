"""Tile a real snapshot's trace to N events, for benchmarks at any size.

A training loop returns the allocator to the same state every step: the same
blocks at the same addresses.  This tool finds two moments with the same live
set (allocations and segments, by address and size), repeats the events
between them as often as needed, and shifts every later ``time_us`` by the
repeated span, so the output is a consistent snapshot: replaying it gives the
same final segments as the original, and every address stays valid.
record_function annotations inside the repeated span repeat with it.

    python tests/bench/tile_trace.py IN.pickle[.xz] OUT.pickle --events 10000000

Real recordings stay the reference; tiled files are for measuring speed.
"""

from __future__ import annotations

import argparse
import lzma
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vramscope.viewer.model import load_snapshot  # noqa: E402
from vramscope.viewer.model.core.snapshot import Action  # noqa: E402
from vramscope.viewer.model.io.safe_pickle import safe_loads  # noqa: E402
from vramscope.viewer.model.replay.timeline import build_timeline  # noqa: E402

_MIX = np.uint64(0x9E3779B97F4A7C15)


def _h(addr: np.ndarray, size: np.ndarray, salt: int) -> np.ndarray:
    """A 64-bit hash per (addr, size), so a live set hashes to the sum of its members."""
    x = addr.astype(np.uint64) * _MIX + size.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
    x ^= np.uint64(salt)
    x ^= x >> np.uint64(31)
    return x * np.uint64(0x94D049BB133111EB)


def live_set_hashes(rep) -> np.ndarray:
    """Hash of the live allocations + segments after each event (wrapping sums)."""
    act = rep.action
    plus = np.zeros(len(rep), np.uint64)
    minus = np.zeros(len(rep), np.uint64)
    alloc = act == Action.ALLOC
    done = act == Action.FREE_COMPLETED
    seg_in = (act == Action.SEGMENT_ALLOC) | (act == Action.SEGMENT_MAP)
    seg_out = (act == Action.SEGMENT_FREE) | (act == Action.SEGMENT_UNMAP)
    with np.errstate(over="ignore"):
        plus[alloc] = _h(rep.addr[alloc], rep.size[alloc], 1)
        minus[done] = _h(rep.addr[done], rep.size[done], 1)
        plus[seg_in] = _h(rep.addr[seg_in], rep.size[seg_in], 2)
        minus[seg_out] = _h(rep.addr[seg_out], rep.size[seg_out], 2)
        # A pending free (requested, not completed) is not the same state as a
        # completed one: it is part of the state until the free completes.
        pending = act == Action.FREE_REQUESTED
        plus[pending] = _h(rep.addr[pending], rep.size[pending], 3)
        minus[done] += _h(rep.addr[done], rep.size[done], 3)
        return np.cumsum(plus - minus, dtype=np.uint64)


def find_period(rep, min_len: int | None = None) -> tuple[int, int]:
    """(i, j): the states after events i and j are equal; the longest such span
    (a training step or several)."""
    hashes = live_set_hashes(rep)
    if min_len is None:
        min_len = min(100, max(2, len(rep) // 10))
    last: dict[int, int] = {}
    best = (-1, -1)
    for k, h in enumerate(hashes.tolist()):
        i = last.get(h)
        if i is not None and k - i >= min_len and k - i >= best[1] - best[0]:
            best = (i, k)
        last.setdefault(h, k)
    if best[0] < 0:
        raise SystemExit("no repeating state found: is this a training loop?")
    return best


def tile(obj: dict, i: int, j: int, events: int) -> dict:
    """Repeat trace events (i, j] of device 0 until the trace has ``events`` events."""
    trace = obj["device_traces"][0]
    prefix, window, suffix = trace[: i + 1], trace[i + 1 : j + 1], trace[j + 1 :]
    repeats = max(1, (events - len(prefix) - len(suffix)) // max(1, len(window)))
    span = window[-1]["time_us"] - trace[i]["time_us"] if "time_us" in trace[i] else 0
    out = list(prefix)
    for r in range(repeats):
        shift = r * span
        out.extend(
            dict(e, time_us=e["time_us"] + shift) if shift and "time_us" in e else e for e in window
        )
    shift = (repeats - 1) * span
    out.extend(
        dict(e, time_us=e["time_us"] + shift) if shift and "time_us" in e else e for e in suffix
    )
    result = dict(obj)
    result["device_traces"] = [out] + list(obj["device_traces"][1:])
    anns = obj.get("external_annotations")
    if span and isinstance(anns, list) and "time_us" in trace[i]:
        # record_function ranges repeat with the steps they belong to.
        t_lo, t_hi = trace[i]["time_us"], window[-1]["time_us"]
        inside = [a for a in anns if t_lo < a.get("time_us", t_lo) <= t_hi]
        tiled = [a for a in anns if a.get("time_us", t_lo) <= t_lo]
        for r in range(repeats):
            tiled.extend(dict(a, time_us=a["time_us"] + r * span) if r else a for a in inside)
        tiled.extend(
            dict(a, time_us=a["time_us"] + (repeats - 1) * span)
            for a in anns
            if a.get("time_us", t_lo) > t_hi
        )
        result["external_annotations"] = tiled
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--events", type=int, required=True, help="target number of trace events")
    args = p.parse_args(argv)
    snap = load_snapshot(args.input, use_cache=False)
    rep = build_timeline(snap).replay(0)
    i, j = find_period(rep)
    data = Path(args.input).read_bytes()
    if args.input.endswith(".xz"):
        data = lzma.decompress(data)
    obj = safe_loads(data)  # the original objects, to copy events verbatim
    tiled = tile(obj, i, j, args.events)
    with open(args.output, "wb") as f:
        pickle.dump(tiled, f, protocol=4)
    n = len(tiled["device_traces"][0])
    print(f"period: events {i + 1}..{j} ({j - i} events); wrote {n:,} events to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
