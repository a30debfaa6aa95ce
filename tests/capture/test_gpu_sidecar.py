"""The sidecar's record of the whole GPU (``gpu_memory``), written without a GPU.

Doubles stand in at the CUDA/NVML boundary only: the fake backend's ``mem_get_info``
and ``device_uuid``, a fake ``pynvml`` module, a fake ``nvidia-smi`` answer.  The
recorder, the sidecar writer, the viewer's loader, :mod:`gpu_accounting`, the OOM
verdict and the summary are the real ones, and the figures they print are checked
to the byte against the values the doubles returned.
"""

from __future__ import annotations

import json
import os
import subprocess
from types import SimpleNamespace

import pytest
from capture_fakes import FakeBackend, FakeOutOfMemoryError

from vramscope.capture import gpu, record
from vramscope.capture.backend import set_backend
from vramscope.viewer.model.analysis.gpu_accounting import gpu_accounting
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.reports.summary import format_text, summarize, summary_timeline

MiB = 1 << 20
GiB = 1 << 30
TOTAL = 24 * GiB
FREE = 2 * MiB
UUID = "5a1b2c3d-0000-1111-2222-333344445555"  # as torch writes it (no "GPU-")
OTHER_PID = 4121
OTHER_BYTES = 19 * GiB + 512 * MiB
OUTSIDE = 500 * MiB  # this process beyond its caching allocator (the CUDA context, ...)
CMDLINES = {OTHER_PID: "python train_old.py"}
OTHER_TOTAL = 140 * GiB  # NVML's device 0, beside this process's device (NVML's 1)
OTHER_FREE = 131 * GiB + 200 * MiB
OTHER_UUID = "GPU-ffffffff-0000-0000-0000-000000000000"


class GpuFake(FakeBackend):
    """The fake CUDA of the capture tests, with the two calls ``gpu_memory`` needs, and
    oom trace entries that carry ``device_free`` as torch's do."""

    def __init__(self, **kw) -> None:
        super().__init__(limit=4 * GiB, **kw)
        self.free = FREE
        self.fail_mem_get_info = False

    def mem_get_info(self, device: int) -> tuple[int, int]:
        if self.fail_mem_get_info:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.free, TOTAL

    def device_uuid(self, device: int) -> str:
        return UUID

    def oom(self, size: int) -> None:
        self.num_ooms += 1
        if self.history is not None:
            self.trace.append(
                {
                    "action": "oom",
                    "addr": 0,
                    "size": size,
                    "stream": 0,
                    "device_free": self.free,
                    "frames": [],
                }
            )
        for obs in self.observers:
            obs(0, size, self.limit, self.free)
        raise FakeOutOfMemoryError(f"CUDA out of memory. Tried to allocate {size} bytes.")


class FakeNvml:
    """``pynvml`` with one GPU (another one beside it, to be told apart by UUID)."""

    def __init__(self, processes) -> None:
        self.processes = processes
        self.inits = 0
        self.fail_init = False
        self.fail_other = False  # device 0's memory cannot be read
        self.memory_queries: list[str] = []

    def nvmlInit(self):
        self.inits += 1
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"handle{i}"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-" + UUID if h == "handle1" else "GPU-ffffffff-0000-0000-0000-000000000000"

    def nvmlDeviceGetMemoryInfo(self, h):
        self.memory_queries.append(h)
        if h == "handle1":
            return SimpleNamespace(total=TOTAL, used=TOTAL - FREE, free=FREE)
        if self.fail_other:
            raise RuntimeError("GPU is lost")
        return SimpleNamespace(total=OTHER_TOTAL, used=OTHER_TOTAL - OTHER_FREE, free=OTHER_FREE)

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200" if h == "handle0" else "Fake GPU 24GB"

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        assert h == "handle1"
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes]

    def nvmlSystemGetProcessName(self, pid):
        return b"/usr/bin/python3"


@pytest.fixture
def fake():
    fb = GpuFake()
    set_backend(fb)
    return fb


@pytest.fixture
def nvml(monkeypatch):
    nv = FakeNvml([(OTHER_PID, OTHER_BYTES), (os.getpid(), 3 * GiB + OUTSIDE)])
    monkeypatch.setattr(gpu, "_nvml_module", lambda: nv)
    monkeypatch.setattr(gpu, "_read_cmdline", CMDLINES.get)
    monkeypatch.setattr(gpu, "_run_smi", _no_subprocess)
    return nv


def _no_subprocess():
    raise AssertionError("nvidia-smi ran although NVML is importable")


