"""Import ``vramscope.capture`` from this checkout, installed or not.

The GPU machine runs a copy of the repository without ``pip install``; the
import package ``vramscope.capture`` is the checkout's ``capture/`` directory
(pyproject's package-dir).  When ``vramscope`` is importable (an editable
install) that is used; otherwise a bare ``vramscope`` package is put in
``sys.modules`` and ``capture/`` is loaded under the name ``vramscope.capture``
so that its relative imports work.  Importing capture does not import torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

#: The repository root (tests/workloads/truth/_shim.py -> three levels up).
ROOT = Path(__file__).resolve().parents[3]


def import_capture() -> types.ModuleType:
    """``vramscope.capture``: the installed one if importable, else the checkout's ``capture/``."""
    if "vramscope.capture" in sys.modules:
        return sys.modules["vramscope.capture"]
    try:
        return importlib.import_module("vramscope.capture")
    except ImportError:
        pass
    pkg = sys.modules.get("vramscope")
    if pkg is None:
        pkg = types.ModuleType("vramscope")
        pkg.__path__ = []  # a package with no files of its own
        sys.modules["vramscope"] = pkg
    init = ROOT / "capture" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "vramscope.capture", init, submodule_search_locations=[str(init.parent)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {init}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["vramscope.capture"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules["vramscope.capture"]
        raise
    pkg.capture = mod  # type: ignore[attr-defined]
    return mod
