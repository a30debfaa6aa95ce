"""``vramscope.viewer.model`` is a lazy facade: importing it loads nothing else, each
public name comes from the module that defines it, and type checkers see the same
names (its ``TYPE_CHECKING`` imports)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import vramscope.viewer.model as model

FACADE = Path(__file__).resolve().parents[2] / "viewer" / "model" / "__init__.py"


def test_every_public_name_is_its_modules_own():
    assert len(model.__all__) >= 20
    for name in model.__all__:
        module = importlib.import_module(f"{model.__name__}.{model._EXPORTS[name]}")
        assert getattr(model, name) is getattr(module, name), name


def test_type_checkers_see_the_same_names_from_the_same_modules():
    tree = ast.parse(FACADE.read_text(encoding="utf-8"))
    checked = [
        n
        for n in tree.body
        if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING"
    ]
    assert len(checked) == 1
    seen = {
        a.name: node.module
        for node in checked[0].body
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }
    assert seen == model._EXPORTS


def test_importing_the_facade_imports_nothing_else():
    code = (
        "import sys; import vramscope.viewer.model; "
        "print(sorted(m for m in sys.modules if m.startswith('vramscope.viewer.model.')"
        " or m == 'numpy'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
