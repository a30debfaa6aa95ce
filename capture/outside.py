"""Out-of-memory errors that do not come from PyTorch's caching allocator.

The allocator's own OOM is seen by its OOM observer (:mod:`.oom`).  Much GPU
memory is allocated elsewhere, in the same process: cuBLAS creates a handle
and a workspace per thread and stream (autograd's backward thread creates its
own), cuDNN and cuBLASLt allocate workspaces, NCCL its buffers, extensions
call ``cudaMalloc`` themselves, and the CUDA context of every new thread or
library needs memory too.  When one of those fails, torch raises a plain
``RuntimeError`` (``CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling
`cublasCreate(handle)```), no observer runs, and ``memory_stats`` counts no
OOM.  The capture recognises these at the exception the program dies of, from
the error text alone: the library's own status name, never a guess from the
word "memory".

:func:`classify` returns the sidecar's ``outside_allocator_oom`` field::

    "outside_allocator_oom": {"library": "cuBLAS", "error": "<first line>",
                              "exception_type": "RuntimeError",
                              "stack": ["train.py:41 step", ...innermost last]}
"""

from __future__ import annotations

import os
import re
import traceback
from typing import Any, Callable, Iterator

#: The libraries an outside-allocator OOM is attributed to (the sidecar's ``library``).
LIBRARIES = ("cuBLAS", "cuBLASLt", "cuDNN", "CUDA", "NCCL")

#: Most frames kept in ``stack`` (the innermost ones).
MAX_FRAMES = 60
#: How far along ``__cause__`` / ``__context__`` an error is looked for.
MAX_CHAIN = 8

# Each status name means "a device allocation failed inside the library".
# cuDNN 9 splits its ALLOC_FAILED into host and device allocation failures;
# the host one is not GPU memory, so only the device one counts.
_CUBLAS = re.compile(r"CUBLAS_STATUS_ALLOC_FAILED")
_CUBLASLT_CALL = re.compile(r"cublasLt\w*", re.IGNORECASE)
_CUDNN = re.compile(r"CUDNN_STATUS_(?:ALLOC_FAILED|INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)\b")
# The runtime's and the driver's names for a failed cudaMalloc / cuMemAlloc, as
# torch's CUDA checks, extensions and Triton print them.  torch's allocator says
# "CUDA out of memory. Tried to allocate", which none of these match.
_CUDA = re.compile(
    r"CUDA error: out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY"
    r"|CUDA driver error: out of memory"
)
_NCCL = re.compile(r"\bnccl", re.IGNORECASE)
# What NCCL prints when its cudaMalloc / cuMem / calloc on the device fails.
_NCCL_OOM = re.compile(
    r"out of memory|Failed to CUDA calloc|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY",
    re.IGNORECASE,
)


def library_of(text: str) -> str | None:
    """Which library failed to allocate device memory, from an error message; else None."""
    if not text:
        return None
    if _CUBLAS.search(text):
        return "cuBLASLt" if _CUBLASLT_CALL.search(text) else "cuBLAS"
    if _CUDNN.search(text):
        return "cuDNN"
    if _NCCL.search(text) and _NCCL_OOM.search(text):
        return "NCCL"
    if _CUDA.search(text):
        return "CUDA"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen and len(seen) < MAX_CHAIN:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def classify(
    exc: BaseException,
    *,
    is_allocator_oom: Callable[[BaseException], bool] | None = None,
    skip_files: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """The ``outside_allocator_oom`` field for ``exc``, or None if it is not such an OOM.

    ``exc`` and the exceptions it was raised from (``__cause__``,
    ``__context__``) are searched; the first whose message names a failed
    device allocation in a library wins.  An exception the allocator raised
    itself (``is_allocator_oom``) is left to the OOM observer.  ``stack`` is
    the traceback of the exception the program dies of, innermost frame last,
    without frames from ``skip_files`` (the capture's own runner).  Never raises.
    """
    try:
        for e in _chain(exc):
            if is_allocator_oom is not None and _safe_bool(is_allocator_oom, e):
                return None
            text = _message(e)
            library = library_of(text)
            if library is None:
                continue
            lines = [ln for ln in text.splitlines() if ln.strip()]
            return {
                "library": library,
                "error": lines[0].strip() if lines else "",
                "exception_type": type(e).__name__,
                "stack": python_stack(exc, skip_files=skip_files),
            }
    except Exception:
        return None
    return None


def python_stack(exc: BaseException, *, skip_files: tuple[str, ...] = ()) -> list[str]:
    """``["file.py:123 function", ...]`` of ``exc``'s traceback, innermost last."""
    skip = {os.path.normcase(os.path.realpath(f)) for f in skip_files}
    frames = []
    for fs in traceback.extract_tb(exc.__traceback__):
        name = fs.filename
        if name.startswith("<frozen runpy"):
            continue
        if os.path.normcase(os.path.realpath(name)) in skip:
            continue
        frames.append(f"{name}:{fs.lineno} {fs.name}")
    return frames[-MAX_FRAMES:]


def full_message(exc: BaseException) -> str:
    """The whole message of the exception :func:`classify` matched, capped at 4000 characters."""
    for e in _chain(exc):
        text = _message(e)
        if library_of(text) is not None:
            return text[:4000]
    return _message(exc)[:4000]


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return ""


def _safe_bool(fn: Callable[[BaseException], bool], exc: BaseException) -> bool:
    try:
        return bool(fn(exc))
    except Exception:
        return False
