"""The benchmark trace tiler keeps addresses and times consistent."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np

from tests.conftest import ASSETS
from vramscope.viewer.model import load_snapshot, memory_stats
from vramscope.viewer.model.replay.timeline import build_timeline

MiB = 1 << 20
BASE = 0x7F0000000000


def training_loop_snapshot(steps: int) -> dict:
    """A segment, a weight alive throughout, and per step two activations made and freed."""
    frames = [{"filename": "train.py", "line": 10, "name": "step"}]
    events, anns, t = [], [], 1_000

    def ev(action, addr, size):
        nonlocal t
        t += 7
        events.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": 0,
                "time_us": t,
                "frames": frames,
            }
        )

    ev("segment_alloc", BASE, 20 * MiB)
    ev("alloc", BASE, 4 * MiB)
    for _ in range(steps):
        ev("alloc", BASE + 4 * MiB, 2 * MiB)
        ev("alloc", BASE + 6 * MiB, 8 * MiB)
        ev("free_requested", BASE + 6 * MiB, 8 * MiB)
        ev("free_completed", BASE + 6 * MiB, 8 * MiB)
        ev("free_requested", BASE + 4 * MiB, 2 * MiB)
        ev("free_completed", BASE + 4 * MiB, 2 * MiB)
        anns.append({"stage": "START", "name": "step", "device": 0, "time_us": t - 30})
        anns.append({"stage": "END", "name": "step", "device": 0, "time_us": t - 2})
    blocks = [
        {
            "address": BASE,
            "size": 4 * MiB,
            "requested_size": 4 * MiB,
            "state": "active_allocated",
            "frames": frames,
        },
        {
            "address": BASE + 4 * MiB,
            "size": 16 * MiB,
            "requested_size": 0,
            "state": "inactive",
            "frames": [],
        },
    ]
    seg = {
        "device": 0,
        "address": BASE,
        "total_size": 20 * MiB,
        "stream": 0,
        "segment_type": "large",
        "blocks": blocks,
    }
    return {"segments": [seg], "device_traces": [events], "external_annotations": anns}


def test_tiled_trace_replays_to_the_same_final_state(tmp_path):
    src = tmp_path / "loop.pickle"
    src.write_bytes(pickle.dumps(training_loop_snapshot(steps=5)))
    out = tmp_path / "tiled.pickle"
    run = subprocess.run(
        [sys.executable, "tests/bench/tile_trace.py", str(src), str(out), "--events", "600"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    original, tiled = load_snapshot(src), load_snapshot(out)
    rep = build_timeline(tiled).replay(0)
    assert 560 <= len(rep) <= 600 and rep.inconsistencies == 0
    assert np.all(np.diff(rep.time_us) > 0)  # times shifted, never repeated
    final = build_timeline(tiled).snapshot_at(0, len(rep) - 1)
    assert memory_stats(final) == memory_stats(original)
    assert rep.peak("allocated")[0] == 14 * MiB
    # record_function ranges repeat with their steps, in time order, inside the trace
    ann = tiled.annotations
    assert len(ann.time_us) >= 2 * (len(rep) // 6) - 4 and np.all(np.diff(ann.time_us) > 0)
    assert ann.time_us.max() < rep.time_us[-1]


def test_no_period_is_a_clear_error(tmp_path):
    out = tmp_path / "x.pickle"
    run = subprocess.run(
        [
            sys.executable,
            "tests/bench/tile_trace.py",
            str(ASSETS / "example_fragmentation_oom.pickle"),
            str(out),
            "--events",
            "5000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "no repeating state" in run.stderr