def _no_nvml():
    raise ImportError("No module named 'pynvml'")


def _oom_run(fake, tmp_path):
    """3 GiB reserved, then a 2 GiB request over the 4 GiB limit: the OOM dump, then exit."""
    with pytest.raises(FakeOutOfMemoryError):
        with record(out=tmp_path) as rec:
            for _ in range(3):
                fake.alloc(GiB)
            fake.alloc(2 * GiB)
    assert rec.last_oom_path is not None
    return rec


def _side(path):
    return json.loads(path.with_suffix(".json").read_text())


def test_the_oom_sidecar_records_the_whole_gpu_at_the_oom(fake, nvml, tmp_path):
    rec = _oom_run(fake, tmp_path)
    g = _side(rec.last_oom_path)["gpu_memory"]
    assert g["device"] == 0 and g["pid"] == os.getpid()
    assert (g["total_bytes"], g["free_bytes"]) == (TOTAL, FREE)
    assert g["uuid"] == "GPU-" + UUID and g["source"] == "nvml"
    assert g["nvml_device"] == {
        "index": 1,
        "total_bytes": TOTAL,
        "used_bytes": TOTAL - FREE,
        "free_bytes": FREE,
    }
    assert g["processes"] == [
        {
            "pid": OTHER_PID,
            "used_bytes": OTHER_BYTES,
            "name": "/usr/bin/python3",
            "cmdline": "python train_old.py",
            "this_process": False,
        },
        {
            "pid": os.getpid(),
            "used_bytes": 3 * GiB + OUTSIDE,
            "name": "/usr/bin/python3",
            "cmdline": None,
            "this_process": True,
        },
    ]
    assert "processes_missing" not in g and "error" not in g
    assert nvml.inits == 1  # once per process: the exit dump reused it


def test_the_sidecar_lists_every_nvml_device_with_its_free_memory(fake, nvml, tmp_path):
    rec = _oom_run(fake, tmp_path)
    g = _side(rec.last_oom_path)["gpu_memory"]
    assert g["devices"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": OTHER_UUID,
            "total_bytes": OTHER_TOTAL,
            "free_bytes": OTHER_FREE,
            "this_device": False,
        },
        {
            "index": 1,
            "name": "Fake GPU 24GB",
            "uuid": "GPU-" + UUID,
            "total_bytes": TOTAL,
            "free_bytes": FREE,
            "this_device": True,
        },
    ]
    assert "devices_missing" not in g


def test_a_device_nvml_cannot_read_is_listed_without_figures(fake, nvml, tmp_path):
    nvml.fail_other = True
    rec = _oom_run(fake, tmp_path)
    first = _side(rec.last_oom_path)["gpu_memory"]["devices"][0]
    assert first["index"] == 0 and first["free_bytes"] is None and first["total_bytes"] is None
    assert "GPU is lost" in first["error"]


def test_without_nvml_the_devices_are_missing_and_the_dump_is_written(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "_nvml_module", _no_nvml)
    monkeypatch.setattr(gpu, "_run_smi", lambda: "")
    rec = _oom_run(fake, tmp_path)
    g = _side(rec.last_oom_path)["gpu_memory"]
    assert "devices" not in g and "NVML is not installed" in g["devices_missing"]
    assert g["free_bytes"] == FREE


def test_the_accounting_adds_up_to_the_device_total_exactly(fake, nvml, tmp_path):
    rec = _oom_run(fake, tmp_path)
    acc = gpu_accounting(load_snapshot(rec.last_oom_path, use_cache=False))
    assert acc.known and acc.taken_at == "oom" and acc.source == "nvml"
    assert acc.reserved_bytes == 3 * GiB
    assert acc.this_process_bytes == 3 * GiB + OUTSIDE
    assert acc.outside_allocator_bytes == OUTSIDE
    assert [(h.pid, h.used_bytes, h.command) for h in acc.others] == [
        (OTHER_PID, OTHER_BYTES, "python train_old.py")
    ]
    unexplained = TOTAL - FREE - 3 * GiB - OUTSIDE - OTHER_BYTES
    assert acc.unexplained_bytes == unexplained == 1034 * MiB
    assert sum(n for _, n, _ in acc.rows()) == TOTAL
    assert [n for _, n, _ in acc.rows()] == [3 * GiB, OUTSIDE, OTHER_BYTES, unexplained, FREE]


