"""The model's stdlib-only modules, loaded without the model package (stdlib only).

``import vramscope.viewer.model.file_identity`` first runs the model package's
``__init__``, which imports numpy and most of the model (~0.1 s): too slow for
code that runs before those imports (the parse started ahead, a cached summary).
:func:`model_module` loads such a leaf module (stdlib imports only, no
package-relative ones) from the model's folder under its own name, so a later
ordinary import of the model gets this same module object from ``sys.modules``.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

MODEL = "vramscope.viewer.model"
MODEL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "model")
# The only modules loaded this way: each must stay stdlib-only (tests/model/test_parse_ahead.py).
LEAVES = ("file_identity", "parse_handover")


def model_module(stem: str) -> ModuleType:
    """``vramscope.viewer.model.<stem>`` (one of :data:`LEAVES`), imported without the
    model package when that is not imported yet."""
    if stem not in LEAVES:
        raise ValueError(f"{stem!r} is not one of the model's stdlib-only modules")
    name = f"{MODEL}.{stem}"
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    if MODEL in sys.modules:  # the package is (being) imported anyway
        return importlib.import_module(name)
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    # A path-based finder: plain files in a checkout or a wheel, the archive of a
    # frozen app (PyInstaller's finder hooks the paths inside it).
    spec = PathFinder.find_spec(name, [MODEL_DIR])
    if spec is None or spec.loader is None:
        return importlib.import_module(name)  # slower (imports the model), still right
    mod = module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod
