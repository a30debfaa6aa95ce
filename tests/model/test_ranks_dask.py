"""A directory of per-rank snapshots read three ways - in this process one file after the
other, on a pool of local processes (``--jobs``), and as tasks of a real Dask cluster
(``--scheduler``) - gives the same overview: rows, outliers, medians, text and JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA
from tests.model.test_ranks import make_rank_dir
from vramscope.viewer.model.core import parallel
from vramscope.viewer.model.reports import ranks

DDP = DATA / "ddp_2ranks"

# rank -> [(bundled snapshot, reason, time stamp, write a sidecar?)]: eight distinct ranks
# from real recordings (an OOM dump, sidecars or not, a rank with two files).
EIGHT = {
    0: [("resnet50_train", "exit", "20250301-142510-100", True)],
    1: [("resnet50_train", "exit", "20250301-142510-200", False)],
    2: [
        ("small_pool_mixed", "signal", "20250301-142505-000", True),
        ("gpt2_oom", "exit", "20250301-142510-300", True),
    ],
    3: [
        ("fragmentation_oom", "oom", "20250301-142501-318", True),
        ("resnet50_train", "exit", "20250301-142510-400", True),
    ],
    4: [("capacity_oom", "oom", "20250301-142502-000", False)],
    5: [("cuda_graph_pool", "exit", "20250301-142510-500", True)],
    6: [("whatif_default", "exit", "20250301-142510-600", True)],
    7: [("whatif_expandable", "exit", "20250301-142510-700", False)],
}


@pytest.fixture(scope="module")
def eight(tmp_path_factory) -> Path:
    d = make_rank_dir(tmp_path_factory.mktemp("eight") / "snapshots", EIGHT, world_size=9)
    # A ninth rank whose file is damaged: its row says so, the same way everywhere.
    (d / "gpu-node-4_pid4250_rank8_cuda0_exit_20250301-142510-800.pickle").write_bytes(
        b"\x80\x04not a snapshot"
    )
    return d


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Path:
    """The DDP directory under another name (relative paths and copies of real files)."""
    d = tmp_path_factory.mktemp("ddp") / "copy"
    shutil.copytree(DDP, d)
    return d


def views(ov: ranks.RankOverview) -> tuple[str, str]:
    return json.dumps(ov.to_dict(), sort_keys=True), ranks.format_text(ov)


def split_everywhere(ov: ranks.RankOverview) -> bool:
    """Every rank whose file loaded came back with what its memory is (so the views
    compared hold the split, made where the file was read)."""
    return all(e.categories_at_peak for e in ov.ranks if not e.error)


COMPARED: list[str] = []


@pytest.mark.parametrize("which", ["ddp", "copies", "eight"])
def test_serial_and_pool_give_the_same_overview(which, eight, copies, monkeypatch):
    d = {"ddp": DDP, "copies": copies, "eight": eight}[which]
    calls = []
    real = parallel._pooled
    monkeypatch.setattr(parallel, "_pooled", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    serial = ranks.load_ranks(d, jobs=1, use_cache=False)
    assert not calls
    pooled = ranks.load_ranks(d, jobs=2, use_cache=False)
    assert calls == [2]  # the pool ran
    assert views(serial) == views(pooled)
    assert split_everywhere(pooled)
    COMPARED.append(which)
    if which == "eight":
        assert len(serial.ranks) == 9 and serial.entry(8).error
        assert {e.rank for e in serial.outliers} >= {3, 4}  # the OOM dumps
        assert serial.entry(2).file.name.startswith("gpu-node-1_pid4244_rank2_cuda0_exit")


def test_progress_and_cancel_on_the_pool(eight):
    from vramscope.viewer.model.core.errors import LoadCancelled

    seen = []
    ranks.load_ranks(eight, progress=lambda i, n, name: seen.append((i, n)), jobs=2)
    assert seen[0] == (0, 9) and seen[-1] == (9, 9) and len(seen) == 10
    with pytest.raises(LoadCancelled):
        ranks.load_ranks(eight, cancelled=lambda: True, jobs=2)


def test_small_directories_are_read_here_by_default(monkeypatch):
    calls = []
    monkeypatch.setattr(parallel, "_pooled", lambda *a, **k: calls.append(a) or [])
    ranks.load_ranks(DDP)  # < POOL_MIN_BYTES of files: no pool
    assert not calls


def run_cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "summary", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cli_jobs_gives_the_same_text_and_json(eight):
    for fmt in ([], ["--json"]):
        assert run_cli(str(eight), "--jobs", "1", *fmt) == run_cli(str(eight), "--jobs", "2", *fmt)


def test_cli_refuses_jobs_and_scheduler_on_a_file():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramscope.viewer",
            "summary",
            str(DATA / "gpt2_oom.pickle"),
            "--jobs",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "need a directory" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "summary", str(DDP), "--jobs", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "positive" in out.stderr


# -- a real Dask cluster -----------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip(
        "distributed",
        reason="dask[distributed] is not installed (make install-test "
        "installs it where a wheel exists: pip install '.[dask]')",
    )
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as c:
        yield c


@pytest.mark.parametrize("which", ["ddp", "eight"])
def test_the_cluster_gives_the_same_overview(which, eight, cluster):
    d = {"ddp": DDP, "eight": eight}[which]
    serial = ranks.load_ranks(d, jobs=1, use_cache=False)
    on_cluster = ranks.load_ranks(d, scheduler=cluster.scheduler_address, use_cache=False)
    assert views(on_cluster) == views(serial)
    assert split_everywhere(on_cluster)
    # ... and through a Client of the caller's own.
    from distributed import Client

    with Client(cluster.scheduler_address, set_as_default=False) as client:
        assert views(ranks.load_ranks(d, scheduler=client)) == views(serial)
        # Each file was read by a worker: the rows came back, not the snapshots.
        assert client.run(lambda: os.getpid()).keys()


def test_a_directory_only_the_workers_see(eight, cluster, monkeypatch):
    """Listed by a task too when it is no directory here (a cluster's own filesystem)."""
    real_isdir = os.path.isdir
    hidden = os.fspath(eight)
    monkeypatch.setattr(
        ranks.os.path, "isdir", lambda p: False if os.fspath(p) == hidden else real_isdir(p)
    )
    ov = ranks.load_ranks(hidden, scheduler=cluster.scheduler_address)
    monkeypatch.undo()
    assert views(ov) == views(ranks.load_ranks(eight, jobs=1))


def test_cli_scheduler_gives_the_same_text_and_json(eight, cluster):
    for fmt in ([], ["--json"]):
        assert run_cli(str(eight), "--scheduler", cluster.scheduler_address, *fmt) == run_cli(
            str(eight), "--jobs", "1", *fmt
        )


def test_an_unreachable_scheduler_is_one_line(monkeypatch):
    pytest.importorskip("distributed", reason="dask[distributed] is not installed")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(ranks, "SCHEDULER_TIMEOUT_S", 2)
    with pytest.raises(ranks.ClusterError, match="cannot reach the Dask scheduler"):
        ranks.load_ranks(DDP, scheduler=f"tcp://127.0.0.1:{port}")


def test_every_directory_was_compared():
    """The count: whatever was skipped above, the three directories were compared
    serially and on the pool (this runs last in the file)."""
    assert sorted(COMPARED) == ["copies", "ddp", "eight"]