def test_the_oom_verdict_names_who_held_the_full_gpu(fake, nvml, tmp_path):
    rec = _oom_run(fake, tmp_path)
    snap = load_snapshot(rec.last_oom_path, use_cache=False)
    timeline, prepared = summary_timeline(snap)
    s = summarize(snap, timeline, prepared=prepared)
    # Without the other process the 2 GiB segment would have fitted: it comes first; then
    # the freest other device NVML listed, where the run's 5.49 GiB would have fitted.
    assert s["oom"]["verdict"] == (
        "the GPU was full because of another process: pid 4121 `python train_old.py` holds "
        "19.50 GiB, this process 500.00 MiB outside the allocator, 1.01 GiB unexplained, "
        "2.00 MiB free; the allocator could have had 3.00 GiB (3.00 GiB reserved + 2.00 MiB "
        "free), and without pid 4121 its new 2.00 GiB segment would have fitted (19.50 GiB "
        "free); device 0 (NVIDIA H200) has 131.20 GiB free: CUDA_VISIBLE_DEVICES=0; within "
        "the 3.00 GiB: capacity: every segment is full and the GPU has too little free "
        "memory (2.00 MiB free on the device, a new segment needs 2.00 GiB)"
    )
    acc = s["gpu_accounting"]
    assert acc["known"] and acc["total_bytes"] == TOTAL
    assert sum(r["bytes"] for r in acc["rows"]) == TOTAL
    assert [r["kind"] for r in acc["rows"]] == [
        "reserved",
        "outside_allocator",
        "process",
        "unexplained",
        "free",
    ]
    text = format_text(s).splitlines()
    head = text.index("the whole GPU (device 0, at the oom dump, processes from NVML): 24.00 GiB")
    assert text[head + 1 : head + 6] == [
        "    3.00 GiB  this process: reserved by PyTorch",
        "  500.00 MiB  this process: outside the allocator (CUDA context, cuBLAS/cuDNN, "
        "NCCL, other libraries)",
        "   19.50 GiB  pid 4121 `python train_old.py`",
        "    1.01 GiB  unexplained",
        "    2.00 MiB  free",
    ]


def test_a_later_dump_never_names_the_holders_of_an_earlier_oom(fake, nvml, tmp_path):
    rec = _oom_run(fake, tmp_path)
    (exit_path,) = [p for p in rec.paths if "_exit_" in p.name]
    snap = load_snapshot(exit_path, use_cache=False)
    timeline, prepared = summary_timeline(snap)
    s = summarize(snap, timeline, prepared=prepared)
    assert s["oom"] is not None and "the GPU had too little left" not in s["oom"]["verdict"]
    assert s["gpu_accounting"]["taken_at"] == "exit"  # the table says which instant it is
    assert "the whole GPU (device 0, at the exit dump" in format_text(s)


def test_at_the_process_limit_the_verdict_names_nobody(fake, nvml, tmp_path):
    fake.free = 10 * GiB  # the device had room: the 4 GiB limit refused the segment
    rec = _oom_run(fake, tmp_path)
    snap = load_snapshot(rec.last_oom_path, use_cache=False)
    s = summarize(snap, summary_timeline(snap)[0])
    assert "memory limit" in s["oom"]["verdict"]
    assert "the GPU had too little left" not in s["oom"]["verdict"]


def test_without_nvml_nvidia_smi_gives_the_processes_of_this_gpu(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "_nvml_module", _no_nvml)
    monkeypatch.setattr(gpu, "_read_cmdline", CMDLINES.get)
    answer = (
        f"GPU-{UUID}, {OTHER_PID}, 19968, /usr/bin/python3\n"
        f"GPU-ffffffff-0000-0000-0000-000000000000, 777, 1000, /usr/bin/other\n"
        f"GPU-{UUID}, {os.getpid()}, 3572, /usr/bin/python3\n"
        f"GPU-{UUID}, 99, [N/A], /usr/bin/quiet, with a comma\n"
    )
    monkeypatch.setattr(gpu, "_run_smi", lambda: answer)
    rec = _oom_run(fake, tmp_path)
    g = _side(rec.last_oom_path)["gpu_memory"]
    assert g["source"] == "nvidia-smi"
    assert [(p["pid"], p["used_bytes"], p["this_process"]) for p in g["processes"]] == [
        (OTHER_PID, 19968 * MiB, False),
        (os.getpid(), 3572 * MiB, True),
        (99, None, False),
    ]
    assert g["processes"][2]["name"] == "/usr/bin/quiet, with a comma"
    acc = gpu_accounting(load_snapshot(rec.last_oom_path, use_cache=False))
    assert acc.outside_allocator_bytes == 3572 * MiB - 3 * GiB
    assert sum(n for _, n, _ in acc.rows()) == TOTAL
    assert any("whole MiB" in n for n in acc.notes)
    assert any("pid 99" in n and "residual" in n for n in acc.notes)


