"""The few torch calls capture makes, behind one small object.

Everything that touches torch goes through :class:`TorchBackend`, for two
reasons.  Importing ``vramscope.capture`` must stay cheap and must work where
torch is missing, so torch is imported here, lazily, on first use.  And the
recorder's logic (nesting, restoring the previous state, OOM and signal
dumps, the runner) can be tested on a machine without a GPU by swapping in a
fake backend with :func:`set_backend`.

The torch entry points used are private but stable since torch 2.1 and the
ones torch's own documentation recommends for memory snapshots:
``torch.cuda.memory._record_memory_history``, ``torch.cuda.memory._snapshot``
and ``torch._C._cuda_attach_out_of_memory_observer``.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

#: Signature of torch's OOM observer: ``(device, alloc, device_alloc, device_free)``.
OomObserver = Callable[[int, int, int, int], None]


@dataclass(frozen=True)
class HistorySettings:
    """What ``_record_memory_history`` is called with while a recorder is active."""

    context: str | None
    stacks: str
    max_entries: int


class TorchBackend:
    """Capture's view of torch.cuda; one per process (see :func:`get_backend`)."""

    def __init__(self, torch_module: Any) -> None:
        self._torch = torch_module

    @property
    def torch(self) -> Any:
        """The torch module this backend speaks to (the live agent's fast path calls
        into ``torch._C`` directly)."""
        return self._torch

    @property
    def torch_version(self) -> str:
        return str(getattr(self._torch, "__version__", "unknown"))

    def early_problem(self) -> str | None:
        """Why recording cannot work, found *without* initialising CUDA; else None.

        Only what torch knows from its build is checked here.  Whether a GPU
        is actually visible needs the CUDA runtime, and starting it early
        would freeze ``CUDA_VISIBLE_DEVICES`` and ``PYTORCH_CUDA_ALLOC_CONF``
        before the user's script had a chance to set them; that question is
        left to :meth:`cuda_available`, asked only once CUDA was needed anyway.
        """
        t = self._torch
        version = getattr(t, "version", None)
        if getattr(version, "cuda", None) is None and getattr(version, "hip", None) is None:
            return (
                f"CUDA is not available: torch {self.torch_version} is a CPU-only build, "
                "so no GPU memory is recorded (your program runs normally)"
            )
        needed = ("_cuda_record_memory_history", "_cuda_memorySnapshot")
        if not all(hasattr(t._C, name) for name in needed):
            return (
                f"torch {self.torch_version} lacks the CUDA memory-history API "
                "(torch >= 2.1 is needed); no GPU memory is recorded"
            )
        return None

    def cuda_available(self) -> bool:
        try:
            return bool(self._torch.cuda.is_available())
        except Exception:
            return False

    def cuda_initialized(self) -> bool:
        try:
            return bool(self._torch.cuda.is_initialized())
        except Exception:
            return False

    def call_at_cuda_init(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` when torch initialises CUDA (now if it already has).

        Uses torch's own queue of deferred CUDA calls, the one that defers
        ``torch.cuda.manual_seed``.  Returns False where that queue does not
        exist; the caller then does the work itself.
        """
        lazy_call = getattr(self._torch.cuda, "_lazy_call", None)
        if lazy_call is None:
            return False
        lazy_call(fn)
        return True

    def history_enabled(self) -> bool | None:
        """Whether the allocator records history now; None where torch cannot say.

        Only once CUDA is initialised: torch 2.11 segfaults when this is asked
        before (the allocator does not exist yet).
        """
        probe = getattr(self._torch._C, "_cuda_isHistoryEnabled", None)
        if probe is None:
            return None
        try:
            return bool(probe())
        except Exception:
            return None

    def free_stack_hazard(self) -> str | None:
        """Why a stack taken at a free would break this program's backward; None where safe.

        From torch 2.10 the allocator's stack of an event inside backward also
        looks up the autograd node's forward traceback, a Python dict lookup.
        On Python < 3.13 that lookup (torch's compat shim for
        ``PyDict_GetItemRef``) mistakes an exception already pending for its
        own failure and clears it.  A free during C++ unwinding happens with an
        exception pending: non-reentrant checkpointing stops each recomputation
        by raising from a saved-tensor hook, and when the last saved tensor is
        dropout's mask, dropout's output and mask are freed while that
        exception unwinds through the op.  The exception vanishes and backward
        fails with ``SystemError: ... returned NULL without setting an
        exception``.  Stacks taken at allocations are safe (nothing allocates
        while unwinding), so only frees lose theirs.
        ``VRAMSCOPE_FREE_STACKS=1`` keeps them (a torch with the fix).
        """
        if os.environ.get("VRAMSCOPE_FREE_STACKS") == "1":
            return None
        py = _python_version()
        if py >= (3, 13) or _version_tuple(self.torch_version) < (2, 10):
            return None
        return (
            f"torch {self.torch_version} on Python {py[0]}.{py[1]} clears a pending Python "
            "exception when it takes a stack at a free inside backward (checkpointed "
            "backward then fails with SystemError)"
        )

    def effective_context(self, context: str | None) -> str | None:
        """The ``context`` recording really uses: ``"alloc"`` for ``"all"`` where
        :meth:`free_stack_hazard` applies, else ``context`` itself."""
        if context == "all" and self.free_stack_hazard() is not None:
            return "alloc"
        return context

    def record_history(self, settings: HistorySettings | None) -> None:
        """Turn history recording on with ``settings``, or off with None."""
        memory = self._torch.cuda.memory
        if settings is None:
            memory._record_memory_history(enabled=None)
        else:
            memory._record_memory_history(
                enabled="all",
                context=self.effective_context(settings.context),
                stacks=settings.stacks,
                max_entries=settings.max_entries,
            )

    def attach_oom_observer(self, observer: OomObserver) -> None:
        # torch keeps observers for the life of the process (there is no
        # detach), so callers attach one dispatcher once.
        self._torch._C._cuda_attach_out_of_memory_observer(observer)

    def snapshot(self) -> dict[str, Any]:
        return self._torch.cuda.memory._snapshot()

    def current_device(self) -> int:
        return int(self._torch.cuda.current_device())

    def memory_stats(self, device: int) -> dict[str, Any]:
        return dict(self._torch.cuda.memory_stats(device))

    def device_name(self, device: int) -> str:
        return str(self._torch.cuda.get_device_name(device))

    def total_memory(self, device: int) -> int:
        return int(self._torch.cuda.get_device_properties(device).total_memory)

    def multiprocessors(self, device: int) -> tuple[int, int]:
        """(streaming multiprocessors, most resident threads per multiprocessor): what sizes
        ATen's reductions' staging buffers, so the viewer can tell one at its cap."""
        props = self._torch.cuda.get_device_properties(device)
        return int(props.multi_processor_count), int(props.max_threads_per_multi_processor)

    def mem_get_info(self, device: int) -> tuple[int, int]:
        """(free, total) bytes of the device now, for every process (cudaMemGetInfo)."""
        free, total = self._torch.cuda.mem_get_info(device)
        return int(free), int(total)

    def device_uuid(self, device: int) -> str | None:
        """The device's UUID (what NVML and nvidia-smi name it by), None where torch cannot say."""
        uuid = getattr(self._torch.cuda.get_device_properties(device), "uuid", None)
        return str(uuid) if uuid is not None else None

    def allocator_backend(self) -> str | None:
        getter = getattr(self._torch.cuda, "get_allocator_backend", None)
        return str(getter()) if getter is not None else None

    def is_oom(self, exc: BaseException) -> bool:
        oom_type = getattr(self._torch.cuda, "OutOfMemoryError", None)
        return oom_type is not None and isinstance(exc, oom_type)


def _python_version() -> tuple[int, int]:
    return sys.version_info[0], sys.version_info[1]


def _version_tuple(version: str) -> tuple[int, int]:
    """``(2, 11)`` for ``"2.11.0+cu130"``; ``(0, 0)`` where it cannot be read."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m[1]), int(m[2])) if m else (0, 0)


_lock = threading.Lock()
_backend: Any = None
_loaded = False
# The TorchBackend once made is reused after reset_backend(): torch keeps its
# OOM observer for the life of the process, and a second backend would
# attach a second one (two snapshots per OOM).
_torch_backend: TorchBackend | None = None


def get_backend() -> Any:
    """The process's backend, importing torch on first call; None without torch."""
    global _backend, _loaded, _torch_backend
    with _lock:
        if not _loaded:
            try:
                import torch
            except Exception:  # ImportError, or a broken install raising anything
                _backend = None
            else:
                if _torch_backend is None or _torch_backend._torch is not torch:
                    _torch_backend = TorchBackend(torch)
                _backend = _torch_backend
            _loaded = True
        return _backend


def set_backend(backend: Any) -> Any:
    """Replace the backend (tests use a fake GPU); returns the previous one.

    Passing None means "torch is not installed".
    """
    global _backend, _loaded
    with _lock:
        previous = _backend if _loaded else None
        _backend = backend
        _loaded = True
        return previous


def reset_backend() -> None:
    """Forget the backend so the next :func:`get_backend` imports torch again."""
    global _backend, _loaded
    with _lock:
        _backend = None
        _loaded = False
