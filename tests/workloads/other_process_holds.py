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

A holder that takes nearly the whole GPU, and a Llama-style training (transformers,
built from its config) run as a user would, under ``python -m vramscope.capture``::

    python3 tests/workloads/other_process_holds.py --scenario allocator --out $OUT
    python3 tests/workloads/other_process_holds.py --scenario cublas --out $OUT

The holder (``--hold-serve``) takes memory on command ("leave N bytes free").  The
training (``--train``) warms up, says it is ready, and waits while the holder fills the
GPU; then it trains and dies of the OOM:

- ``allocator``: the warm-up ran one step (every cuBLAS handle and kernel exists), the
  holder leaves ``--room`` bytes, the next steps need more: the caching allocator's OOM.
- ``cublas``: the warm-up ran the forward and filled the allocator's cache for a whole
  step, but never a matrix product in backward; the holder leaves (nearly) nothing, so
  everything the step needs comes from the cache except the cuBLAS handle that
  autograd's backward thread creates at its first matrix product:
  ``CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)``.  The rooms in
  ``--rooms`` are tried in turn until one gives that error.

Each writes ``holder_<scenario>_oom.{pickle.xz,json,truth.json}`` into ``--out``: the
capture's ``oom`` snapshot (xz), its sidecar, and what the programs knew (the holder's
pid, bytes and command line, the free bytes and memory_stats at the failure, the error).
Copy them into ``tests/data/gpu_holder/``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "truth"))

from _shim import import_capture

