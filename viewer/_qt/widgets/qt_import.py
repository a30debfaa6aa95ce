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

pyqtgraph's ``__init__`` also imports, for its namespace, modules the viewer never uses
(:data:`DEFERRED`: the parameter tree behind its colour-map and scatter-plot widgets,
table and data-tree widgets, box plots...): ~40 ms of the window's start.  Each of those
stands in ``sys.modules`` as a :class:`_Deferred` module that binds no name to
``from X import *`` and imports the real module the first time anything is read from
it (pyqtgraph's own ``from .TableWidget import TableWidget`` included); a name
pyqtgraph's namespace then lacks (``pg.TableWidget``) is found in them when first read.
Only for those that are plain modules in pyqtgraph's folder (not with
``VRAMSCOPE_EAGER_QT=1``).  Its ``multiprocess`` package (:data:`DEFERRED_PACKAGES`:
the standard library's multiprocessing and socket beneath it, ~10 ms), which its remote
view imports by name and uses only once one is made, stands in the same way; its
submodules import as they would (each once).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys
import types
from typing import ClassVar

from .embedded_code import cached_compiles

MIRRORED = ("QtCore", "QtGui", "QtWidgets")
EAGER_ENV = "VRAMSCOPE_EAGER_QT"
#: pyqtgraph's modules (under ``pyqtgraph.``) that its ``__init__`` imports and the viewer
#: never uses: imported when first read from instead (see the module docstring).
DEFERRED = (
    "widgets.ColorMapWidget",
    "widgets.DataFilterWidget",
    "widgets.ScatterPlotWidget",
    "widgets.TableWidget",
    "widgets.DataTreeWidget",
    "widgets.DiffTreeWidget",
    "widgets.CheckTable",
    "widgets.JoystickButton",
    "widgets.RawImageWidget",
    "graphicsItems.BoxplotItem",
    "graphicsItems.IsocurveItem",
    "graphicsItems.PColorMeshItem",
)
#: pyqtgraph's packages that its modules import by name (``from .. import multiprocess as
#: mp``) and use only inside functions the viewer never calls: stand-ins as above.
DEFERRED_PACKAGES = ("multiprocess",)


def _root() -> str:
    """pyqtgraph's folder ("" where it cannot be found without importing it)."""
    try:
        spec = importlib.util.find_spec("pyqtgraph")
    except (ImportError, ValueError):
        return ""
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return roots[0] if roots else ""


def _placeholders(root: str) -> bool:
    """Whether pyqtgraph's ``Qt/QtCore`` (etc.) packages in its folder ``root`` are the
    empty modules its copy fills (found on disk, nothing imported)."""
    if not root:
        return False
    inits = [os.path.join(root, "Qt", name, "__init__.py") for name in MIRRORED]
    try:
        return all(os.path.getsize(p) == 0 for p in inits)
    except OSError:
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


class _Deferred(types.ModuleType):
    """A pyqtgraph module not imported yet: ``from M import *`` binds nothing; anything
    else read from it imports the real module and is read from that."""

    __all__: ClassVar[list[str]] = []

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            # (what the import system asks, e.g. whether it is a package: it is not)
            raise AttributeError(name)
        return getattr(_real(self.__name__), name)


_loaded: dict[str, types.ModuleType] = {}


def _real(name: str) -> types.ModuleType:
    """The real module a :class:`_Deferred` stands for, imported now if not yet."""
    module = _loaded.get(name)
    if module is None:
        if isinstance(sys.modules.get(name), _Deferred):
            sys.modules.pop(name, None)  # (another thread may be a step ahead: no KeyError)
        module = _loaded[name] = importlib.import_module(name)
    return module


def _from_deferred(name: str):
    """pyqtgraph's namespace's ``__getattr__``: a name one of the deferred modules would
    have put there (``pg.TableWidget``), from the real module.  Anything else (a
    submodule the import system looks for first, a name nobody defines) imports nothing."""
    if isinstance(sys.modules.get(f"pyqtgraph.{name}"), _Deferred):
        return _real(f"pyqtgraph.{name}")  # a deferred package (``pg.multiprocess``)
    module = _deferred_names().get(name)
    if module is None:
        raise AttributeError(f"module 'pyqtgraph' has no attribute {name!r}")
    return getattr(_real(module), name)


@functools.cache
def _deferred_names() -> dict[str, str]:
    """Each name a deferred module exports (its literal ``__all__``, read from its source
    without running it) -> that module."""
    names: dict[str, str] = {}
    for name, path in _deferred_files.items():
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                try:
                    exported = ast.literal_eval(node.value)
                except ValueError:
                    break
                for item in exported:
                    if isinstance(item, str):
                        names.setdefault(item, name)
                break
    return names


_deferred_files: dict[str, str] = {}  # deferred module -> its source file


def _defer_unused(root: str) -> list[str]:
    """Stand a :class:`_Deferred` in for each of :data:`DEFERRED` that is a plain module
    in pyqtgraph's folder ``root`` with an ``__all__`` list, and for each of
    :data:`DEFERRED_PACKAGES` that is a package there; their names."""
    names = []
    for short in DEFERRED:
        name = f"pyqtgraph.{short}"
        path = os.path.join(root, *short.split(".")) + ".py"
        if name in sys.modules or not _lists_its_names(path):
            continue
        sys.modules[name] = _Deferred(name)
        _deferred_files[name] = path
        names.append(name)
    for short in DEFERRED_PACKAGES:
        name = f"pyqtgraph.{short}"
        if name in sys.modules or not os.path.isfile(os.path.join(root, short, "__init__.py")):
            continue
        stand_in = sys.modules[name] = _Deferred(name)
        # Its folder: a submodule imported by name loads under the stand-in, once (the
        # package's __init__, when it runs, finds it imported).
        vars(stand_in)["__path__"] = [os.path.join(root, short)]
        names.append(name)
    return names


def _lists_its_names(path: str) -> bool:
    """Whether the module file ``path`` sets ``__all__`` (what ``from M import *`` then
    binds, and what :func:`_deferred_names` reads); False where there is no such file."""
    try:
        with open(path, encoding="utf-8") as f:
            return "\n__all__ = [" in f.read()
    except (OSError, ValueError):
        return False


def import_pyqtgraph() -> None:
    """``import pyqtgraph``, with lazy mirrors of PySide6's modules where it can
    (see the module docstring)."""
    if "pyqtgraph" in sys.modules:
        return
    if os.environ.get(EAGER_ENV, "") not in ("", "0"):
        import pyqtgraph

        return
    # PySide6's feature switch starts scanning imported modules' sources as soon as
    # shiboken6 is imported, and the model's modules (numpy's ~150 among them) are being
    # imported on the preload thread meanwhile: replaced before PySide6's own modules load.
    # shiboken6 compiles its embedded signature support at every import: its code is
    # cached between starts like a .pyc (embedded_code.py says how).
    with cached_compiles():
        import shiboken6  # noqa: F401

    _skip_source_scans()
    import PySide6.QtCore

    _skip_source_scans()
    root = _root()
    if not _placeholders(root):
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
    deferred = _defer_unused(root)
    try:
        import pyqtgraph
    except BaseException:
        for name in MIRRORED:
            sys.modules.pop(f"pyqtgraph.Qt.{name}", None)
        for name in deferred:
            sys.modules.pop(name, None)
        raise
    else:
        if deferred and "__getattr__" not in vars(pyqtgraph):
            vars(pyqtgraph)["__getattr__"] = _from_deferred
    finally:
        for name, src in sources.items():
            if listed[name] is None:
                vars(src).pop("__dir__", None)
            else:
                vars(src)["__dir__"] = listed[name]
