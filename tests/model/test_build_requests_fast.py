"""The request stream built by the C loop equals the Python reference, column for column.

:func:`~vramscope.viewer.model.whatif.requests.build_requests` judges the releases at the
segment events and runs the loop over every event in C;
:func:`~vramscope.viewer.model.whatif.requests.build_requests_reference` is the loop in
Python.  Every real recording (each device with a trace; with and without retries and a
garbage collector; the recorded empty_cache stacks as prepare reads them) and random
traces (inconsistent ones included) must give the same :class:`Requests`: every column,
the same dtypes.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from tests import shared_data
from tests.conftest import DATA, snapshot_files
from tests.model.test_replay import random_trace_snapshot
from tests.native_gate import needs
from vramscope.viewer.model import load_bytes
from vramscope.viewer.model.core import allocator_rules as rules
from vramscope.viewer.model.replay import replay_device
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

needs_native = needs(rq.native_available(), "whatif_core")

REAL = (
    snapshot_files()
    + sorted((DATA / "truth").glob("*.pickle.xz"))
    + sorted((DATA / "whatif_h200").glob("*.pickle.xz"))
    + sorted((DATA / "ddp_2ranks").glob("*.pickle"))
    + shared_data.external_files()
)
COLUMNS = [f.name for f in dataclasses.fields(rq.Requests) if f.name != "initial"]


def assert_same(ours: rq.Requests, ref: rq.Requests, where) -> None:
    assert ours.initial is ref.initial, where
    for name in COLUMNS:
        a, b = getattr(ours, name), getattr(ref, name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype, (where, name, a.dtype, b.dtype)
            assert a.shape == b.shape, (where, name, a.shape, b.shape)
            assert np.array_equal(a, b), (where, name)
        else:
            assert type(a) is type(b) and a == b, (where, name, a, b)


def both(rep, pools, retries: bool, gc: bool, cfg, emptied, where) -> None:
    ours = rq.build_requests(rep, pools, retries, gc, cfg, emptied)
    ref = rq.build_requests_reference(rep, pools, retries, gc, cfg, emptied)
    assert_same(ours, ref, where)


@pytest.mark.slow
@needs_native
@shared_data.MARK
def test_real_recordings_equal_the_reference(loaded_snapshots):
    """Every bundled and external recording, every device with a trace, retries and a
    garbage collector possible or not."""
    external = len(shared_data.external_files())
    if not external:
        shared_data.missing(str(shared_data.EXTERNAL))
    devices = combos = 0
    for path in REAL:
        snap = loaded_snapshots(path)
        cfg = rules.config_from_settings(snap.allocator_settings)
        for device in sorted(set(np.unique(snap.trace.device).tolist())):
            rep = replay_device(snap, device, keyframes=False)
            emptied = rq.released_by_empty_cache(snap, rep)
            devices += 1
            for retries in (True, False):
                for gc in (False, True):
                    both(
                        rep, snap.pools, retries, gc, cfg, emptied, (path.name, device, retries, gc)
                    )
                    combos += 1
            both(rep, snap.pools, True, False, None, None, (path.name, device, "no stacks"))
    assert devices >= 90 + external, devices
    assert combos == 4 * devices


@needs_native
def test_prepare_uses_the_fast_stream():
    """prepare's request stream is the reference's (the same arguments prepare passes)."""
    path = DATA / "cuda_graph_pool.pickle"
    snap = load_bytes(path.read_bytes())
    case = prepare(snap)
    rep = replay_device(snap, case.device, keyframes=False)
    cfg = rules.config_from_settings(snap.allocator_settings)
    ref = rq.build_requests_reference(
        rep,
        snap.pools,
        True,
        cfg.garbage_collection_threshold > 0,
        cfg,
        rq.released_by_empty_cache(snap, rep),
    )
    for name in COLUMNS:
        a, b = getattr(case.requests, name), getattr(ref, name)
        assert np.array_equal(a, b) if isinstance(b, np.ndarray) else a == b, name


# -- random traces ------------------------------------------------------------------------

BASE = 0x7F00_0000_0000
NAMES = [
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "oom",
    "snapshot",
]


def structured_trace(rng) -> bytes:
    """A trace that reaches every branch of the loop: immediate and pending frees, frees of
    blocks from before the window and of unknown ones, release runs before a new segment
    or an OOM (with completions and snapshots inside), releases with no request after,
    several streams, addresses reused."""
    events: list[tuple[str, int, int, int]] = []
    n_addr = int(rng.integers(2, 40))
    addrs = [BASE + int(j) * (2 << 20) + int(rng.integers(0, 3)) * 512 for j in range(n_addr)]
    live: list[int] = []
    pending: list[int] = []
    for _ in range(int(rng.integers(1, 300))):
        r = rng.random()
        stream = int(rng.choice([0, 0, 7, 9]))
        size = int(rng.choice([512, 4096, 1 << 20, (2 << 20) + 1, 20 << 20, 1 << 40]))
        if r < 0.3:
            a = int(rng.choice(addrs))
            events.append(("alloc", a, size, stream))
            live.append(a)
        elif r < 0.5 and live:
            a = live.pop(int(rng.integers(len(live))))
            events.append(("free_requested", a, size, stream))
            if rng.random() < 0.6:
                events.append(("free_completed", a, size, stream))
            else:
                pending.append(a)
        elif r < 0.58 and pending:
            events.append(("free_completed", pending.pop(0), size, stream))
        elif r < 0.62:  # a block from before the window, or one never seen
            a = (
                int(rng.choice(addrs))
                if rng.random() < 0.5
                else BASE + int(rng.integers(0, 8)) * (4 << 20)
            )
            events.append((str(rng.choice(["free_requested", "free_completed"])), a, size, stream))
        elif r < 0.85:  # a release run, maybe the allocator's before a new segment
            for _ in range(int(rng.integers(1, 5))):
                kind = str(
                    rng.choice(
                        [
                            "segment_free",
                            "segment_free",
                            "segment_unmap",
                            "free_completed",
                            "snapshot",
                        ]
                    )
                )
                a = int(rng.choice(addrs))
                events.append((kind, a, int(rng.choice([2 << 20, 20 << 20, 1 << 30])), stream))
            then = rng.random()
            if then < 0.4:
                events.append(("segment_alloc", int(rng.choice(addrs)), 20 << 20, stream))
                events.append(("alloc", int(rng.choice(addrs)), size, stream))
            elif then < 0.55:
                events.append(("segment_map", int(rng.choice(addrs)), 2 << 20, stream))
            elif then < 0.7:
                events.append(("oom", 0, size, stream))
        elif r < 0.92:
            events.append(
                (
                    "segment_alloc",
                    int(rng.choice(addrs)),
                    int(rng.choice([2 << 20, 20 << 20])),
                    stream,
                )
            )
        elif r < 0.96:
            events.append(("oom", 0, size, stream))
        else:
            events.append(("snapshot", 0, 0, stream))
    trace = [
        {"action": k, "addr": a, "size": s, "stream": st, "time_us": i, "frames": []}
        for i, (k, a, s, st) in enumerate(events)
    ]
    segs = []
    for k in range(int(rng.integers(0, 5))):
        addr = BASE + k * (4 << 20)
        state = str(rng.choice(["active_allocated", "active_pending_free", "inactive"]))
        segs.append(
            {
                "device": 0,
                "address": addr,
                "total_size": 2 << 20,
                "stream": 0,
                "segment_type": "large",
                "blocks": [
                    {
                        "address": addr,
                        "size": 2 << 20,
                        "requested_size": 1 << 20,
                        "state": state,
                        "frames": [],
                    }
                ],
            }
        )
    return pickle.dumps(
        {"segments": segs, "device_traces": [trace], "allocator_settings": {"max_split_size": -1}}
    )


def random_variants(rng, rep, n_pools: int):
    """The columns the stream reads, varied past what the replay makes: event pools of
    private and ordinary pools (and unknown indices), empty_cache stacks, duplicate
    addresses in the layout before the window."""
    n = len(rep)
    rep.pool = rng.integers(-1, n_pools + 1, n).astype(np.int32)
    init = rep.initial
    if init.n_blocks and rng.random() < 0.3:
        rep.initial = dataclasses.replace(
            init,
            **{
                f.name: np.concatenate([getattr(init, f.name), getattr(init, f.name)[:1]])
                for f in dataclasses.fields(init)
                if f.name.startswith("blk_")
            },
        )
    pools = [(0, 0) if rng.random() < 0.4 else (1, int(j)) for j in range(n_pools)]
    emptied = rng.random(n) < 0.2 if rng.random() < 0.5 else None
    return pools, emptied


@pytest.mark.slow
@needs_native
def test_random_traces_equal_the_reference():
    rng = np.random.default_rng(20251128)
    ran = 0
    for trial in range(500):
        if trial % 2:
            snap = load_bytes(structured_trace(rng))
        else:
            actions = list(
                rng.choice(
                    [list(range(9)), [0, 0, 1, 2, 4, 4, 3, 7, 8], [0, 1, 2, 2, 4, 6, 5, 3, 8]]
                )
            )
            snap, _ = random_trace_snapshot(rng, actions)
        rep = replay_device(snap, 0, keyframes=False)
        pools, emptied = random_variants(rng, rep, int(rng.integers(0, 4)))
        cfg = (
            rules.AllocatorConfig()
            if rng.random() < 0.5
            else rules.parse_conf(
                str(
                    rng.choice(
                        [
                            "max_split_size_mb:20",
                            "max_split_size_mb:64",
                            "roundup_power2_divisions:4",
                            "expandable_segments:True",
                        ]
                    )
                )
            )
        )
        for retries in (True, False):
            for gc in (False, True):
                both(rep, pools, retries, gc, cfg, emptied, (trial, retries, gc))
                ran += 1
    assert ran == 2000


@needs_native
def test_release_runs_and_no_events():
    """Edge cases by hand: an empty trace; a long release run (chunked scans); releases
    at the very end (tagged past the last request)."""
    for events in (
        [],
        [("segment_free", BASE, 2 << 20)] * 300
        + [("segment_alloc", BASE, 2 << 20)]
        + [("alloc", BASE, 512)],
        [("alloc", BASE, 512)]
        + [("snapshot", 0, 0)] * 500
        + [("segment_free", BASE, 2 << 20), ("segment_alloc", BASE, 2 << 20)],
    ):
        trace = [
            {"action": k, "addr": a, "size": s, "stream": 0, "time_us": i, "frames": []}
            for i, (k, a, s) in enumerate(events)
        ]
        segs = [
            {
                "device": 0,
                "address": BASE + k * (4 << 20),
                "total_size": 2 << 20,
                "stream": 0,
                "segment_type": "large",
                "blocks": [
                    {
                        "address": BASE + k * (4 << 20),
                        "size": 2 << 20,
                        "requested_size": 0,
                        "state": "inactive",
                        "frames": [],
                    }
                ],
            }
            for k in range(3)
        ]
        snap = load_bytes(
            pickle.dumps({"segments": segs, "device_traces": [trace], "allocator_settings": {}})
        )
        devices = sorted(set(np.unique(snap.trace.device).tolist())) or [0]
        rep = replay_device(snap, devices[0], keyframes=False)
        for retries in (True, False):
            for gc in (False, True):
                both(rep, snap.pools, retries, gc, None, None, (len(events), retries, gc))


def test_without_the_c_loop_the_reference_answers(monkeypatch):
    snap = load_bytes((DATA / "side_stream_pending.pickle").read_bytes())
    rep = replay_device(snap, int(snap.trace.device[0]), keyframes=False)
    monkeypatch.setattr(rq, "_core", None)
    assert not rq.native_available()
    ref = rq.build_requests_reference(rep, snap.pools)
    assert_same(rq.build_requests(rep, snap.pools), ref, "python")


@needs_native
def test_many_blocks_by_address():
    """Thousands of blocks alive at once, freed in random order, addresses reused: the
    C loop's maps by address grow, and lose keys in every order, as the dicts do."""
    rng = np.random.default_rng(7)
    addrs = [BASE + int(j) * 512 for j in rng.permutation(6000)]
    events, live = [], []
    for a in addrs:
        events.append(("alloc", a, 512))
        live.append(a)
        if rng.random() < 0.4:
            a = live.pop(int(rng.integers(len(live))))
            events.append(("free_requested", a, 512))
            if rng.random() < 0.5:
                events.append(("free_completed", a, 512))
    for j in rng.permutation(len(live)):
        events.append(("free_requested", live[j], 512))
    for a in addrs[::3]:  # completions, pending or never requested
        events.append(("free_completed", a, 512))
    trace = [
        {"action": k, "addr": a, "size": s, "stream": 0, "time_us": i, "frames": []}
        for i, (k, a, s) in enumerate(events)
    ]
    snap = load_bytes(
        pickle.dumps({"segments": [], "device_traces": [trace], "allocator_settings": {}})
    )
    rep = replay_device(snap, 0, keyframes=False)
    ours = rq.build_requests(rep, snap.pools)
    assert_same(ours, rq.build_requests_reference(rep, snap.pools), "many blocks")
    assert len(ours) > 10_000
