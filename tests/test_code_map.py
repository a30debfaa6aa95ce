"""The code's map stays readable: packages say what they are, the model's top level
stays small, packages talk through public names, and comments say why, not when.

Static checks over the source tree (no imports), each with a test that the check
itself catches a violation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_TOPS = ("viewer", "capture")
# Names a private-looking folder has on purpose: the Qt views and the C extensions.
PRIVATE_PACKAGES = {"_qt", "_native"}
MODEL_TOP_LEVEL_MAX = 10
ISSUE_REFERENCE = re.compile(r"\b[Ii]ssues?[\s_-]*#?\d+")


def source_files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


def module_name(path: Path, root: Path = ROOT) -> tuple[str, str]:
    """(dotted module name, its package) of a source file, as installed."""
    rel = path.relative_to(root).with_suffix("").parts
    dotted = ".".join(("vramscope", *rel))
    if rel[-1] == "__init__":
        dotted = dotted.rsplit(".", 1)[0]
        return dotted, dotted
    return dotted, dotted.rsplit(".", 1)[0]


def is_package(dotted: str, root: Path = ROOT) -> bool:
    parts = dotted.split(".")[1:]
    return (root.joinpath(*parts) / "__init__.py").exists()


def private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``from X import _name`` (or from a private module) where X lies in another package."""
    _, package = module_name(path, root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            target = ".".join(base + ([node.module] if node.module else []))
        elif (node.module or "").startswith("vramscope."):
            target = node.module
        else:
            continue
        for alias in node.names:
            full = f"{target}.{alias.name}"
            as_path = root.joinpath(*full.split(".")[1:])
            if is_package(full, root) or as_path.with_suffix(".py").exists():
                module = full  # a module imported by name
                name_private = False
            else:
                module = target
                name_private = alias.name.startswith("_") and not alias.name.startswith("__")
            parts = module.split(".")
            module_private = any(
                p.startswith("_") and p not in PRIVATE_PACKAGES and not p.startswith("__")
                for p in parts
            )
            owner = module if is_package(module, root) else module.rsplit(".", 1)[0]
            if (name_private or module_private) and owner != package:
                where = f"{path.relative_to(root)}:{node.lineno}"
                found.append(f"{where}: {module} import {alias.name}")
    return found


def issue_references(path: Path, root: Path = ROOT) -> list[str]:
    """Comments and docstrings that name an issue (process history, not a reason)."""
    text = path.read_text(encoding="utf-8")
    return [
        f"{path.relative_to(root)}:{i}: {line.strip()}"
        for i, line in enumerate(text.splitlines(), 1)
        if ISSUE_REFERENCE.search(line)
    ]


def test_every_package_says_what_it_is():
    inits = [p for top in SOURCE_TOPS for p in (ROOT / top).rglob("__init__.py")]
    assert len(inits) >= 15
    missing = [
        str(p.relative_to(ROOT))
        for p in inits
        if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert not missing, f"packages without a docstring: {missing}"


def unnamed_modules(init: Path) -> list[str]:
    """The modules and subpackages of ``init``'s package its docstring does not name (as a
    word: ``:mod:`.name```, ``name.py`` or ``name``); ``__main__`` (``python -m``) aside."""
    folder = init.parent
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    names = [p.stem for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    names += [p.parent.name for p in folder.glob("*/__init__.py")]
    return sorted(n for n in names if not re.search(rf"(?<!\w){re.escape(n)}\b", doc))


def test_every_package_docstring_names_its_modules():
    """A reader finds a module from its package's docstring: each package lists what it
    holds, and a module added later is added there too."""
    inits = [p for top in SOURCE_TOPS for p in (ROOT / top).rglob("__init__.py")]
    assert len(inits) >= 15
    unnamed = {
        str(p.parent.relative_to(ROOT)): names for p in inits if (names := unnamed_modules(p))
    }
    assert not unnamed, f"package docstrings that do not name these modules: {unnamed}"


def test_the_module_listing_check_catches_one(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Holds :mod:`.kept` and ``sub``; not subsidy."""\n')
    for name in ("kept", "forgotten", "subsidy_calc"):
        (tmp_path / f"{name}.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text('"""x"""\n')
    assert unnamed_modules(tmp_path / "__init__.py") == ["forgotten", "subsidy_calc"]


def test_every_model_package_says_what_it_may_import():
    inits = sorted((ROOT / "viewer" / "model").glob("*/__init__.py"))
    assert len(inits) >= 10
    silent = [
        str(p.relative_to(ROOT))
        for p in inits
        if "may import" not in (ast.get_docstring(ast.parse(p.read_text())) or "").lower()
    ]
    assert not silent, f"model packages that do not say what they may import: {silent}"


def test_the_model_top_level_holds_packages_not_modules():
    modules = [p.name for p in (ROOT / "viewer" / "model").glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= MODEL_TOP_LEVEL_MAX, modules


def test_no_module_imports_a_private_name_of_another_package():
    files = source_files(*SOURCE_TOPS)
    assert len(files) > 150
    found = [hit for path in files for hit in private_imports(path)]
    assert not found, "\n".join(found)


def test_the_private_import_check_catches_one(tmp_path):
    for pkg in ("viewer", "viewer/a", "viewer/b"):
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text('"""x"""\n')
    (tmp_path / "viewer" / "a" / "impl.py").write_text("def _helper():\n    pass\n")
    user = tmp_path / "viewer" / "b" / "user.py"
    user.write_text("from ..a.impl import _helper\nfrom ..a.impl import helper_ok\n")
    sibling = tmp_path / "viewer" / "a" / "sibling.py"
    sibling.write_text("from .impl import _helper\n")
    assert private_imports(user, tmp_path) == [
        "viewer/b/user.py:1: vramscope.viewer.a.impl import _helper"
    ]
    assert private_imports(sibling, tmp_path) == []  # inside its own package: fine


def test_no_comment_names_an_issue():
    files = (
        source_files(*SOURCE_TOPS, "tests", "packaging")
        + [ROOT / name for name in ("setup.py", "Makefile", "pyproject.toml", ".importlinter")]
        + sorted((ROOT / "viewer" / "model" / "_native").rglob("*.[ch]"))
        + sorted(
            p for p in ROOT.rglob("*.md") if not {".venv", ".git", "build", "dist"} & set(p.parts)
        )
    )
    files = [p for p in files if p.resolve() != Path(__file__).resolve()]
    assert len(files) > 300
    found = [hit for path in files for hit in issue_references(path)]
    assert not found, "say why, not which issue:\n" + "\n".join(found)


CROSS_REFERENCE = re.compile(r":(?:mod|func|class|meth|attr|data|exc):`~?([.\w]+)`")


def defined_names(path: Path) -> set[str]:
    """Names a module defines or imports at any depth (a reference may name a method)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def module_path(parts: list[str], root: Path) -> Path | None:
    """The file of module ``vramscope.<parts>``, or None."""
    if parts[:2] == ["viewer", "assets"]:
        return root / "assets" / "__init__.py"
    folder = root.joinpath(*parts)
    for candidate in (folder / "__init__.py", folder.with_suffix(".py")):
        if candidate.exists():
            return candidate
    return None


def broken_cross_references(path: Path, root: Path = ROOT) -> list[str]:
    """Docstring references (``:mod:`..core.units```, ``:func:`vramscope.viewer...```)
    to modules or names that do not exist: what a move leaves behind."""
    rel = path.relative_to(root).with_suffix("").parts
    package = list(rel[:-1])
    found = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in CROSS_REFERENCE.finditer(line):
            target = match.group(1)
            if target.startswith("."):
                dots = len(target) - len(target.lstrip("."))
                base = package[: len(package) - (dots - 1)]
                parts = base + [p for p in target[dots:].split(".") if p]
            elif target.startswith("vramscope."):
                parts = target.split(".")[1:]
            else:
                continue  # a bare name: resolved by the reader, not checked here
            for k in range(len(parts), 0, -1):
                module = module_path(parts[:k], root)
                if module is not None:
                    rest = parts[k:]
                    if rest and rest[0] not in defined_names(module):
                        found.append(f"{path.relative_to(root)}:{i}: {match.group(0)}")
                    break
            else:
                found.append(f"{path.relative_to(root)}:{i}: {match.group(0)}")
    return found


def test_docstring_cross_references_resolve():
    files = source_files(*SOURCE_TOPS)
    found = [hit for path in files for hit in broken_cross_references(path)]
    assert not found, "\n".join(found)


def test_the_cross_reference_check_catches_one(tmp_path):
    (tmp_path / "viewer" / "model" / "core").mkdir(parents=True)
    for pkg in ("viewer", "viewer/model", "viewer/model/core"):
        (tmp_path / pkg / "__init__.py").write_text('"""x"""\n')
    units = tmp_path / "viewer" / "model" / "core" / "units.py"
    units.write_text("def parse_bytes():\n    pass\n")
    user = tmp_path / "viewer" / "model" / "user.py"
    user.write_text(
        '"""See :func:`.core.units.parse_bytes`, :mod:`.units` and '
        ':func:`vramscope.viewer.model.core.units.gone`."""\n'
    )
    assert broken_cross_references(user, tmp_path) == [
        "viewer/model/user.py:1: :mod:`.units`",
        "viewer/model/user.py:1: :func:`vramscope.viewer.model.core.units.gone`",
    ]


def test_the_issue_check_catches_one(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("x = 1  # (issue 15) kept for the panel\ny = 2  # the allocator's issue\n")
    assert issue_references(p, tmp_path) == ["x.py:1: x = 1  # (issue 15) kept for the panel"]