@pytest.mark.parametrize(
    "failure,reason",
    [
        (FileNotFoundError("nvidia-smi"), "neither NVML (nvidia-ml-py) nor nvidia-smi"),
        (subprocess.TimeoutExpired("nvidia-smi", 2.0), "did not answer within 2 s"),
        (RuntimeError("nvidia-smi exited with 9: NVIDIA-SMI has failed"), "exited with 9"),
    ],
)
def test_a_failing_process_list_leaves_a_reason_and_the_dump(
    fake, monkeypatch, tmp_path, failure, reason
):
    monkeypatch.setattr(gpu, "_nvml_module", _no_nvml)

    def fail():
        raise failure

    monkeypatch.setattr(gpu, "_run_smi", fail)
    rec = _oom_run(fake, tmp_path)
    g = _side(rec.last_oom_path)["gpu_memory"]
    assert "processes" not in g and reason in g["processes_missing"]
    assert (g["total_bytes"], g["free_bytes"]) == (TOTAL, FREE)
    acc = gpu_accounting(load_snapshot(rec.last_oom_path, use_cache=False))
    # Known in total, not by holder: everything beyond reserved is the residual.
    assert acc.known and acc.source is None and acc.outside_allocator_bytes is None
    assert acc.unexplained_bytes == TOTAL - FREE - 3 * GiB
    assert sum(n for _, n, _ in acc.rows()) == TOTAL
    assert any(reason in n for n in acc.notes)


def test_the_real_nvidia_smi_call_without_the_program(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "_nvml_module", _no_nvml)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    g = gpu.whole_gpu(fake, 0)
    assert "processes" not in g and "nor nvidia-smi" in g["processes_missing"]


def test_nvml_that_cannot_start_runs_no_subprocess(fake, nvml, tmp_path):
    nvml.fail_init = True
    rec = _oom_run(fake, tmp_path)
    g = _side(rec.last_oom_path)["gpu_memory"]
    assert "processes" not in g and "NVML cannot start" in g["processes_missing"]
    assert "Shared Library Not Found" in g["processes_missing"]


def test_mem_get_info_failing_leaves_the_dump_and_says_not_known(fake, nvml, tmp_path):
    fake.fail_mem_get_info = True
    rec = _oom_run(fake, tmp_path)
    g = _side(rec.last_oom_path)["gpu_memory"]
    assert g["total_bytes"] is None and "illegal memory access" in g["error"]
    acc = gpu_accounting(load_snapshot(rec.last_oom_path, use_cache=False))
    assert not acc.known and "illegal memory access" in (acc.reason or "")
    assert acc.rows() == []


def test_a_backend_without_the_calls_still_dumps(monkeypatch, tmp_path):
    """An older backend (the plain fake): the sidecar says why, the snapshot is written."""
    monkeypatch.setattr(gpu, "_nvml_module", _no_nvml)
    fb = FakeBackend()
    set_backend(fb)
    with record(out=tmp_path) as rec:
        fb.alloc(MiB)
    (path,) = rec.paths
    g = _side(path)["gpu_memory"]
    assert g["total_bytes"] is None and "mem_get_info failed" in g["error"]
    assert "processes" not in g and g["processes_missing"]


def test_another_pid_namespace_is_said_and_the_residual_shows_it(fake, monkeypatch, tmp_path):
    """In a container NVML lists host pids: this process is not found by its pid, so its
    host-pid row counts as another process; the residual goes negative by its size."""
    nv = FakeNvml([(OTHER_PID, OTHER_BYTES), (987654, 3 * GiB + OUTSIDE)])
    monkeypatch.setattr(gpu, "_nvml_module", lambda: nv)
    monkeypatch.setattr(gpu, "_read_cmdline", lambda pid: None)
    rec = _oom_run(fake, tmp_path)
    acc = gpu_accounting(load_snapshot(rec.last_oom_path, use_cache=False))
    assert acc.this_process_bytes is None and acc.outside_allocator_bytes is None
    assert acc.unexplained_bytes == TOTAL - FREE - 3 * GiB - OTHER_BYTES - 3 * GiB - OUTSIDE
    assert acc.unexplained_bytes < 0
    assert sum(n for _, n, _ in acc.rows()) == TOTAL
    assert any("another PID namespace" in n for n in acc.notes)