MiB = 1 << 20
GiB = 1 << 30
SCHEMA = "vramscope-gpu-accounting-truth/1"
HOLDER_SCHEMA = "vramscope-gpu-holder-truth/1"
LLAMA = dict(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=16,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
SMI = [
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
    "--format=csv,noheader,nounits",
]


def hold(nbytes: int, device: int) -> int:
    """The second process: allocate, report, hold until stdin closes."""
    import torch

    dev = torch.device("cuda", device)
    x = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize(dev)
    print(
        json.dumps(
            {
                "pid": os.getpid(),
                "bytes": int(x.numel()),
                "memory_reserved": int(torch.cuda.memory_reserved(dev)),
                "memory_allocated": int(torch.cuda.memory_allocated(dev)),
            }
        ),
        flush=True,
    )
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
    return {
        "returncode": done.returncode,
        "lines": done.stdout.splitlines()[:50],
        "stderr": done.stderr[-500:],
        "used": used,
    }


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
            if device_uuid and (
                u.lower().removeprefix("gpu-") != device_uuid.lower().removeprefix("gpu-")
            ):
                continue
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            return {
                "index": i,
                "uuid": u,
                "total": int(mem.total),
                "used_device": int(mem.used),
                "free": int(mem.free),
                "used": {
                    str(p.pid): (int(p.usedGpuMemory) if isinstance(p.usedGpuMemory, int) else None)
                    for p in procs
                },
            }
        return {"error": f"no NVML device with UUID {device_uuid}", "used": {}}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "used": {}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory for the snapshot, its sidecar and the truth")
    p.add_argument("--hold-gib", type=float, default=20.0)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument(
        "--no-nvml",
        action="store_true",
        help="hide pynvml from the capture (its process list from nvidia-smi)",
    )
    p.add_argument(
        "--scenario",
        choices=("request", "allocator", "cublas"),
        default="request",
        help="request: one too-large request beside a 20 GiB holder (default); "
        "allocator / cublas: a holder of nearly the whole GPU and a training "
        "under python -m vramscope.capture",
    )
    p.add_argument(
        "--room",
        type=float,
        default=1.5,
        help="allocator: GiB the holder leaves free once the training is warm",
    )
    p.add_argument(
        "--rooms", default="0,2,8,32", help="cublas: MiB the holder leaves free, tried in turn"
    )
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--hold", type=int, default=None, help=argparse.SUPPRESS)  # the child
    p.add_argument("--hold-serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--train", choices=("allocator", "cublas"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--sync", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.hold is not None:
        return hold(args.hold, args.device)
    if args.hold_serve:
        return hold_serve(args.device)
    if args.train is not None:
        return train(args)
    if not args.out:
        p.error("--out is required")
    if args.scenario != "request":
        return holder_scenario(args)

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
        [
            sys.executable,
            os.path.abspath(__file__),
            "--hold",
            str(hold_bytes),
            "--device",
            str(args.device),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline() if child.stdout else ""
        if not line:
            print("other_process_holds: the holding process failed", file=sys.stderr)
            return 3
        other = json.loads(line)
        print(
            f"other_process_holds: pid {other['pid']} holds {hold_bytes / GiB:.2f} GiB "
            f"(reserved {other['memory_reserved'] / GiB:.2f} GiB)",
            flush=True,
        )
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
            at_oom.update(
                device=int(device),
                alloc=int(alloc),
                device_alloc=int(device_alloc),
                device_free=int(device_free),
                mem_get_info_free=int(free),
                mem_get_info_total=int(tot),
                reserved=int(torch.cuda.memory_reserved(device)),
                allocated=int(torch.cuda.memory_allocated(device)),
                time=time.time(),
            )
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
        print(
            f"other_process_holds: {free / GiB:.2f} GiB free, asking for {request / GiB:.2f} GiB",
            flush=True,
        )
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
        "other": {
            "pid": other["pid"],
            "hold_bytes": hold_bytes,
            "memory_reserved": other["memory_reserved"],
            "memory_allocated": other["memory_allocated"],
            "smi_used_bytes": smi["used"].get(str(other["pid"])),
            "nvml_used_bytes": nvml["used"].get(str(other["pid"])),
            "alive_after": child.poll() is None,
        },
        "self": {
            "pid": os.getpid(),
            "smi_used_bytes": smi["used"].get(str(os.getpid())),
            "nvml_used_bytes": nvml["used"].get(str(os.getpid())),
            "reserved_after": int(torch.cuda.memory_reserved(dev)),
        },
        "oom": {
            "request_bytes": request,
            "free_before_request": int(free),
            "message": message[:2000],
            **at_oom,
        },
        "nvidia_smi": smi,
        "nvml": nvml,
    }
    with open(snap_path, "rb") as f:
        raw = f.read()
    with lzma.open(out / truth["snapshot"], "wb", preset=9) as f:
        f.write(raw)
    snap_path.unlink()
    (out / (name + ".truth.json")).write_text(json.dumps(truth, indent=1) + "\n")
    print(
        f"other_process_holds: wrote {truth['snapshot']} ({len(raw)} bytes before xz), "
        f"{truth['sidecar']}, {name}.truth.json in {out}",
        flush=True,
    )
    return 0


# --- a holder of nearly the whole GPU, and a training under the capture -----------------


def hold_serve(device: int) -> int:
    """The holder of the allocator / cublas scenarios: takes memory on command.

    stdin lines: ``leave N`` (allocate until the device has at most N bytes free),
    ``release``; each answer is one JSON line on stdout.
    """
    import torch

    dev = torch.device("cuda", device)
    torch.cuda.set_device(dev)
    held: list = []

    def report(**kw) -> None:
        free, total = torch.cuda.mem_get_info(dev)
        print(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "bytes": int(sum(t.numel() for t in held)),
                    "memory_reserved": int(torch.cuda.memory_reserved(dev)),
                    "free": int(free),
                    "total": int(total),
                    **kw,
                }
            ),
            flush=True,
        )

    torch.empty(1, device=dev)
    uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
    report(event="started", uuid=str(uuid) if uuid is not None else None)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "leave":
            want = int(arg)
            free, _ = torch.cuda.mem_get_info(dev)
            chunk = max(free - want, 0) // (2 * MiB) * (2 * MiB)
            while chunk >= 2 * MiB:
                try:
                    held.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
                except torch.cuda.OutOfMemoryError:
                    chunk = chunk // 2 // (2 * MiB) * (2 * MiB)
                    continue
                free, _ = torch.cuda.mem_get_info(dev)
                chunk = min(chunk, max(free - want, 0) // (2 * MiB) * (2 * MiB))
            torch.cuda.synchronize(dev)
            report(event="left", want=want)
        elif cmd == "release":
            held.clear()
            torch.cuda.empty_cache()
            report(event="released")
    return 0


def _wait_file(path: Path, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            return False
        time.sleep(0.05)
    return True


def train(args) -> int:
    """The training run under ``python -m vramscope.capture``; dies of its OOM.

    Before it dies it writes ``train_truth.json`` into ``--sync``: the error, the free
    bytes (cudaMemGetInfo) and memory_stats at that moment; an OOM observer attached
    after the capture's records the allocator's OOM as it happens.
    """
    import torch
    import torch.nn.functional as F
    from transformers import LlamaConfig, LlamaForCausalLM

    sync = Path(args.sync)
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    config = LlamaConfig(**LLAMA)
    model = LlamaForCausalLM(config).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    vocab = config.vocab_size
    truth: dict = {
        "model": "transformers.LlamaForCausalLM",
        "model_config": LLAMA,
        "batch": args.batch,
        "seq": args.seq,
        "autocast": "bfloat16",
        "optimizer": "AdamW(fused=True)",
        "phase": "setup",
        "step": None,
        "threads_at_failure": None,
    }
    at_oom: dict = {}

    def truth_observer(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        try:
            free, _ = torch.cuda.mem_get_info(device)
            at_oom.update(
                alloc=int(alloc),
                device_alloc=int(device_alloc),
                device_free=int(device_free),
                mem_get_info_free=int(free),
                reserved=int(torch.cuda.memory_reserved(device)),
                allocated=int(torch.cuda.memory_allocated(device)),
            )
        except Exception as exc:  # never into the allocator
            at_oom["error"] = f"{type(exc).__name__}: {exc}"

    def batch(n: int):
        ids = torch.randint(0, vocab, (n, args.seq), device=dev)
        return ids, torch.roll(ids, -1, dims=1)

    def forward(ids):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=ids).logits
        return logits

    def loss_of(logits, targets):
        return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))

    if args.train == "allocator":
        # Every handle, workspace and kernel exists after one whole step of the same shape.
        ids, tgt = batch(args.batch)
        loss_of(forward(ids), tgt).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del ids, tgt
    else:
        # The forward's handle and kernels, and the first kernels of backward (the loss's),
        # in autograd's thread, with no matrix product there: its cuBLAS handle does not exist.
        with torch.no_grad():
            forward(batch(args.batch)[0])
        x = torch.randn(
            args.batch * args.seq, vocab, device=dev, dtype=torch.bfloat16, requires_grad=True
        )
        F.cross_entropy(x.float(), torch.randint(0, vocab, (x.shape[0],), device=dev)).backward()
        del x
        # The allocator's cache holds a whole step: the forward's blocks, and room for the
        # backward (gradients and temporaries) in one segment it splits.
        ids, tgt = batch(args.batch)
        loss = loss_of(forward(ids), tgt)
        del loss
        spare = torch.empty(int(6 * GiB), dtype=torch.uint8, device=dev)
        small = [torch.empty(256 * 1024, dtype=torch.uint8, device=dev) for _ in range(512)]
        del spare, small
    torch.cuda.synchronize(dev)
    if args.train == "allocator":
        torch.cuda.empty_cache()
    torch._C._cuda_attach_out_of_memory_observer(truth_observer)
    free, _ = torch.cuda.mem_get_info(dev)
    (sync / "ready").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "free": int(free),
                "reserved": int(torch.cuda.memory_reserved(dev)),
            }
        )
    )
    if not _wait_file(sync / "go", 300):
        print("train: no go from the driver", file=sys.stderr)
        return 6
    truth["free_before_steps"] = int(torch.cuda.mem_get_info(dev)[0])
    truth["reserved_before_steps"] = int(torch.cuda.memory_reserved(dev))
    try:
        for step in range(3):
            truth["step"] = step
            if args.train == "allocator" or step > 0:
                ids, tgt = batch(args.batch)
            truth["phase"] = "forward"
            loss = loss_of(forward(ids), tgt)
            truth["phase"] = "backward"
            loss.backward()
            truth["phase"] = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
        truth["phase"] = "done"
    except BaseException as exc:
        free, total = torch.cuda.mem_get_info(dev)
        truth.update(
            error=str(exc)[:4000],
            error_first_line=str(exc).splitlines()[0][:500],
            exception_type=type(exc).__name__,
            free_at_failure=int(free),
            total=int(total),
            reserved_at_failure=int(torch.cuda.memory_reserved(dev)),
            allocated_at_failure=int(torch.cuda.memory_allocated(dev)),
            memory_stats=dict(torch.cuda.memory_stats(dev)),
            allocator_oom=isinstance(exc, torch.cuda.OutOfMemoryError),
            at_allocator_oom=at_oom or None,
            threads_at_failure=[t.name for t in threading.enumerate()],
        )
        raise
    finally:
        (sync / "train_truth.json").write_text(json.dumps(truth, indent=1, default=str))
    return 0


