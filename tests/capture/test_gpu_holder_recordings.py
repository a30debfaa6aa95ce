"""The committed GPU recordings of a holder of nearly the whole GPU, checked against their truth.

``tests/data/gpu_holder/`` was written on an H200 by
``tests/workloads/other_process_holds.py --scenario allocator|cublas``: the capture's
``oom`` snapshot and sidecar, and what the programs themselves knew (``.truth.json``).
No GPU is needed here; the files must be there (a missing one fails, it never skips).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_helpers import figures_from_snapshot, figures_from_stats

MiB = 1 << 20
DATA = Path(__file__).resolve().parents[1] / "data" / "gpu_holder"
NAMES = ("holder_allocator_oom", "holder_cublas_oom")


def _load(name: str) -> tuple[dict, dict]:
    side = json.loads((DATA / f"{name}.json").read_text())
    truth = json.loads((DATA / f"{name}.truth.json").read_text())
    return side, truth


@pytest.mark.parametrize("name", NAMES)
def test_the_whole_gpu_table_is_what_the_programs_saw(name):
    side, truth = _load(name)
    assert side["reason"] == "oom" and truth["sidecar"] == f"{name}.json"
    gpu = side["gpu_memory"]
    used = sum(p["used_bytes"] or 0 for p in gpu["processes"])
    assert abs(gpu["total_bytes"] - gpu["free_bytes"] - used) <= 64 * MiB
    [holder] = [p for p in gpu["processes"] if p["pid"] == truth["holder"]["pid"]]
    assert holder["used_bytes"] >= truth["holder"]["bytes"] and not holder["this_process"]
    assert "--hold-serve" in holder["cmdline"] and "--hold-serve" in truth["holder"]["cmdline"]
    [me] = [p for p in gpu["processes"] if p["this_process"]]
    assert me["pid"] == truth["training"]["pid"] == side["pid"]
    # The training measured the device's free bytes in its except block, just before
    # the capture took the table; nothing was allocated in between.
    assert abs(gpu["free_bytes"] - truth["training"]["free_at_failure"]) <= 2 * MiB
    stats = truth["training"]["memory_stats"]
    assert side["memory_stats"]["reserved_bytes.all.current"] == stats["reserved_bytes.all.current"]


@pytest.mark.parametrize("name", NAMES)
def test_the_snapshot_holds_the_allocator_s_own_figures(name):
    side, _ = _load(name)
    path = DATA / f"{name}.pickle.xz"
    assert figures_from_snapshot(path, side["device"]) == figures_from_stats(side["memory_stats"])


def test_the_allocator_oom_is_the_allocator_s():
    side, truth = _load("holder_allocator_oom")
    training = truth["training"]
    assert "outside_allocator_oom" not in side
    assert training["allocator_oom"] is True and training["exception_type"] == "OutOfMemoryError"
    assert side["oom_message"] == training["error"]
    assert side["oom_request"] == training["at_allocator_oom"]["alloc"]
    assert side["oom_device_free"] == training["at_allocator_oom"]["device_free"]
    assert side["memory_stats"]["num_ooms"] == 1


def test_the_cublas_failure_is_an_outside_allocator_oom():
    side, truth = _load("holder_cublas_oom")
    training = truth["training"]
    found = side["outside_allocator_oom"]
    assert found == {
        **found,
        "library": "cuBLAS",
        "error": training["error_first_line"],
        "exception_type": training["exception_type"],
    }
    assert "CUBLAS_STATUS_ALLOC_FAILED" in found["error"] and "cublasCreate" in found["error"]
    assert training["phase"] == "backward" and training["allocator_oom"] is False
    # Innermost last: the training's backward call, into autograd's engine.
    names = [f.rsplit(" ", 1)[1] for f in found["stack"]]
    assert names[0] == "<module>" and "train" in names and names[-1] == "_engine_run_backward"
    assert side["oom_message"] == training["error"]
    assert side["memory_stats"]["num_ooms"] == 0 == training["memory_stats"]["num_ooms"]
    assert "oom_request" not in side
