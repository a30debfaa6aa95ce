"""A fake CUDA backend, so the recorder's logic can be tested without a GPU.

It implements the same small interface as ``vramscope.capture.backend.TorchBackend``
with an allocator that keeps a list of blocks (one segment each) and a trace,
and produces snapshots of the same shape as ``torch.cuda.memory._snapshot()``
with ``memory_stats`` that agree with them.  What it cannot show (that torch
really calls the observer, that real snapshots open in memory_viz) is what
the ``gpu`` tests check.
"""

from __future__ import annotations

import time
from typing import Any, Callable


class FakeOutOfMemoryError(RuntimeError):
    """Stands in for torch.cuda.OutOfMemoryError."""


class FakeBackend:
    torch_version = "2.99.0+fake"

    def __init__(
        self,
        *,
        initialized: bool = True,
        available: bool = True,
        history_enabled: bool = False,
        limit: int = 1 << 30,
    ) -> None:
        self.initialized = initialized
        self.available = available
        # None = off; "external" = turned on by someone other than vramscope.
        self.history: Any = "external" if history_enabled else None
        self.history_calls: list[Any] = []
        self.observers: list[Callable[[int, int, int, int], None]] = []
        self.deferred: list[Callable[[], None]] = []
        self.blocks: list[dict[str, Any]] = []
        self.trace: list[dict[str, Any]] = []
        self.limit = limit
        self.num_ooms = 0
        self.snapshot_calls = 0
        self.fail_snapshot = False
        self.snapshot_delay = 0.0
        self._next_addr = 0x7F0000000000
        self._initializing = False

    # -- the backend interface ---------------------------------------------

    def early_problem(self) -> str | None:
        return None

    def cuda_available(self) -> bool:
        return self.available

    def cuda_initialized(self) -> bool:
        return self.initialized

    def call_at_cuda_init(self, fn: Callable[[], None]) -> bool:
        if self.initialized:
            fn()
        else:
            self.deferred.append(fn)
        return True

    def history_enabled(self) -> bool:
        # Real torch (2.11) segfaults when asked before CUDA is initialised.
        assert self.initialized or self._initializing, "history_enabled() before CUDA init"
        return self.history is not None

    def record_history(self, settings: Any) -> None:
        self.history = settings
        self.history_calls.append(settings)

    def attach_oom_observer(self, observer: Callable[[int, int, int, int], None]) -> None:
        self.observers.append(observer)

    def snapshot(self) -> dict[str, Any]:
        self.snapshot_calls += 1
        if self.fail_snapshot:
            raise RuntimeError("fake snapshot failure")
        if self.snapshot_delay:
            time.sleep(self.snapshot_delay)
        segments = []
        for b in self.blocks:
            active = b["state"].startswith("active")
            segments.append(
                {
                    "device": 0,
                    "address": b["address"],
                    "total_size": b["size"],
                    "allocated_size": b["size"] if b["state"] == "active_allocated" else 0,
                    "active_size": b["size"] if active else 0,
                    "requested_size": b["requested_size"] if active else 0,
                    "stream": 0,
                    "segment_type": "large",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": [],
                    "blocks": [dict(b, frames=[])],
                }
            )
        return {
            "segments": segments,
            "device_traces": [list(self.trace)],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
            "external_annotations": [],
        }

    def current_device(self) -> int:
        return 0

    def memory_stats(self, device: int) -> dict[str, Any]:
        def total(pred: Callable[[dict[str, Any]], bool], key: str = "size") -> int:
            return sum(b[key] for b in self.blocks if pred(b))

        return {
            "reserved_bytes.all.current": total(lambda b: True),
            "allocated_bytes.all.current": total(lambda b: b["state"] == "active_allocated"),
            "active_bytes.all.current": total(lambda b: b["state"].startswith("active")),
            "requested_bytes.all.current": total(
                lambda b: b["state"].startswith("active"), "requested_size"
            ),
            "num_ooms": self.num_ooms,
        }

    def device_name(self, device: int) -> str:
        return "Fake GPU 80GB"

    def total_memory(self, device: int) -> int:
        return 80 << 30

    def multiprocessors(self, device: int) -> tuple[int, int]:
        return 100, 2048

    def allocator_backend(self) -> str:
        return "native"

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, FakeOutOfMemoryError)

    # -- driving the fake --------------------------------------------------

    def init_cuda(self) -> None:
        """What torch's lazy CUDA initialisation does: run the queued calls."""
        # Like torch: the allocator exists while the queued calls run, but
        # torch.cuda.is_initialized() only turns True after them.
        calls, self.deferred = self.deferred, []
        self._initializing = True
        try:
            for fn in calls:
                fn()
        finally:
            self._initializing = False
        self.initialized = True

    def alloc(self, size: int, requested: int | None = None) -> int:
        self._need_cuda()
        reserved = sum(b["size"] for b in self.blocks)
        if reserved + size > self.limit:
            self.oom(size)
        addr = self._next_addr
        self._next_addr += size
        self.blocks.append(
            {
                "address": addr,
                "size": size,
                "requested_size": requested or size,
                "state": "active_allocated",
            }
        )
        self._trace("alloc", addr, size)
        return addr

    def free(self, addr: int) -> None:
        for b in self.blocks:
            if b["address"] == addr:
                b["state"] = "inactive"
                self._trace("free_completed", addr, b["size"])
                return
        raise KeyError(addr)

    def oom(self, size: int) -> None:
        """Fail an allocation the way the caching allocator does."""
        self.num_ooms += 1
        self._trace("oom", 0, size)
        reserved = sum(b["size"] for b in self.blocks)
        for obs in self.observers:
            obs(0, size, self.limit, 1 << 30)
        raise FakeOutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {size} bytes. "
            f"{reserved} bytes reserved, {self.limit} allowed"
        )

    def library_call(self, message: str, error: type[BaseException] = RuntimeError) -> None:
        """A library at the CUDA boundary failing as torch reports it (cuBLAS creating a
        handle, NCCL a buffer): ``error(message)``, with no OOM observer called and no
        trace entry, because the memory was asked for outside the caching allocator."""
        self._need_cuda()
        raise error(message)

    def _need_cuda(self) -> None:
        if not self.initialized:
            self.init_cuda()

    def _trace(self, action: str, addr: int, size: int) -> None:
        if self.history is not None:
            self.trace.append(
                {
                    "action": action,
                    "addr": addr,
                    "size": size,
                    "stream": 0,
                    "frames": [{"filename": "train.py", "line": 1, "name": "step"}],
                }
            )
