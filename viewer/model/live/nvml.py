"""GPU totals and processes from NVML (``nvidia-ml-py``), when there is one.

The allocator only knows what PyTorch reserved; NVML knows what the device
has in use, including the CUDA context, NCCL buffers and other libraries'
allocations.  Without the module, the driver, or a GPU (CI, laptops) every
call returns a :class:`NvmlInfo` whose ``error`` says so in one line;
nothing raises.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"init": None}  # None: not tried; True; or the error line


@dataclass
class GpuProcess:
    pid: int
    used_bytes: int | None  # None where the driver does not say (e.g. inside containers)
    device: int


@dataclass
class GpuDevice:
    index: int
    name: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class NvmlInfo:
    devices: list[GpuDevice]
    error: str | None = None

    @property
    def available(self) -> bool:
        return self.error is None

    def process_bytes(self, pid: int, device: int | None = None) -> int | None:
        total, seen = 0, False
        for d in self.devices:
            if device is not None and d.index != device:
                continue
            for p in d.processes:
                if p.pid == pid and p.used_bytes is not None:
                    total += p.used_bytes
                    seen = True
        return total if seen else None


def _module() -> Any:
    import pynvml

    return pynvml


def _init() -> str | None:
    """Initialise NVML once; None if usable, else why not (one line)."""
    with _lock:
        if _state["init"] is True:
            return None
        if isinstance(_state["init"], str):
            return _state["init"]
        try:
            nv = _module()
        except ImportError:
            _state["init"] = "NVML is not available (the nvidia-ml-py package is not installed)"
            return _state["init"]
        try:
            nv.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            _state["init"] = f"NVML is not available (no NVIDIA driver or GPU: {_short(exc)})"
            return _state["init"]
        _state["init"] = True
        return None


def query() -> NvmlInfo:
    """Every GPU's memory and compute processes now (an error line if impossible)."""
    problem = _init()
    if problem is not None:
        return NvmlInfo([], problem)
    nv = _module()
    devices: list[GpuDevice] = []
    try:
        count = nv.nvmlDeviceGetCount()
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            name = nv.nvmlDeviceGetName(h)
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            dev = GpuDevice(i, str(name), int(mem.total), int(mem.used), int(mem.free))
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:
                procs = []
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                dev.processes.append(
                    GpuProcess(int(p.pid), int(used) if isinstance(used, int) else None, i)
                )
            devices.append(dev)
    except Exception as exc:
        return NvmlInfo(devices, f"NVML query failed: {_short(exc)}")
    return NvmlInfo(devices)


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _reset_for_tests() -> None:
    with _lock:
        _state["init"] = None
