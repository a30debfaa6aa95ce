"""A directory of per-rank snapshots as ``torchrun -m vramscope.capture`` writes it:
files found by name and sidecar, one row per rank, the outlier flagged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import DATA, expected_for
from vramscope.viewer.model.core.errors import SnapshotError
from vramscope.viewer.model.reports.ranks import (
    OUTLIER_ABSOLUTE,
    RankEntry,
    RankFile,
    flag_outliers,
    format_text,
    is_temp_name,
    load_ranks,
    read_rank_file,
    scan_directory,
)

GiB = 1 << 30

# rank -> [(bundled snapshot, reason, time stamp, write a sidecar?)]
LAYOUT = {
    0: [("resnet50_train", "exit", "20250301-142510-100", True)],
    # No sidecar: figures from the snapshot, peaks from the replayed trace.
    1: [("resnet50_train", "exit", "20250301-142510-200", False)],
    # A SIGUSR1 dump, then the exit dump: the latest file is the rank's row.
    2: [
        ("small_pool_mixed", "signal", "20250301-142505-000", True),
        ("resnet50_train", "exit", "20250301-142510-300", True),
    ],
    # An OOM dump, then the exit dump: the OOM one is the rank's row.
    3: [
        ("fragmentation_oom", "oom", "20250301-142501-318", True),
        ("resnet50_train", "exit", "20250301-142510-400", True),
    ],
}


def capture_name(rank: int, reason: str, stamp: str) -> str:
    return f"gpu-node-{rank // 2}_pid{4242 + rank}_rank{rank}_cuda{rank % 2}_{reason}_{stamp}"


def make_rank_dir(root: Path, layout: dict = LAYOUT, world_size: int | None = None) -> Path:
    """Copies of the bundled snapshots under capture-style names, with sidecars
    carrying rank, world size, reason and the allocator counters of NAME.json."""
    root.mkdir(parents=True, exist_ok=True)
    world = world_size or len(layout)
    for rank, files in layout.items():
        for name, reason, stamp, sidecar in files:
            stem = capture_name(rank, reason, stamp)
            shutil.copyfile(DATA / f"{name}.pickle", root / f"{stem}.pickle")
            if sidecar:
                side = dict(expected_for(DATA / f"{name}.pickle"))
                side.update(
                    name=stem,
                    reason=reason,
                    rank=rank,
                    local_rank=rank % 2,
                    world_size=world,
                    device=rank % 2,
                    host=f"gpu-node-{rank // 2}",
                    pid=4242 + rank,
                )
                (root / f"{stem}.json").write_text(json.dumps(side))
    # What else such a directory holds: an in-progress write, notes, an unranked file.
    (
        root / f".{capture_name(0, 'signal', '20250301-142511-000')}.pickle.gpu-node-0.4242.3.tmp"
    ).write_bytes(b"\x80\x04partial")
    (root / "notes.txt").write_text("run 17\n")
    shutil.copyfile(DATA / "small_pool_mixed.pickle", root / "baseline.pickle")
    return root


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory) -> Path:
    return make_rank_dir(tmp_path_factory.mktemp("ranks") / "snapshots")


@pytest.fixture(scope="module")
def overview(rank_dir):
    return load_ranks(rank_dir)


def counters(name: str) -> dict:
    return expected_for(DATA / f"{name}.pickle")["memory_stats"]


def test_temp_names():
    assert is_temp_name(".x_rank0_cuda0_oom_20250301-142501-318.pickle.host.12.0.tmp")
    assert is_temp_name(".hidden.pickle") and is_temp_name("x.pickle.tmp")
    assert not is_temp_name("host_pid1_rank0_cuda0_oom_20250301-142501-318.pickle")


def test_name_and_sidecar_parsing(rank_dir):
    rf = read_rank_file(rank_dir / f"{capture_name(3, 'oom', '20250301-142501-318')}.pickle")
    assert (rf.rank, rf.reason, rf.device, rf.host, rf.pid, rf.world_size) == (
        3,
        "oom",
        1,
        "gpu-node-1",
        4245,
        4,
    )
    assert rf.sidecar["memory_stats"] == counters("fragmentation_oom")
    bare = read_rank_file(rank_dir / f"{capture_name(1, 'exit', '20250301-142510-200')}.pickle")
    assert (bare.rank, bare.reason, bare.device, bare.sidecar) == (1, "exit", 1, None)
    assert bare.stamp == "20250301-142510-200"


def test_sidecar_rank_wins_and_null_rank_falls_back_to_name(tmp_path):
    # A single-process capture writes "rank": null in the sidecar and rank0 in the name.
    stem = capture_name(0, "exit", "20250301-142510-100")
    shutil.copyfile(DATA / "small_pool_mixed.pickle", tmp_path / f"{stem}.pickle")
    (tmp_path / f"{stem}.json").write_text(json.dumps({"rank": None, "reason": "exit"}))
    assert read_rank_file(tmp_path / f"{stem}.pickle").rank == 0
    (tmp_path / f"{stem}.json").write_text(json.dumps({"rank": 5, "reason": "manual"}))
    rf = read_rank_file(tmp_path / f"{stem}.pickle")
    assert (rf.rank, rf.reason) == (5, "manual")


def test_scan_skips_temps_and_unranked(rank_dir):
    by_rank, skipped = scan_directory(rank_dir)
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert skipped == ["baseline.pickle"]
    # Preferred first: rank 3's OOM dump, rank 2's latest dump.
    assert by_rank[3][0].reason == "oom" and len(by_rank[3]) == 2
    assert by_rank[2][0].reason == "exit" and by_rank[2][1].reason == "signal"
    assert all(not f.name.startswith(".") for fs in by_rank.values() for f in fs)


def test_figures_are_the_allocator_counters(overview):
    expect = {0: "resnet50_train", 1: "resnet50_train", 2: "resnet50_train", 3: "fragmentation_oom"}
    assert [e.rank for e in overview.ranks] == [0, 1, 2, 3]
    for e in overview.ranks:
        c = counters(expect[e.rank])
        assert e.error is None
        assert e.reserved_bytes == c["reserved_bytes.all.current"], e.rank
        assert e.allocated_bytes == c["allocated_bytes.all.current"], e.rank
        assert e.active_bytes == c["active_bytes.all.current"], e.rank
        # Rank 1 has no sidecar: its peaks come from the replay and still agree.
        assert e.peak_reserved_bytes == c["reserved_bytes.all.peak"], e.rank
        assert e.peak_allocated_bytes == c["allocated_bytes.all.peak"], e.rank
        assert e.source == ("snapshot" if e.rank == 1 else "allocator counters")
    r3 = overview.entry(3)
    assert r3.oom and r3.oom_kind == "fragmentation"
    assert r3.verdict.startswith("fragmentation: 1.74 GiB is free inside 178 segments")
    assert r3.fragmentation > 0.99
    assert not overview.entry(0).oom and overview.world_size == 4


def test_outlier_is_the_oom_rank(overview):
    assert [e.rank for e in overview.outliers] == [3]
    r3 = overview.entry(3)
    assert r3.outlier_reasons[0] == "ran out of memory while other ranks did not"
    assert set(r3.deviations) == {
        "reserved_bytes",
        "allocated_bytes",
        "peak_reserved_bytes",
        "peak_allocated_bytes",
    }
    assert (
        r3.deviations["reserved_bytes"]
        == counters("fragmentation_oom")["reserved_bytes.all.current"]
        - counters("resnet50_train")["reserved_bytes.all.current"]
    )
    d = overview.to_dict()
    json.dumps(d)
    assert d["outlier_ranks"] == [3] and len(d["ranks"]) == 4
    assert [len(r["files"]) for r in d["ranks"]] == [1, 1, 2, 2]
    text = format_text(overview)
    assert "   3 *" in text and "ran out of memory" in text and "skipped" in text


def _entry(rank: int, reserved: int, oom: bool = False) -> RankEntry:
    rf = RankFile(f"r{rank}.pickle", rank, "exit", 0, None, None, "")
    return RankEntry(
        rank,
        rf,
        [rf],
        reserved_bytes=reserved,
        allocated_bytes=reserved // 2,
        peak_reserved_bytes=reserved,
        peak_allocated_bytes=reserved // 2,
        oom=oom,
    )


def test_two_ranks_flag_only_the_one_holding_more():
    entries = [_entry(0, 10 * GiB), _entry(1, 11 * GiB + 1)]
    flag_outliers(entries)
    assert [e.outlier for e in entries] == [False, True]
    assert entries[1].deviations["reserved_bytes"] == GiB + 1


def test_thresholds_relative_and_absolute():
    # 15 % above but only 150 MiB: not an outlier (absolute floor of 256 MiB).
    small = [_entry(i, GiB) for i in range(3)] + [_entry(3, GiB + 150 * (1 << 20))]
    flag_outliers(small)
    assert not any(e.outlier for e in small)
    # 300 MiB above, but only 3 % of 10 GiB: not an outlier (relative threshold of 10 %).
    big = [_entry(i, 10 * GiB) for i in range(3)] + [_entry(3, 10 * GiB + 300 * (1 << 20))]
    flag_outliers(big)
    assert not any(e.outlier for e in big)
    # 1.2 GiB above 10 GiB: both thresholds passed.
    out = [_entry(i, 10 * GiB) for i in range(7)] + [_entry(7, 11 * GiB + OUTLIER_ABSOLUTE)]
    flag_outliers(out)
    assert [e.rank for e in out if e.outlier] == [7]


def test_everyone_oom_is_no_outlier():
    entries = [_entry(i, GiB, oom=True) for i in range(4)]
    flag_outliers(entries)
    assert not any(e.outlier for e in entries)


def test_broken_file_is_a_row_with_an_error(tmp_path):
    d = make_rank_dir(tmp_path / "d", {0: LAYOUT[0][:1], 1: LAYOUT[0][:1]})
    (victim,) = d.glob("*_rank1_*.pickle")
    victim.write_bytes(b"not a snapshot")
    ov = load_ranks(d)
    r1 = ov.entry(1)
    assert r1.error
    assert r1.reserved_bytes == counters("resnet50_train")["reserved_bytes.all.current"]
    assert r1.fragmentation is None


def test_empty_or_missing_directory(tmp_path):
    with pytest.raises(SnapshotError, match="no snapshot files with a rank"):
        load_ranks(tmp_path)
    with pytest.raises(SnapshotError, match="not a directory"):
        load_ranks(tmp_path / "nope")
