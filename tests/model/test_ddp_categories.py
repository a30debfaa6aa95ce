"""DistributedDataParallel ranks against what each rank's program knew about its memory
(tests/workloads/ddp_buckets.py: parameters, ``.grad`` storages, DDP's gradient buckets
and the optimizer state, with their addresses, at the exit snapshot).

The Reducer's buckets are gradients ("DDP bucket"), never unknown nor guessed; with
``gradient_as_bucket_view=True`` the ``.grad`` are views into them and count once.
The recordings (one rank each, ``torchrun --nproc-per-node 1``: DDP's Reducer and its
buckets as on more ranks) are in tests/data/ddp_1rank/<run>/.

    python tests/model/test_ddp_categories.py     # the table, ours against the truth
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ddp_1rank"
RUNS = sorted(p.name for p in DATA.iterdir() if p.is_dir()) if DATA.is_dir() else []
# gpt2 and resnet x gradient_as_bucket_view on/off x accumulation 1/4, and two larger batches.
MIN_RUNS = 10
TOLERANCE = 0.02
# Compared at the exit snapshot, where the program took its truth.
COMPARED = {"parameter": "parameters", "optimizer_state": "optimizer_state"}


@dataclass
class Ranked:
    """One rank: our categories at the end and at the peak beside the program's bytes."""

    run: str
    truth: dict
    ours_end: dict = field(default_factory=dict)
    ours_peak: dict = field(default_factory=dict)
    peak: int = 0
    expected: dict = field(default_factory=dict)  # category -> the program's bytes
    buckets_not_named: int = 0  # bytes of live bucket blocks not labelled "DDP bucket"
    grads_not_gradient: int = 0  # bytes of live .grad blocks not labelled gradient
    guessed_buckets: int = 0  # bytes of live bucket blocks whose reason is a guess


def _unique_bytes(*block_lists: list) -> int:
    """Bytes of the storages in the lists, each address once (the bucket view shares)."""
    seen: dict[int, int] = {}
    for blocks in block_lists:
        for addr, n in blocks:
            seen[int(addr)] = int(n)
    return sum(seen.values())


@functools.lru_cache(maxsize=None)
def ranked(run: str) -> Ranked:
    from vramscope.viewer.model.categories import CATEGORY_NAMES, REASONS, MemoryBreakdown
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.replay.timeline import build_timeline

    d = DATA / run
    truth_path = next(d.glob("*.truth.json"))
    snap_path = d / truth_path.name.replace(".truth.json", ".pickle.xz")
    truth = json.loads(truth_path.read_text())
    snap = load_snapshot(snap_path, use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
    end = bd.n_events - 1
    peak = int(np.argmax(bd.requested))
    r = Ranked(run, truth, bd.split_at(end), bd.split_at(peak), int(bd.requested[peak]))
    grads, buckets = truth["gradients"]["blocks"], truth["ddp_buckets"]["blocks"]
    r.expected = {key: int(truth[t]["bytes"]) for key, t in COMPARED.items()}
    r.expected["gradient"] = _unique_bytes(grads, buckets)
    iv = bd.intervals
    live = np.flatnonzero(iv.end >= bd.n_events)
    at = {int(a): int(i) for a, i in zip(iv.addr[live].tolist(), live.tolist())}
    gradient = CATEGORY_NAMES.index("gradient")
    for addr, n in buckets:
        i = at.get(int(addr))
        if i is None or REASONS[bd.reason[i]].code != "ddp_bucket":
            r.buckets_not_named += int(n)
        elif REASONS[bd.reason[i]].guess:
            r.guessed_buckets += int(n)
    for addr, n in grads:
        i = at.get(int(addr))
        if i is None or bd.category[i] != gradient:
            r.grads_not_gradient += int(n)
    return r


def table(runs: list[str]) -> str:
    """Per run and category: the program's bytes, ours at the exit snapshot, the error."""
    from vramscope.viewer.model.core.units import format_bytes as fb

    lines = ["| run | category | truth | vramscope | error |", "|---|---|---|---|---|"]
    for run in runs:
        r = ranked(run)
        for key, want in r.expected.items():
            got = int(r.ours_end.get(key, 0))
            lines.append(f"| {run} | {key} | {fb(want)} | {fb(got)} | {(got - want) / want:+.1%} |")
        for where, split, total in (
            ("end", r.ours_end, sum(r.ours_end.values())),
            ("peak", r.ours_peak, r.peak),
        ):
            unk = int(split.get("unknown", 0))
            lines.append(
                f"| {run} | unknown ({where}) | - | {fb(unk)} | {unk / total:.1%} of {fb(total)} |"
            )
    return "\n".join(lines)


def test_every_recording_is_compared():
    assert len(RUNS) >= MIN_RUNS, RUNS


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("category", ["parameter", "gradient", "optimizer_state"])
def test_category_within_2_percent_of_the_truth(run, category):
    """Gradients include the buckets: with the bucket view the .grad are the buckets (one
    copy), without it the buckets are a second copy of the gradients."""
    r = ranked(run)
    want = r.expected[category]
    assert want > 0
    assert abs(int(r.ours_end.get(category, 0)) - want) <= TOLERANCE * want, table([run])


@pytest.mark.parametrize("run", RUNS)
def test_buckets_are_named_ddp_buckets_not_guessed(run):
    r = ranked(run)
    assert r.truth["ddp_buckets"]["bytes"] > 0
    assert r.buckets_not_named == 0, table([run])
    assert r.guessed_buckets == 0, table([run])
    assert r.grads_not_gradient == 0, table([run])


@pytest.mark.parametrize("run", RUNS)
def test_unknown_within_2_percent(run):
    r = ranked(run)
    assert r.ours_end.get("unknown", 0) <= TOLERANCE * sum(r.ours_end.values()), table([run])
    assert r.ours_peak.get("unknown", 0) <= TOLERANCE * r.peak, table([run])


@pytest.mark.parametrize("run", RUNS)
def test_a_ddp_rank_is_not_called_sharded(run):
    """DDP's collectives are communication too, but a DDP rank holds no shard."""
    from vramscope.viewer.model.categories import MemoryBreakdown
    from vramscope.viewer.model.io.load import load_snapshot
    from vramscope.viewer.model.replay.timeline import build_timeline

    snap = load_snapshot(next((DATA / run).glob("*.pickle.xz")), use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)
    assert bd.sharding(bd.n_events - 1) is None


if __name__ == "__main__":
    print(table(RUNS if len(sys.argv) < 2 else sys.argv[1:]))