def holder_scenario(args) -> int:
    """Drive one holder scenario: holder, training under the capture, truth, xz."""
    # This process never touches CUDA: the GPU holds the holder and the training only.
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    name = f"holder_{args.scenario}_oom"
    holder = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--hold-serve", "--device", str(args.device)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        started = json.loads(holder.stdout.readline())
        uuid = started.get("uuid")
        rooms = (
            [int(args.room * GiB)]
            if args.scenario == "allocator"
            else [int(float(r) * MiB) for r in args.rooms.split(",")]
        )
        for attempt, room in enumerate(rooms):
            result = _one_run(args, out, name, holder, room, attempt, uuid, started)
            wanted = (
                "CUBLAS_STATUS_ALLOC_FAILED" if args.scenario == "cublas" else "CUDA out of memory"
            )
            if result is not None and wanted in result.get("error", ""):
                print(
                    f"other_process_holds: {name}: {result['error_first_line']} "
                    f"(room {room / MiB:.0f} MiB, free at failure "
                    f"{result['free_at_failure'] / MiB:.2f} MiB)",
                    flush=True,
                )
                return 0
            print(
                f"other_process_holds: {name}: room {room / MiB:.0f} MiB gave "
                f"{(result or {}).get('error_first_line') or (result or {}).get('phase')!r}; "
                "trying the next",
                flush=True,
            )
            holder.stdin.write("release\n")
            holder.stdin.flush()
            holder.stdout.readline()
        return 7
    finally:
        holder.stdin.close()
        try:
            holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()


