"""vramscope viewer: open PyTorch CUDA memory snapshots and see why memory ran out.

The viewer never imports torch: snapshots come from any machine.  Its model
(:mod:`vramscope.viewer.model`) is pure Python + numpy and never imports Qt;
the Qt widgets live in :mod:`vramscope.viewer._qt` and only adapt the model.
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


__version__ = _version()

__all__ = ["__version__"]
