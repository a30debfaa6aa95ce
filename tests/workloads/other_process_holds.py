"""Another process holds the GPU, this one runs out of memory: truth for the whole-GPU record.

    python3 tests/workloads/other_process_holds.py --out $OUT
    python3 tests/workloads/other_process_holds.py --out $OUT --no-nvml   # the nvidia-smi path

1. Starts a second Python process (this file, ``--hold``) that allocates ``--hold-gib``
   (20 GiB; at most 40 % of the device) with ``torch.empty`` on the GPU, prints its pid
   and ``torch.cuda.memory_reserved()``, and holds the memory until its stdin closes.
2. Runs a small model for a few steps under ``vramscope.capture.record`` (no exit dump:
   the OOM dump is the recording).
3. Empties the cache and asks for one tensor of what the device has free + 1 GiB: more
   than is free, less than free + what the other process holds, so the OOM is the other
   process's doing.  The capture's OOM observer writes the snapshot and its sidecar (with
   ``gpu_memory``); the ``OutOfMemoryError`` is caught.
4. Writes ``NAME.truth.json`` beside the snapshot: the other process's pid and bytes (its
   own ``memory_reserved`` and what nvidia-smi and NVML say for it), this process's
   reserved and ``cudaMemGetInfo`` at the OOM (read by an OOM observer of this script,
   attached after the capture's, so at the same OOM), the request; then compresses the
   snapshot to ``NAME.pickle.xz`` (the output stays well under 2 MB).

``--no-nvml`` hides the ``pynvml`` module from the capture, so the sidecar's process
list comes from ``nvidia-smi``.  Copy ``$OUT/*`` into ``tests/data/gpu_accounting/``;
``tests/model/test_gpu_accounting.py`` checks the recordings against their truth.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "truth"))

from _shim import import_capture  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
SCHEMA = "vramscope-gpu-accounting-truth/1"
SMI = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
       "--format=csv,noheader,nounits"]


def hold(nbytes: int, device: int) -> int:
    """The second process: allocate, report, hold until stdin closes."""
    import torch

    dev = torch.device("cuda", device)
    x = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize(dev)
    print(json.dumps({"pid": os.getpid(), "bytes": int(x.numel()),
                      "memory_reserved": int(torch.cuda.memory_reserved(dev)),
                      "memory_allocated": int(torch.cuda.memory_allocated(dev))}), flush=True)
    sys.stdin.read()  # until the parent closes the pipe (or dies)
    del x
    return 0


def smi_apps() -> dict:
    """nvidia-smi's compute processes now: raw lines and {pid: used bytes} (None: N/A)."""
    try:
        done = subprocess.run(SMI, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "lines": [], "used": {}}
    used: dict[str, int | None] = {}
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split(",", 3)]
        if len(parts) >= 3 and parts[1].isdigit():
            try:
                used[parts[1]] = int(float(parts[2]) * MiB)
            except ValueError:
                used[parts[1]] = None
    return {"returncode": done.returncode, "lines": done.stdout.splitlines()[:50],
            "stderr": done.stderr[-500:], "used": used}


