"""The whole GPU beside the snapshot: the device's total and free memory and every process on it.

The allocator's snapshot shows only what this process's caching allocator
reserved.  The most confusing out-of-memory errors are those where the GPU is
full while PyTorch holds little: another process, a leftover job, this
process's CUDA context, NCCL buffers.  So every sidecar gets ``gpu_memory``,
taken right after the snapshot (inside the OOM observer for an OOM dump)::

    "gpu_memory": {
      "device": 0, "pid": 4242,                  # the torch device, this process
      "total_bytes": 85029158912,                # torch.cuda.mem_get_info(device)
      "free_bytes": 524288000,
      "uuid": "GPU-5a1b...",                     # null where torch cannot say
      "source": "nvml",                          # or "nvidia-smi" (whole MiB)
      "nvml_device": {"index": 0, "total_bytes": ..., "used_bytes": ..., "free_bytes": ...},
      "processes": [{"pid": 4121, "used_bytes": 19541262336, "name": "/usr/bin/python3",
                     "cmdline": "python3 train_old.py", "this_process": false}, ...],
      "devices": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-5a1b...",
                   "total_bytes": ..., "free_bytes": ..., "this_device": true}, ...],
      "query_s": 0.0009
    }

``devices`` is every device NVML sees (whatever ``CUDA_VISIBLE_DEVICES`` hides from
torch), numbered as NVML and nvidia-smi number them, each with its free memory at
the same moment: where the OOM was about a full device, the viewer names a freer
one.  Absent where NVML cannot be used (``devices_missing`` says why); a device NVML
cannot read has null figures.

``processes`` comes from NVML (``pynvml``, the nvidia-ml-py package) when it
can be imported; else from ``nvidia-smi --query-compute-apps`` with a short
timeout; else it is absent and ``processes_missing`` says why.  A failing
``mem_get_info`` leaves ``total_bytes``/``free_bytes`` null and ``error``
says why.  Nothing here raises: the snapshot matters more than this record.
``used_bytes`` is null where the driver does not report a process's memory
(some containers); ``cmdline`` is null where ``/proc/<pid>`` cannot be read
(another PID namespace).

Cheap enough for the OOM observer: NVML is initialised once per process and
the CUDA device's NVML handle is looked up once; no subprocess runs when NVML
can be imported.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any, Callable

#: How long ``nvidia-smi`` may take before its answer is given up.
SMI_TIMEOUT_S = 2.0
SMI_QUERY = [
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
    "--format=csv,noheader,nounits",
]
MiB = 1 << 20
CMDLINE_MAX = 200

_lock = threading.Lock()
# "init": None (not tried), True, or why NVML cannot be used; "handles": device -> (handle, index);
# "devices": [(index, handle, name, uuid)] of every NVML device, once looked up
_nvml: dict[str, Any] = {"init": None, "handles": {}}


def _nvml_module() -> Any:
    """``pynvml``; raises ImportError without it (tests replace this function)."""
    import pynvml

    return pynvml


def _run_smi() -> str:
    """``nvidia-smi``'s answer (tests replace this function)."""
    done = subprocess.run(
        SMI_QUERY, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"nvidia-smi exited with {done.returncode}: {_short(done.stderr or done.stdout)}"
        )
    return done.stdout


