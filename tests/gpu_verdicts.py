"""The verdicts expected on recordings where another process held the GPU, built from
what the recording program knew (its ``.truth.json``: the other process's pid and
bytes, this process's, the OOM's reserved and free memory) and the sidecar's process
list (the command line), never from the viewer's own figures.

Recordings: ``tests/data/gpu_accounting/`` (another process held 20 GiB; a 119.30 GiB
request that would have fitted without it) and ``tests/data/gpu_holder/`` (a holder of
nearly the whole H200: a training run's allocator OOM, and one that died because cuBLAS
could not create its handle).  A second OOM outside the allocator is derived from the
first gpu_accounting recording in a test's directory (:func:`derive_outside_oom`): its
allocator OOM event dropped, the sidecar given the capture's ``outside_allocator_oom``
field; every figure stays the recording's (there the other process held less than was
free: it is named, but not offered as the cause).
"""

from __future__ import annotations

import functools
import json
import lzma
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

from vramscope.viewer.model.core.units import format_bytes as fb

DATA = Path(__file__).parent / "data"
ACCOUNTING = DATA / "gpu_accounting"
HOLDER = DATA / "gpu_holder"
#: The error text torch raises when cuBLAS cannot create a handle (issue report's run).
CUBLAS_ERROR = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"


def truths() -> list[Path]:
    """The allocator OOMs another process caused: both folders' recordings."""
    found = sorted(ACCOUNTING.glob("*.truth.json"))
    return found + [HOLDER / "holder_allocator_oom.truth.json"]


def figures(truth: dict, side: dict) -> dict[str, int]:
    """What the recording program knew at the OOM, in one shape for both truth schemas:
    the other process's pid and bytes (the driver's figure the capture used), this
    process's reserved and allocated, the device's free memory and the new segment.  This
    process's driver figure comes from the sidecar where the truth has none (the holder
    recordings)."""
    if truth["schema"].startswith("vramscope-gpu-holder-truth"):
        holder, training = truth["holder"], truth["training"]
        at = training["at_allocator_oom"] or {}
        mine = next(p["used_bytes"] for p in side["gpu_memory"]["processes"] if p["this_process"])
        return {
            "pid": holder["pid"],
            "held": _used(holder, side),
            "self": mine,
            "reserved": training["reserved_at_failure"],
            "allocated": training["allocated_at_failure"],
            "free": training["free_at_failure"],
            "need": at.get("alloc", 0),
            "total": training["total"],
        }
    oom = truth["oom"]
    return {
        "pid": truth["other"]["pid"],
        "held": _used(truth["other"], side),
        "self": _used(truth["self"], side),
        "reserved": oom["reserved"],
        "allocated": oom["allocated"],
        "free": oom["device_free"],
        "need": oom["alloc"],
        "total": oom["mem_get_info_total"],
    }


def load(truth_path: Path) -> tuple[dict, Path, dict]:
    """(truth, snapshot path, sidecar) of one recording."""
    truth = json.loads(truth_path.read_text())
    snap = truth_path.parent / truth["snapshot"]
    side = json.loads((truth_path.parent / truth["sidecar"]).read_text())
    return truth, snap, side


def _used(truth_part: dict, side: dict) -> int:
    """The driver's figure the capture used (NVML's, else nvidia-smi's)."""
    nvml = side["gpu_memory"].get("source") == "nvml"
    return int(truth_part["nvml_used_bytes"] if nvml else truth_part["smi_used_bytes"])


def command_of(side: dict, pid: int) -> str:
    (p,) = [p for p in side["gpu_memory"]["processes"] if p["pid"] == pid]
    return p.get("cmdline") or p["name"]


