"""Diff of two snapshots: figure deltas equal the allocator's counter differences,
stacks are matched by their resolved frames (never by per-file ids)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATA, expected_for
from tests.snapshot_forms import merge_devices, on_device, raw_object
from vramscope.viewer.model import load_bytes, memory_stats
from vramscope.viewer.model.analysis.figures import ALLOCATOR_COUNTERS as COUNTERS
from vramscope.viewer.model.analysis.figures import Selection
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports.diff import (
    STATUS_ADDED,
    STATUS_CHANGED,
    STATUS_REMOVED,
    STATUS_UNCHANGED,
    diff_snapshots,
    format_text,
)

# Same workload under two allocator settings; two OOM kinds of one workload;
# two unrelated workloads.
PAIRS = [
    ("whatif_default", "whatif_expandable"),
    ("fragmentation_oom", "capacity_oom"),
    ("resnet50_train", "gpt2_oom"),
]
PEAKS = {
    "reserved": "reserved_bytes.all.peak",
    "allocated": "allocated_bytes.all.peak",
    "active": "active_bytes.all.peak",
    "requested": "requested_bytes.all.peak",
}


def _pair(loaded_snapshots, name_a, name_b):
    return loaded_snapshots(DATA / f"{name_a}.pickle"), loaded_snapshots(DATA / f"{name_b}.pickle")


@pytest.mark.parametrize("name_a,name_b", PAIRS, ids=[f"{a}-vs-{b}" for a, b in PAIRS])
def test_deltas_equal_allocator_counter_differences(loaded_snapshots, name_a, name_b):
    a, b = _pair(loaded_snapshots, name_a, name_b)
    ca = expected_for(DATA / f"{name_a}.pickle")["memory_stats"]
    cb = expected_for(DATA / f"{name_b}.pickle")["memory_stats"]
    d = diff_snapshots(a, b, timelines=(build_timeline(a), build_timeline(b)))
    out = d.to_dict()
    for field, counter in COUNTERS.items():
        expected = cb[counter] - ca[counter]
        assert d.delta(field) == expected, field
        assert out[f"delta_{field}"] == expected, field
        # One device in these files: its deltas are the same.
        assert out["devices"][0]["delta"][field] == expected, field
    # The replayed peaks' deltas equal the differences of the *.all.peak counters.
    for curve, counter in PEAKS.items():
        assert out[f"delta_peak_{curve}_bytes"] == cb[counter] - ca[counter], curve
    # The sidecar counters travel with the diff, their differences included.
    assert (
        out["counters"]["reserved_bytes.all.current"]["delta"]
        == cb["reserved_bytes.all.current"] - ca["reserved_bytes.all.current"]
    )
    # Pools partition everything: their deltas add up to the total's.
    for field in ("reserved_bytes", "allocated_bytes", "active_bytes", "requested_bytes"):
        assert sum(p["delta"][field] for p in out["pools"]) == d.delta(field)
    # Stacks partition the live bytes: their deltas add up to delta active_bytes.
    assert sum(s.delta for s in d.stacks) == d.delta("active_bytes")
    assert sum(s.bytes_a for s in d.stacks) == memory_stats(a).active_bytes
    assert sum(s.bytes_b for s in d.stacks) == memory_stats(b).active_bytes
    assert sum(s.count_b for s in d.stacks) == memory_stats(b).allocation_count + int(
        (b.blocks.state == 1).sum()
    )
    assert [s.delta for s in d.stacks] == sorted((s.delta for s in d.stacks), reverse=True)
    json.dumps(out)  # JSON-ready


def test_same_snapshot_diffs_to_nothing(loaded_snapshots):
    a = loaded_snapshots(DATA / "resnet50_train.pickle")
    d = diff_snapshots(a, a)
    assert all(v == 0 for v in d.total.deltas().values())
    assert d.stacks and {s.status for s in d.stacks} == {STATUS_UNCHANGED}
    assert not d.growing() and not d.shrinking()
    assert d.tree.delta == 0 and d.tree.bytes_a == memory_stats(a).active_bytes


def test_whatif_pair_matches_by_line_when_callers_differ(loaded_snapshots):
    """The two what-if runs reach the same lines from different lambdas (lines 337
    and 338): whole stacks differ (added + removed), allocating lines match."""
    a, b = _pair(loaded_snapshots, "whatif_default", "whatif_expandable")
    whole = diff_snapshots(a, b)
    assert whole.by_status(STATUS_ADDED) and whole.by_status(STATUS_REMOVED)
    assert not whole.by_status(STATUS_CHANGED)
    by_line = diff_snapshots(a, b, depth=1)
    assert not by_line.by_status(STATUS_ADDED) and not by_line.by_status(STATUS_REMOVED)
    changed = by_line.by_status(STATUS_CHANGED)
    # Sorted by growth: the smaller shrink first.
    assert [s.label for s in changed] == [
        "modeling_utils.py:3645 cuda",
        "train_workloads.py:273 whatif",
    ]
    # Expandable segments do not keep whole unsplit blocks: a little less under each line.
    assert all(-2 * MiB < s.delta < 0 for s in changed)
    assert sum(s.delta for s in by_line.stacks) == by_line.delta("active_bytes")


# --------------------------------------------------------------------------- synthetic pairs

MiB = 1 << 20
TORCH = {
    "filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
    "line": 125,
    "name": "forward",
}
CPP = {"filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 0, "name": "malloc"}


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def user_stack(*lines):
    """Innermost first, as torch records: torch + C++ internals, then user frames."""
    return [CPP, TORCH] + [frame("train.py", n, f"f{n}") for n in lines]


def segment(address, blocks, device=0, stream=0, pool=(0, 0)):
    out, a = [], address
    for size, state, frames in blocks:
        out.append(
            {"address": a, "size": size, "requested_size": size, "state": state, "frames": frames}
        )
        a += size
    return {
        "device": device,
        "address": address,
        "total_size": a - address,
        "stream": stream,
        "segment_type": "large",
        "segment_pool_id": list(pool),
        "is_expandable": False,
        "frames": [],
        "blocks": out,
    }


def snap_of(segments):
    snap = load_bytes(json.dumps({"segments": segments, "device_traces": [[]]}).encode())
    snap.path = "synthetic"
    return snap


def test_synthetic_added_removed_changed():
    X, Y, Z = user_stack(10, 100), user_stack(20, 100), user_stack(30, 100)
    a = snap_of(
        [
            segment(
                1 << 30,
                [
                    (4 * MiB, "active_allocated", X),
                    (2 * MiB, "active_allocated", Y),
                    (2 * MiB, "inactive", []),
                ],
            )
        ]
    )
    # B interns its frames in another order (Z first), so stack and frame ids differ;
    # X grows to 3 blocks (one pending free: still live), Y is gone, Z is new.
    b = snap_of(
        [
            segment(
                1 << 31,
                [
                    (2 * MiB, "active_allocated", Z),
                    (4 * MiB, "active_allocated", X),
                    (2 * MiB, "active_allocated", X),
                    (2 * MiB, "active_pending_free", X),
                ],
            ),
            segment(1 << 32, [(20 * MiB, "inactive", [])], stream=7),
        ]
    )
    d = diff_snapshots(a, b)
    rows = {s.label: s for s in d.stacks}
    assert set(rows) == {"train.py:10 f10", "train.py:20 f20", "train.py:30 f30"}
    x, y, z = rows["train.py:10 f10"], rows["train.py:20 f20"], rows["train.py:30 f30"]
    assert (x.status, x.bytes_a, x.bytes_b, x.count_a, x.count_b) == (
        STATUS_CHANGED,
        4 * MiB,
        8 * MiB,
        1,
        3,
    )
    assert (y.status, y.delta) == (STATUS_REMOVED, -2 * MiB)
    assert (z.status, z.delta) == (STATUS_ADDED, 2 * MiB)
    assert [s.label for s in d.stacks] == ["train.py:10 f10", "train.py:30 f30", "train.py:20 f20"]
    # Folded keys hold only user frames, outermost first.
    assert x.key == (("train.py", 100, "f100"), ("train.py", 10, "f10"))
    assert x.frame_labels() == ["train.py:10 f10", "train.py:100 f100"]
    # Unfolded keys keep torch and C++ frames (noise aside).
    full = diff_snapshots(a, b, fold=False)
    assert {s.key[-1][2] for s in full.stacks} == {"malloc"}
    assert len(full.stacks) == 3
    # Figures and pools: the new stream-7 segment is a pool only B has.
    assert d.delta("reserved_bytes") == 30 * MiB - 8 * MiB
    assert d.delta("active_bytes") == 10 * MiB - 6 * MiB == sum(s.delta for s in d.stacks)
    assert d.delta("pending_free_bytes") == 2 * MiB
    pools = {(k.stream, k.pool_id): sd for k, sd in d.pools.items()}
    assert pools[(7, (0, 0))].a.reserved_bytes == 0
    assert pools[(7, (0, 0))].delta("reserved_bytes") == 20 * MiB
    assert pools[(0, (0, 0))].delta("reserved_bytes") == 2 * MiB
    # The call-tree diff: one root path "train.py:100 f100" holding every row.
    (top,) = d.tree.children.values()
    assert top.label == "train.py:100 f100" and top.delta == 4 * MiB
    assert [c.label for c in top.sorted_children()] == [
        "train.py:10 f10",
        "train.py:30 f30",
        "train.py:20 f20",
    ]
    # Highlight masks pick the stacks of the chosen rows in each file.
    mask_b = d.stack_mask("b", [d.stacks.index(z)])
    assert mask_b.sum() == 1
    stack_b = int(b.blocks.stack[0])  # Z's block is the first of B
    assert mask_b[stack_b]
    text = format_text(d)
    assert "1 added, 1 removed, 1 changed" in text and "+4.00 MiB  changed" in text


def test_by_function_ignores_line_numbers():
    a = snap_of([segment(1 << 30, [(4 * MiB, "active_allocated", user_stack(10, 100))])])
    b = snap_of(
        [
            segment(
                1 << 30,
                [
                    (
                        6 * MiB,
                        "active_allocated",
                        [CPP, TORCH, frame("train.py", 12, "f10"), frame("train.py", 100, "f100")],
                    )
                ],
            )
        ]
    )
    assert {s.status for s in diff_snapshots(a, b).stacks} == {STATUS_ADDED, STATUS_REMOVED}
    (row,) = diff_snapshots(a, b, lines=False, depth=1).stacks
    assert row.status == STATUS_CHANGED and row.delta == 2 * MiB


def test_no_stack_blocks_are_one_group():
    a = snap_of([segment(1 << 30, [(4 * MiB, "active_allocated", [])])])
    b = snap_of(
        [segment(1 << 30, [(4 * MiB, "active_allocated", []), (2 * MiB, "active_allocated", [])])]
    )
    (row,) = diff_snapshots(a, b).stacks
    assert row.label == "<no stack recorded>" and row.status == STATUS_CHANGED
    assert row.delta == 2 * MiB


def test_per_device_deltas():
    """A two-GPU process: device 0 unchanged, device 1 goes from one workload to another."""
    frag = raw_object(DATA / "fragmentation_oom.pickle")
    cap = raw_object(DATA / "capacity_oom.pickle")
    small = raw_object(DATA / "small_pool_mixed.pickle")
    a = load_bytes(json.dumps(merge_devices(small, on_device(frag, 1))).encode())
    b = load_bytes(json.dumps(merge_devices(small, on_device(cap, 1))).encode())
    d = diff_snapshots(a, b)
    assert sorted(d.devices) == [0, 1]
    assert all(v == 0 for v in d.devices[0].deltas().values())
    cf = expected_for(DATA / "fragmentation_oom.pickle")["memory_stats"]
    cc = expected_for(DATA / "capacity_oom.pickle")["memory_stats"]
    for field, counter in COUNTERS.items():
        assert d.devices[1].delta(field) == cc[counter] - cf[counter], field
        assert d.delta(field) == d.devices[1].delta(field)
    one = memory_stats(b, Selection(device=1)).allocated_bytes
    assert d.devices[1].b.allocated_bytes == one
    devs = {p["device"] for p in d.to_dict()["pools"]}
    assert devs == {0, 1}
