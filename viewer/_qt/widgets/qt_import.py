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

PySide6 also asks, of every module imported after it (on any thread: numpy and the model
load beside Qt while the file is parsed), whether that module "uses PySide", by reading
the module's whole source text (``shibokensupport.feature``, through
``inspect.getsource``): ~0.2 s over ~380 modules of the window's start.  The answer only
picks the module's default ``__feature__`` selection (``snake_case``, ``true_property``),
which nothing in vramscope turns on: every module's selection is "none" whichever answer
it gets.  :func:`import_pyqtgraph` has PySide6 look at the module's globals instead
(whether they hold a PySide6 module or object), which costs microseconds (not with
``VRAMSCOPE_EAGER_QT=1``).
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


def _holds_pyside(module: types.ModuleType) -> bool:
    """Whether ``module``'s globals hold a PySide6 module, class or function: what
    PySide6's feature switch asks of each imported module (see the module docstring)."""
    try:  # it runs inside every import: whatever a module holds, never raise there
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                owner = value.__name__
            else:
                owner = getattr(value if callable(value) else type(value), "__module__", None)
            if isinstance(owner, str) and owner.startswith(("PySide6", "shiboken6")):
                return True
    except Exception:
        return False
    return False


def _skip_source_scans() -> None:
    """Have PySide6's feature switch read modules' globals, not their source files."""
    feature = sys.modules.get("shibokensupport.feature")
    if feature is not None and callable(getattr(feature, "_mod_uses_pyside", None)):
        feature._mod_uses_pyside = _holds_pyside


def import_pyqtgraph() -> None:
    """``import pyqtgraph``, with lazy mirrors of PySide6's modules where it can
    (see the module docstring)."""
    if "pyqtgraph" in sys.modules:
        return
    if os.environ.get(EAGER_ENV, "") not in ("", "0"):
        import pyqtgraph

        return
    import PySide6.QtCore

    _skip_source_scans()
    if not _placeholders():
        import pyqtgraph

        return
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