def _read_cmdline(pid: int) -> str | None:
    """The command line of ``pid`` (``python3 train.py --lr 3``), or None where unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    parts = [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]
    if not parts:
        return None
    parts[0] = os.path.basename(parts[0])
    line = " ".join(parts)
    return line if len(line) <= CMDLINE_MAX else line[: CMDLINE_MAX - 3] + "..."


def whole_gpu(backend: Any, device: int, *, pid: int | None = None) -> dict[str, Any]:
    """The ``gpu_memory`` sidecar field for ``device`` now; never raises."""
    t0 = time.perf_counter()
    pid = os.getpid() if pid is None else pid
    out: dict[str, Any] = {"device": device, "pid": pid, "total_bytes": None, "free_bytes": None}
    try:
        free, total = backend.mem_get_info(device)
        out["total_bytes"], out["free_bytes"] = int(total), int(free)
    except Exception as exc:
        out["error"] = f"mem_get_info failed: {_short(exc)}"
    uuid = _call(getattr(backend, "device_uuid", None), device)
    out["uuid"] = _norm_uuid(uuid) if uuid else None
    try:
        got = _processes(backend, device, out["uuid"], pid)
    except Exception as exc:
        got = {"processes_missing": f"the process list failed: {_short(exc)}"}
    out.update(got)
    out["query_s"] = round(time.perf_counter() - t0, 6)
    return out


def _processes(backend: Any, device: int, uuid: str | None, pid: int) -> dict[str, Any]:
    try:
        nv = _nvml_module()
    except ImportError:
        return {**_from_smi(uuid, pid), "devices_missing": "NVML is not installed (nvidia-ml-py)"}
    out = _from_nvml(nv, backend, device, uuid, pid)
    try:
        out.update(_devices(nv, uuid))
    except Exception as exc:
        out["devices_missing"] = f"NVML cannot list the devices: {_short(exc)}"
    return out


def _devices(nv: Any, uuid: str | None) -> dict[str, Any]:
    """Every NVML device with its free memory now: one memory query per device (the
    handles, names and UUIDs, which do not change, are looked up once per process)."""
    problem = _nvml_init(nv)
    if problem is not None:
        return {"devices_missing": problem}
    with _lock:
        static = _nvml.get("devices")
    if static is None:
        static = []
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = _call(getattr(nv, "nvmlDeviceGetName", None), h)
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            u = _call(nv.nvmlDeviceGetUUID, h)
            if isinstance(u, bytes):
                u = u.decode("utf-8", "replace")
            static.append((i, h, str(name) if name else None, _norm_uuid(u) if u else None))
        with _lock:
            _nvml["devices"] = static
    rows = []
    for i, h, name, u in static:
        row: dict[str, Any] = {
            "index": i,
            "name": name,
            "uuid": u,
            "total_bytes": None,
            "free_bytes": None,
            "this_device": u is not None and u == uuid,
        }
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            row["total_bytes"], row["free_bytes"] = int(mem.total), int(mem.free)
        except Exception as exc:
            row["error"] = _short(exc)
        rows.append(row)
    return {"devices": rows}


def _from_nvml(nv: Any, backend: Any, device: int, uuid: str | None, pid: int) -> dict[str, Any]:
    problem = _nvml_init(nv)
    if problem is not None:
        return {"processes_missing": problem}
    found = _nvml_handle(nv, backend, device, uuid)
    if isinstance(found, str):
        return {"processes_missing": found}
    handle, index = found
    out: dict[str, Any] = {"source": "nvml"}
    try:
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        out["nvml_device"] = {
            "index": index,
            "total_bytes": int(mem.total),
            "used_bytes": int(mem.used),
            "free_bytes": int(mem.free),
        }
    except Exception:
        out["nvml_device"] = {"index": index}
    try:
        procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception as exc:
        return {**out, "processes_missing": f"NVML cannot list the processes: {_short(exc)}"}
    rows = []
    for p in procs:
        p_pid = int(p.pid)
        used = getattr(p, "usedGpuMemory", None)
        name = _call(getattr(nv, "nvmlSystemGetProcessName", None), p_pid)
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        rows.append(
            _row(
                p_pid,
                int(used) if isinstance(used, int) else None,
                str(name) if name else None,
                pid,
            )
        )
    out["processes"] = _merge(rows)
    return out


def _from_smi(uuid: str | None, pid: int) -> dict[str, Any]:
    if uuid is None:
        return {
            "processes_missing": "NVML is not installed (nvidia-ml-py), and without the "
            "device's UUID nvidia-smi's process list cannot be matched to it"
        }
    try:
        text = _run_smi()
    except FileNotFoundError:
        return {"processes_missing": "neither NVML (nvidia-ml-py) nor nvidia-smi is available"}
    except subprocess.TimeoutExpired:
        return {"processes_missing": f"nvidia-smi did not answer within {SMI_TIMEOUT_S:g} s"}
    except Exception as exc:
        return {"processes_missing": f"nvidia-smi failed: {_short(exc)}"}
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",", 3)]
        if len(parts) < 3 or _norm_uuid(parts[0]) != uuid:
            continue
        try:
            p_pid = int(parts[1])
        except ValueError:
            continue
        try:
            used: int | None = int(float(parts[2]) * MiB)
        except ValueError:  # "[N/A]", "[Insufficient Permissions]"
            used = None
        name = parts[3] if len(parts) > 3 and parts[3] else None
        rows.append(_row(p_pid, used, name, pid))
    return {"source": "nvidia-smi", "processes": _merge(rows)}


def _row(p_pid: int, used: int | None, name: str | None, pid: int) -> dict[str, Any]:
    return {
        "pid": p_pid,
        "used_bytes": used,
        "name": name,
        "cmdline": _read_cmdline(p_pid),
        "this_process": p_pid == pid,
    }


def _merge(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pid (NVML can list a process once per context), the largest first."""
    by_pid: dict[int, dict[str, Any]] = {}
    for r in rows:
        seen = by_pid.get(r["pid"])
        if seen is None:
            by_pid[r["pid"]] = r
        elif r["used_bytes"] is not None:
            seen["used_bytes"] = (seen["used_bytes"] or 0) + r["used_bytes"]
    return sorted(by_pid.values(), key=lambda r: -(r["used_bytes"] or 0))