def holder_verdict(truth: dict, side: dict, judgement: str) -> str:
    """The allocator OOM's verdict: the other process first, then ``judgement`` (the
    allocator's own, fragmentation or capacity) within what it could have had."""
    f = figures(truth, side)
    pid, held, mine = f["pid"], f["held"], f["self"]
    reserved, free, need = f["reserved"], f["free"], f["need"]
    assert free < need <= free + held, "the recording is not one the other process caused"
    could = reserved + free
    return (
        f"the GPU was full because of another process: pid {pid} "
        f"`{command_of(side, pid)}` holds {fb(held)}, this process "
        f"{fb(mine - reserved)} outside the allocator, {fb(free)} free; the allocator "
        f"could have had {fb(could)} ({fb(reserved)} reserved + {fb(free)} free), and "
        f"without pid {pid} its new {fb(need)} segment would have fitted "
        f"({fb(free + held)} free); within the {fb(could)}: {judgement}"
    )


def derive_outside_oom(truth_path: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """The recording as an OOM outside the allocator, written to ``out``: (its snapshot
    path, what its verdict must say, from the truth file)."""
    truth, snap_path, side = load(truth_path)
    with lzma.open(snap_path) as f:
        raw = pickle.load(f)
    raw["device_traces"] = [
        [e for e in tr if e.get("action") != "oom"] for tr in raw["device_traces"]
    ]
    name = "outside_" + snap_path.name.split(".pickle")[0]
    path = out / f"{name}.pickle.xz"
    with lzma.open(path, "wb") as f:
        pickle.dump(raw, f)
    for k in [k for k in side if k.startswith("oom_")]:
        side.pop(k)
    side["outside_allocator_oom"] = {
        "library": "cuBLAS",
        "error": CUBLAS_ERROR,
        "exception_type": "RuntimeError",
        "stack": ["train.py:41 step"],
    }
    side["snapshot_file"] = path.name
    (out / f"{name}.json").write_text(json.dumps(side))
    f = figures(truth, side)
    pid, held, mine = f["pid"], f["held"], f["self"]
    reserved, allocated = f["reserved"], f["allocated"]
    free = side["gpu_memory"]["free_bytes"]
    verdict = (
        f"cuBLAS could not create its handle ({CUBLAS_ERROR}); {fb(free)} free on the "
        f"GPU; pid {pid} `{command_of(side, pid)}` holds {fb(held)}; this process "
        f"{fb(reserved)} reserved by PyTorch ({fb(reserved - allocated)} of it unused), "
        f"{fb(mine - reserved)} outside the allocator; without pid {pid} the GPU would "
        f"have had {fb(free + held)} free"
    )
    return path, {"verdict": verdict, "pid": pid, "held": held, "free": free}


def cublas_verdict(truth: dict, side: dict) -> str:
    """The verdict of the recording that died of cuBLAS's handle (no allocator OOM)."""
    f = figures(truth, side)
    pid, held, free, reserved = f["pid"], f["held"], f["free"], f["reserved"]
    whole = wholly_free_segments(truth, side)
    releasable = (
        (f", {fb(whole)} in wholly free segments that torch.cuda.empty_cache() returns to the GPU")
        if whole
        else ""
    )
    return (
        f"cuBLAS could not create its handle ({truth['training']['error_first_line']}); "
        f"{fb(free)} free on the GPU; pid {pid} `{command_of(side, pid)}` holds "
        f"{fb(held)}; this process {fb(reserved)} reserved by PyTorch "
        f"({fb(reserved - f['allocated'])} of it unused{releasable}), "
        f"{fb(f['self'] - reserved)} outside the allocator; without pid {pid} the GPU "
        f"would have had {fb(free + held)} free"
    )


def wholly_free_segments(truth: dict, side: dict) -> int:
    """Bytes of the snapshot's segments with every block inactive, read from the raw
    pickle (torch's own segment records), not through the viewer."""
    with lzma.open(DATA / "gpu_holder" / truth["snapshot"]) as fh:
        raw = pickle.load(fh)
    dev = side["gpu_memory"]["device"]
    return sum(
        s["total_size"]
        for s in raw["segments"]
        if s["device"] == dev and all(b["state"] == "inactive" for b in s["blocks"])
    )


@functools.cache
def vramscope(*args: str) -> str:
    """``vramscope ARGS``' standard output (run from the checkout; it must succeed).
    Cached: the committed recordings' answers do not change between tests (files made in
    a test's tmp_path have paths of their own)."""
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
