"""Import pyqtgraph without making PySide6 create every one of its Qt types.

PySide6 creates a Qt class (and its Python enums) the first time it is looked up:
``import PySide6.QtWidgets`` alone builds 15 of its 200-odd types.  pyqtgraph's
``pyqtgraph.Qt`` mirrors QtCore, QtGui and QtWidgets into modules of its own by
copying every name ``dir()`` lists, which makes PySide6 build all of them, ~600
enums: 0.2-0.3 s of the window's start on the GUI thread, for types the viewer never
uses.  :func:`import_pyqtgraph` gives pyqtgraph mirrors that look a name up in PySide6
when it is first read instead, and lets its copy see only the types already built;
every name pyqtgraph (or anyone) reads through a mirror is PySide6's own object, as
with the copy.

Only where pyqtgraph's mirrors are its empty placeholder packages (the layout of every
pyqtgraph that copies): any other layout, an already imported pyqtgraph, or
``VRAMSCOPE_EAGER_QT=1`` and it is a plain ``import pyqtgraph``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types

MIRRORED = ("QtCore", "QtGui", "QtWidgets")
EAGER_ENV = "VRAMSCOPE_EAGER_QT"


def _placeholders() -> bool:
    """Whether pyqtgraph's ``Qt/QtCore`` (etc.) packages are the empty modules its
    copy fills (found on disk, nothing imported)."""
    try:
        spec = importlib.util.find_spec("pyqtgraph")
    except (ImportError, ValueError):
        return False
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        inits = [os.path.join(root, "Qt", name, "__init__.py") for name in MIRRORED]
        try:
            return all(os.path.getsize(p) == 0 for p in inits)
        except OSError:
            return False
    return False


def _built(module: types.ModuleType) -> list[str]:
    return list(vars(module))


def import_pyqtgraph() -> None:
    """``import pyqtgraph``, with lazy mirrors of PySide6's modules where it can
    (see the module docstring)."""
    if "pyqtgraph" in sys.modules:
        return
    if os.environ.get(EAGER_ENV, "") not in ("", "0") or not _placeholders():
        import pyqtgraph

        return
    import PySide6.QtCore
    import PySide6.QtGui
    import PySide6.QtWidgets

    sources = {
        "QtCore": PySide6.QtCore,
        "QtGui": PySide6.QtGui,
        "QtWidgets": PySide6.QtWidgets,
    }
    listed = {}
    for name, src in sources.items():
        mirror = types.ModuleType(f"pyqtgraph.Qt.{name}", src.__doc__)
        # PEP 562: a name the mirror lacks is read from PySide6, which builds it then.
        vars(mirror)["__getattr__"] = functools.partial(getattr, src)
        sys.modules[mirror.__name__] = mirror
        listed[name] = src.__dict__.get("__dir__")
        # What pyqtgraph's copy iterates over: the names built so far.
        vars(src)["__dir__"] = functools.partial(_built, src)
    try:
        import pyqtgraph  # noqa: F401
    except BaseException:
        for name in MIRRORED:
            sys.modules.pop(f"pyqtgraph.Qt.{name}", None)
        raise
    finally:
        for name, src in sources.items():
            if listed[name] is None:
                vars(src).pop("__dir__", None)
            else:
                vars(src)["__dir__"] = listed[name]
