"""advise on the H200 holder recordings (tests/data/gpu_holder): the recorded peak is the
recording's own counter, a freer device is named from the sidecar's list of every NVML
device, and the batch answer after an OOM outside the allocator does not claim a fit the
run never had.  Real subprocesses of the CLI; a sidecar with a device list is derived in
tmp_path from a committed recording (the committed files are never edited).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.gpu_verdicts import HOLDER, vramscope
from vramscope.viewer.model.core.units import format_bytes as fb

ROOT = Path(__file__).resolve().parents[2]


def test_recorded_peak_is_the_recording_s_counter_as_summary_says():
    snap = HOLDER / "holder_allocator_oom.pickle.xz"
    side = json.loads((HOLDER / "holder_allocator_oom.json").read_text())
    counter = side["memory_stats"]["reserved_bytes.all.peak"]
    a = json.loads(vramscope("advise", str(snap), "--json"))
    s = json.loads(vramscope("summary", str(snap), "--json"))
    # The allocator reserved more before the holder filled the GPU than it could have at
    # the OOM: a run simulated under the OOM's limit stops below the recording's peak.
    assert counter > a["memory_limit_bytes"]
    assert a["recorded_peak_reserved_bytes"] == counter == s["peak_reserved_bytes"]


def _with_devices(tmp_path: Path, name: str, others: list[tuple[int, int]]) -> tuple[Path, dict]:
    """A copy of the recording ``name`` whose sidecar lists NVML's devices: its own (index
    0) and ``others`` as (index, free bytes), all named as the real one is."""
    snap = tmp_path / f"{name}.pickle.xz"
    shutil.copy(HOLDER / f"{name}.pickle.xz", snap)
    side = json.loads((HOLDER / f"{name}.json").read_text())
    g = side["gpu_memory"]
    g["devices"] = [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": g["uuid"],
            "total_bytes": g["total_bytes"],
            "free_bytes": g["free_bytes"],
            "this_device": True,
        }
    ]
    g["devices"] += [
        {
            "index": i,
            "name": "NVIDIA H200",
            "uuid": f"GPU-{i:08d}",
            "total_bytes": g["total_bytes"],
            "free_bytes": free,
            "this_device": False,
        }
        for i, free in others
    ]
    (tmp_path / f"{name}.json").write_text(json.dumps(side))
    return snap, side


def _need(side: dict) -> int:
    """The run's peak on a device: the recording's peak reserved counter plus what this
    process held outside the allocator (the driver's figure minus the allocator's)."""
    g = side["gpu_memory"]
    mine = next(p["used_bytes"] for p in g["processes"] if p["this_process"])
    reserved = side["memory_stats"]["reserved_bytes.all.current"]
    return side["memory_stats"]["reserved_bytes.all.peak"] + mine - reserved


def _said(snap: Path, name: str) -> tuple[str, str, dict]:
    """(summary's verdict line, summary --json's verdict, advise --json) of ``snap``."""
    key = "oom" if name == "holder_allocator_oom" else "outside_oom"
    text = vramscope("summary", str(snap))
    s = json.loads(vramscope("summary", str(snap), "--json"))[key]
    return text, s["verdict"], json.loads(vramscope("advise", str(snap), "--json"))


def test_the_freest_other_device_with_room_is_named_everywhere(tmp_path):
    for name in ("holder_allocator_oom", "holder_cublas_oom"):
        free3 = 131 * (1 << 30) + 200 * (1 << 20)
        snap, side = _with_devices(tmp_path, name, [(1, 2 << 30), (2, 100 << 30), (3, free3)])
        assert _need(side) < free3
        words = f"device 3 (NVIDIA H200) has {fb(free3)} free: CUDA_VISIBLE_DEVICES=3"
        text, verdict, a = _said(snap, name)
        assert f"; {words}" in verdict and verdict in text
        assert a["verdict"].endswith(verdict)
        first = a["remedies"][0]
        assert first["remedy"] == "free_gpu" and first["title"].endswith(", or pick a freer device")
        assert first["change"].endswith(f"; or run on another device: {words}")


def test_without_a_device_with_room_it_says_so(tmp_path):
    for name in ("holder_allocator_oom", "holder_cublas_oom"):
        snap, side = _with_devices(tmp_path, name, [(1, 2 << 30), (2, 5 << 30)])
        need = _need(side)
        assert need > 5 << 30
        words = (
            f"no other device had room for the run's {fb(need)} (the freest, device 2 "
            f"(NVIDIA H200), had {fb(5 << 30)} free)"
        )
        text, verdict, a = _said(snap, name)
        assert f"; {words}" in verdict and verdict in text
        assert "CUDA_VISIBLE_DEVICES" not in verdict
        first = a["remedies"][0]
        assert first["remedy"] == "free_gpu" and "freer device" not in first["title"]
        assert first["change"].endswith(f"; {words}") and "CUDA_VISIBLE" not in first["change"]


def test_without_the_device_list_nothing_is_claimed_about_other_devices():
    for name in ("holder_allocator_oom", "holder_cublas_oom"):
        _text, verdict, a = _said(HOLDER / f"{name}.pickle.xz", name)
        assert "other device" not in verdict and "CUDA_VISIBLE_DEVICES=" not in verdict
        assert "`CUDA_VISIBLE_DEVICES=N`" in a["remedies"][0]["change"]


def test_after_cublas_s_failure_no_batch_is_claimed_to_fit_the_allocator_s_limit():
    snap = HOLDER / "holder_cublas_oom.pickle.xz"
    side = json.loads((HOLDER / "holder_cublas_oom.json").read_text())
    a = json.loads(vramscope("advise", str(snap), "--json"))
    lim = a["memory_limit_bytes"]
    # The limit is the allocator's then plus the GPU's free memory: the recorded batch
    # stayed within it (its peak is the limit's reserved part) and still died.
    assert a["recorded_peak_reserved_bytes"] <= lim
    assert a["largest_scale_that_fits"] is None and a["largest_batch_that_fits"] is None
    want = (
        f"the run died outside PyTorch's allocator (cuBLAS, "
        f"{fb(side['gpu_memory']['free_bytes'])} free on the GPU): the {fb(lim)} limit "
        "counts the allocator alone, within which the recorded batch stayed and still "
        "failed, so no batch is judged to fit it"
    )
    assert a["batch_not_judged"] == want
    lines = vramscope("advise", str(snap)).splitlines()
    assert f"largest batch that fits: not judged: {want}" in lines
    assert not any(ln.startswith("largest batch scale that fits") for ln in lines)
    # An allocator OOM's batch is judged as before.
    b = json.loads(vramscope("advise", str(HOLDER / "holder_allocator_oom.pickle.xz"), "--json"))
    assert b["batch_not_judged"] is None and b["largest_scale_that_fits"] is not None