def _one_run(
    args,
    out: Path,
    name: str,
    holder: subprocess.Popen,
    room: int,
    attempt: int,
    uuid: str | None,
    started: dict,
) -> dict | None:
    import shutil
    import tempfile

    assert holder.stdin is not None and holder.stdout is not None
    sync = Path(tempfile.mkdtemp(prefix="holder-sync-"))
    raw = sync / "snapshots"
    cmd = [
        sys.executable,
        "-m",
        "vramscope.capture",
        "--out",
        str(raw),
        "--max-entries",
        "20000",
        os.path.abspath(__file__),
        "--train",
        args.scenario,
        "--sync",
        str(sync),
        "--device",
        str(args.device),
        "--batch",
        str(args.batch),
        "--seq",
        str(args.seq),
    ]
    trainer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not _wait_file(sync / "ready", 600, trainer):
        _out_s, err_s = trainer.communicate(timeout=60)
        print(
            f"other_process_holds: the training never got ready: {err_s[-3000:]}", file=sys.stderr
        )
        return None
    ready = json.loads((sync / "ready").read_text())
    holder.stdin.write(f"leave {room}\n")
    holder.stdin.flush()
    left = json.loads(holder.stdout.readline())
    (sync / "go").touch()
    try:
        _out_s, err_s = trainer.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        trainer.kill()
        _out_s, err_s = trainer.communicate()
    # The holder still holds: the process list of this moment is the truth's.
    smi, nvml = smi_apps(), nvml_apps(uuid)
    tfile = sync / "train_truth.json"
    result = json.loads(tfile.read_text()) if tfile.exists() else None
    ooms = sorted(raw.glob("*_oom_*.pickle")) if raw.is_dir() else []
    print(
        f"other_process_holds: attempt {attempt}: room {room} B, trainer exit "
        f"{trainer.returncode}, {len(ooms)} oom snapshot(s); stderr tail:\n{err_s[-1500:]}",
        flush=True,
    )
    if result is None or not ooms:
        return result
    wanted = "CUBLAS_STATUS_ALLOC_FAILED" if args.scenario == "cublas" else "CUDA out of memory"
    if wanted not in result.get("error", ""):
        return result
    snap = ooms[-1]
    with open(snap, "rb") as f:
        raw_bytes = f.read()
    with lzma.open(out / f"{name}.pickle.xz", "wb", preset=9) as f:
        f.write(raw_bytes)
    shutil.copyfile(snap.with_suffix(".json"), out / f"{name}.json")
    truth = {
        "schema": HOLDER_SCHEMA,
        "scenario": args.scenario,
        "snapshot": f"{name}.pickle.xz",
        "sidecar": f"{name}.json",
        "capture_file": snap.name,
        "torch": torch_version(),
        "device": args.device,
        "uuid": uuid,
        "holder": {
            "pid": left["pid"],
            "bytes": left["bytes"],
            "memory_reserved": left["memory_reserved"],
            "cmdline": _cmdline(left["pid"]),
            "free_after_filling": left["free"],
            "asked_to_leave": room,
            "started": started,
            "smi_used_bytes": smi["used"].get(str(left["pid"])),
            "nvml_used_bytes": nvml["used"].get(str(left["pid"])),
        },
        "training": {
            "pid": ready["pid"],
            "cmdline": " ".join(cmd[1:]),
            "exit_status": trainer.returncode,
            "free_when_ready": ready["free"],
            "reserved_when_ready": ready["reserved"],
            "stderr_tail": err_s[-4000:],
            **result,
        },
        "nvidia_smi": smi,
        "nvml": nvml,
    }
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1, default=str) + "\n")
    print(
        f"other_process_holds: wrote {name}.pickle.xz ({len(raw_bytes)} bytes before xz), "
        f"{name}.json, {name}.truth.json in {out}",
        flush=True,
    )
    return result


def _cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return " ".join(p.decode("utf-8", "replace") for p in f.read().split(b"\0") if p)
    except OSError:
        return None


def torch_version() -> str:
    import torch

    return str(torch.__version__)


if __name__ == "__main__":
    sys.exit(main())
