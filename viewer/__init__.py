"""vramscope viewer: open PyTorch CUDA memory snapshots and see why memory ran out.

The viewer never imports torch: snapshots come from any machine.  Its model
(:mod:`vramscope.viewer.model`) is pure Python + numpy and never imports Qt;
the Qt widgets live in :mod:`vramscope.viewer._qt` and only adapt the model.

Beside them: :mod:`.commands` (one function per command; the CLI and the MCP server
render its answer), :mod:`.cli` (the ``vramscope`` command's parser), :mod:`.api` (the
Python API, installed as ``vramscope``), :mod:`.early` (stdlib-only helpers of the
start-up path and the model), :mod:`.startup` (work a command begins before its heavy
imports) and :mod:`.live_protocol` (the live-attach wire format, shared with capture).
"""

from __future__ import annotations


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return "0+unknown"
    try:
        return version("vramscope")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str):
    # Lazy: importlib.metadata costs ~30 ms, more than a cached `vramscope summary`.
    if name == "__version__":
        globals()["__version__"] = value = _version()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__"]