def _nvml_init(nv: Any) -> str | None:
    with _lock:
        if _nvml["init"] is True:
            return None
        if isinstance(_nvml["init"], str):
            return _nvml["init"]
        try:
            nv.nvmlInit()
        except Exception as exc:
            _nvml["init"] = f"NVML cannot start (no NVIDIA driver?): {_short(exc)}"
            return _nvml["init"]
        _nvml["init"] = True
        return None


def _nvml_handle(nv: Any, backend: Any, device: int, uuid: str | None) -> tuple[Any, int] | str:
    """NVML's handle and index of torch's ``device`` (by UUID: CUDA_VISIBLE_DEVICES and
    CUDA's device order renumber devices, NVML does not); why not, as a string."""
    with _lock:
        cached = _nvml["handles"].get(device)
    if cached is not None:
        return cached
    found: tuple[Any, int] | None
    if uuid is None:
        if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
            return (
                "torch cannot say the device's UUID and CUDA_VISIBLE_DEVICES renumbers "
                "devices, so NVML's device for it is not known"
            )
        # Without a UUID only the one-device case is unambiguous.
        try:
            if int(nv.nvmlDeviceGetCount()) != 1:
                return "torch cannot say the device's UUID, so NVML's device for it is not known"
            found = (nv.nvmlDeviceGetHandleByIndex(0), 0)
        except Exception as exc:
            return f"NVML cannot list the devices: {_short(exc)}"
    else:
        try:
            found = None
            for i in range(int(nv.nvmlDeviceGetCount())):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                u = nv.nvmlDeviceGetUUID(h)
                if _norm_uuid(u.decode() if isinstance(u, bytes) else str(u)) == uuid:
                    found = (h, i)
                    break
        except Exception as exc:
            return f"NVML cannot list the devices: {_short(exc)}"
        if found is None:
            return f"NVML has no device with UUID {uuid} (a MIG instance?)"
    with _lock:
        _nvml["handles"][device] = found
    return found


def _norm_uuid(u: str) -> str:
    """``GPU-5a1b...`` as NVML and nvidia-smi write it (torch writes it without ``GPU-``)."""
    u = str(u).strip().lower()
    for prefix in ("gpu-", "mig-"):
        if u.startswith(prefix):
            return prefix.upper() + u[len(prefix) :]
    return "GPU-" + u


def _call(fn: Callable[..., Any] | None, *args: Any) -> Any:
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:
        return None


def _short(exc: object) -> str:
    text = " ".join(str(exc).split())[:200]
    return text or type(exc).__name__


def _reset_for_tests() -> None:
    with _lock:
        _nvml["init"] = None
        _nvml["handles"] = {}
        _nvml.pop("devices", None)
