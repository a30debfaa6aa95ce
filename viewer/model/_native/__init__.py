"""Optional compiled helpers: every ``_native/<stem>.c`` builds as ``_native.<stem>``.

``setup.py`` compiles each C file here into an extension of the same stem
(CPython C API only, no numpy headers needed).  Compilation is optional: an
install without a compiler still succeeds, and every caller keeps a pure-Python
fallback.  Use :func:`native_module` to import one (``None`` when it is not
built, or when ``VRAMSCOPE_PURE_PYTHON=1`` asks for the pure-Python paths).

The extensions: ``snapparse`` (the snapshot parser), ``replay_core`` (the replay loop),
``catcore`` (the categories' passes), ``whatif_core`` (the what-if model).  What they share
is written once in ``common/``: the allocator's size rules (``allocator_rules.h``, handed
their numbers by ``allocator_rules.native_rules``), the int64 hash map (``i64map.h``),
growable arrays and how their failures travel (``growth.h``), buffer access
(``buffers.h``).

May import: the standard library only (the C files include CPython's and the C
library's headers, ``common/`` and their own ``<stem>_src/``, nothing of the model).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_ENV = "VRAMSCOPE_PURE_PYTHON"


def pure_python_requested() -> bool:
    """True when ``VRAMSCOPE_PURE_PYTHON`` is set to anything but ``""``/``0``."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def native_module(stem: str) -> ModuleType | None:
    """The compiled module ``_native.<stem>``, or None if not built or disabled."""
    if pure_python_requested():
        return None
    try:
        return importlib.import_module(f"{__name__}.{stem}")
    except ImportError:
        return None