def nvml_apps(device_uuid: str | None) -> dict:
    """NVML's compute processes on this device: {pid: used bytes}; or why not."""
    try:
        import pynvml as nv
    except ImportError:
        return {"error": "pynvml is not installed", "used": {}}
    try:
        nv.nvmlInit()
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            u = nv.nvmlDeviceGetUUID(h)
            u = u.decode() if isinstance(u, bytes) else str(u)
            if device_uuid and (u.lower().removeprefix("gpu-")
                                != device_uuid.lower().removeprefix("gpu-")):
                continue
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            return {"index": i, "uuid": u, "total": int(mem.total), "used_device": int(mem.used),
                    "free": int(mem.free),
                    "used": {str(p.pid): (int(p.usedGpuMemory)
                                          if isinstance(p.usedGpuMemory, int) else None)
                             for p in procs}}
        return {"error": f"no NVML device with UUID {device_uuid}", "used": {}}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "used": {}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory for the snapshot, its sidecar and the truth")
    p.add_argument("--hold-gib", type=float, default=20.0)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--no-nvml", action="store_true",
                   help="hide pynvml from the capture (its process list from nvidia-smi)")
    p.add_argument("--hold", type=int, default=None, help=argparse.SUPPRESS)  # the child
    args = p.parse_args(argv)
    if args.hold is not None:
        return hold(args.hold, args.device)
    if not args.out:
        p.error("--out is required")

    import torch
    from torch import nn

    if not torch.cuda.is_available():
        print("other_process_holds: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.no_nvml:
        sys.modules["pynvml"] = None  # type: ignore[assignment]  # import pynvml -> ImportError
    capture = import_capture()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    uuid = str(getattr(props, "uuid", "")) or None
    total = int(props.total_memory)
    hold_bytes = int(min(args.hold_gib * GiB, 0.4 * total)) // (2 * MiB) * (2 * MiB)

    # 1. The other process.
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--hold", str(hold_bytes),
         "--device", str(args.device)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline() if child.stdout else ""
        if not line:
            print("other_process_holds: the holding process failed", file=sys.stderr)
            return 3
        other = json.loads(line)
        print(f"other_process_holds: pid {other['pid']} holds {hold_bytes / GiB:.2f} GiB "
              f"(reserved {other['memory_reserved'] / GiB:.2f} GiB)", flush=True)
        return record(torch, nn, capture, dev, out, args, other, hold_bytes, uuid, total, child)
    finally:
        if child.stdin:
            child.stdin.close()
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()


def record(torch, nn, capture, dev, out, args, other, hold_bytes, uuid, total, child) -> int:
    torch.cuda.init()
    torch.empty(1, device=dev)  # the CUDA context: the capture's observer attaches now
    at_oom: dict = {}

    def truth_observer(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        try:
            free, tot = torch.cuda.mem_get_info(device)
            at_oom.update(device=int(device), alloc=int(alloc), device_alloc=int(device_alloc),
                          device_free=int(device_free), mem_get_info_free=int(free),
                          mem_get_info_total=int(tot),
                          reserved=int(torch.cuda.memory_reserved(device)),
                          allocated=int(torch.cuda.memory_allocated(device)),
                          time=time.time())
        except Exception as exc:  # never into the allocator
            at_oom["error"] = f"{type(exc).__name__}: {exc}"

    model = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    message = None
    with capture.record(out=out, dump_on_exit=False, max_entries=20_000) as rec:
        # After the capture's observer (attached when recording started on live CUDA).
        torch._C._cuda_attach_out_of_memory_observer(truth_observer)
        for _ in range(args.steps):
            x = torch.randn(256, 2048, device=dev)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        del x, loss
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(dev)
        request = (free + GiB) // (2 * MiB) * (2 * MiB)
        assert request < free + hold_bytes, "the other process would not be the cause"
        print(f"other_process_holds: {free / GiB:.2f} GiB free, asking for "
              f"{request / GiB:.2f} GiB", flush=True)
        try:
            big = torch.empty(request, dtype=torch.uint8, device=dev)
            del big
        except torch.cuda.OutOfMemoryError as exc:
            message = str(exc)
    if message is None or rec.last_oom_path is None:
        print("other_process_holds: no OOM snapshot was written", file=sys.stderr)
        return 4
    if "reserved" not in at_oom:
        print(f"other_process_holds: the truth observer saw no OOM: {at_oom}", file=sys.stderr)
        return 5
    if args.no_nvml:
        del sys.modules["pynvml"]  # hidden from the capture only; the truth asks NVML too
    smi, nvml = smi_apps(), nvml_apps(uuid)
    snap_path = Path(rec.last_oom_path)
    name = snap_path.stem
    truth = {
        "schema": SCHEMA,
        "snapshot": name + ".pickle.xz",
        "sidecar": name + ".json",
        "no_nvml": bool(args.no_nvml),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(dev),
        "device": dev.index,
        "uuid": uuid,
        "total_memory": total,
        "other": {"pid": other["pid"], "hold_bytes": hold_bytes,
                  "memory_reserved": other["memory_reserved"],
                  "memory_allocated": other["memory_allocated"],
                  "smi_used_bytes": smi["used"].get(str(other["pid"])),
                  "nvml_used_bytes": nvml["used"].get(str(other["pid"])),
                  "alive_after": child.poll() is None},
        "self": {"pid": os.getpid(),
                 "smi_used_bytes": smi["used"].get(str(os.getpid())),
                 "nvml_used_bytes": nvml["used"].get(str(os.getpid())),
                 "reserved_after": int(torch.cuda.memory_reserved(dev))},
        "oom": {"request_bytes": request, "free_before_request": int(free),
                "message": message[:2000], **at_oom},
        "nvidia_smi": smi,
        "nvml": nvml,
    }
    with open(snap_path, "rb") as f:
        raw = f.read()
    with lzma.open(out / truth["snapshot"], "wb", preset=9) as f:
        f.write(raw)
    snap_path.unlink()
    (out / (name + ".truth.json")).write_text(json.dumps(truth, indent=1) + "\n")
    print(f"other_process_holds: wrote {truth['snapshot']} ({len(raw)} bytes before xz), "
          f"{truth['sidecar']}, {name}.truth.json in {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
