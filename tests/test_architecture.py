"""Import contracts: the model never imports Qt, the viewer never imports torch,
capture never imports Qt (nor the viewer).  Checked two ways: statically over
every source file, and at run time in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QT = {"PySide6", "PyQt5", "PyQt6", "PySide2", "pyqtgraph", "shiboken6"}
TORCH = {"torch"}


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every module a file imports (absolute or relative)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module:
                names.add(base)
            sep = "" if base.endswith(".") else "."
            names.update(base + sep + alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant):
                names.add(str(node.args[0].value))
    return names


def top(name: str) -> str:
    return name.split(".")[0]


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", files("viewer/model"), ids=lambda p: p.name)
def test_model_imports_no_qt_and_no_torch(path):
    for name in imported_modules(path):
        assert top(name) not in QT | TORCH, f"{path.name} imports {name}"
        assert "_qt" not in name and "commands" not in name, f"{path.name} imports {name}"
        assert "startup" not in name, f"{path.name} imports {name} (start-up sits above the model)"


# The viewer's hand-overs to capture, each on demand: `vramscope record`, and the Python
# API's (viewer/api/, the package `vramscope`) re-exported `record` and notebook magic.
CAPTURE_BRIDGES = {("commands", "record.py"), ("api", "__init__.py"), ("api", "magic.py")}


@pytest.mark.parametrize("path", files("viewer"), ids=lambda p: str(p.relative_to(ROOT)))
def test_viewer_never_imports_torch(path):
    for name in imported_modules(path):
        assert top(name) not in TORCH, f"{path} imports {name}"
        if (path.parent.name, path.name) not in CAPTURE_BRIDGES:
            assert not name.startswith("vramscope.capture"), f"{path} imports {name}"


# The live-attach wire protocol is the one viewer module capture may import: both
# sides speak it, and the frozen viewer ships without capture.
PROTOCOL = "vramscope.viewer.live_protocol"


@pytest.mark.parametrize("path", files("capture"), ids=lambda p: p.name)
def test_capture_never_imports_qt_or_viewer(path):
    for name in imported_modules(path):
        assert top(name) not in QT, f"{path.name} imports {name}"
        if name in (PROTOCOL, "vramscope.viewer") and path.parent.name == "live":
            continue  # `from vramscope.viewer import live_protocol` in capture/live/
        assert not name.startswith("vramscope.viewer"), f"{path.name} imports {name}"


def test_live_protocol_is_stdlib_only():
    allowed = {
        "__future__",
        "json",
        "os",
        "socket",
        "stat",
        "struct",
        "sys",
        "tempfile",
        "time",
        "pathlib",
        "typing",
    }
    names = imported_modules(ROOT / "viewer" / "live_protocol.py")
    assert {top(n) for n in names} <= allowed, names


CAPTURE_LIVE_PROBE = """
import sys
import vramscope.capture, vramscope.capture.live, vramscope.capture.live.agent
bad = sorted(m for m in sys.modules if m.split(".")[0] in {"PySide6", "pyqtgraph", "torch",
             "numpy"} or m.startswith("vramscope.viewer.")
             and m != "vramscope.viewer.live_protocol")
print(",".join(bad))
"""


def test_live_agent_loads_without_qt_numpy_torch_or_the_viewer_model():
    out = subprocess.run(
        [sys.executable, "-c", CAPTURE_LIVE_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == ""


def test_static_check_catches_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from PySide6 import QtCore\nimport torch.cuda\nfrom . import _qt\n"
        "from vramscope.viewer import _qt as q\n"
    )
    names = imported_modules(bad)
    assert {"PySide6", "torch.cuda", "._qt", "vramscope.viewer._qt"} <= names


RUNTIME_PROBE = """
import sys, importlib, pkgutil
import vramscope.viewer.model as model
for m in pkgutil.walk_packages(model.__path__, model.__name__ + "."):
    importlib.import_module(m.name)
import vramscope.viewer.cli, vramscope.viewer.commands.summary
bad = sorted(m for m in sys.modules if m.split(".")[0] in {"PySide6", "pyqtgraph", "torch"})
print(",".join(bad))
"""


def test_model_and_summary_load_without_qt_or_torch_at_runtime():
    out = subprocess.run(
        [sys.executable, "-c", RUNTIME_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == ""


GUI_PROBE = """
import sys, importlib, pkgutil
import vramscope.viewer as viewer
for m in pkgutil.walk_packages(viewer.__path__, viewer.__name__ + "."):
    if m.name.endswith("commands.record") or m.name.endswith("__main__"):
        continue
    importlib.import_module(m.name)
print("torch" in sys.modules)
"""


def test_whole_viewer_imports_without_torch_at_runtime():
    out = subprocess.run(
        [sys.executable, "-c", GUI_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_every_source_package_is_installed():
    """pyproject lists packages by hand (the folders are renamed on install): a new
    subpackage missing from that list works from the checkout and breaks the wheel."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    for top in ("viewer", "capture"):
        for init in (ROOT / top).rglob("__init__.py"):
            name = installed_name(init.parent)
            assert name in listed, f"{init.parent} is not in pyproject's packages"


def installed_name(folder: Path) -> str:
    """The import name of the repository's ``folder`` once installed, by pyproject's
    package-dir (the deepest folder mapped: viewer/api/ is the top package ``vramscope``)."""
    import tomllib

    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    rel = folder.relative_to(ROOT).as_posix()
    best = max(
        (d for d in dirs.items() if rel == d[1] or rel.startswith(d[1] + "/")),
        key=lambda d: len(d[1]),
    )
    rest = rel[len(best[1]) :].strip("/")
    return ".".join([best[0], *rest.split("/")]) if rest else best[0]


def test_the_python_api_is_the_top_package():
    assert installed_name(ROOT / "viewer" / "api") == "vramscope"
    assert installed_name(ROOT / "viewer" / "model" / "io") == "vramscope.viewer.model.io"
