"""shiboken6's embedded Python, compiled once and kept like a ``.pyc``: the same code
objects as the builtin compile gives, read back on the next start, and never trusted
when the file is wrong."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from vramscope.viewer._qt.widgets import embedded_code
from vramscope.viewer._qt.widgets.embedded_code import CodeCache

SOURCE = "def f(x: int) -> int:\n    return x + 1\nANSWER = f(41)\n"
NAME = "shibokensupport/example.py"


def run(code) -> dict:
    scope: dict = {}
    exec(code, scope)
    return scope


def test_a_source_is_compiled_once_then_read_back(tmp_path):
    path = str(tmp_path / "cache.marshal")
    first = CodeCache(path)
    code = first.compile(SOURCE, NAME, "exec")
    assert first.compiled == 1
    assert first.save()
    again = CodeCache(path)
    cached = again.compile(SOURCE, NAME, "exec")
    assert again.compiled == 0
    assert marshal.dumps(cached) == marshal.dumps(code)
    assert run(cached)["ANSWER"] == 42
    assert not again.save()  # nothing new: the file is left as it is


def test_the_code_is_the_one_the_builtin_gives_with_the_callers_future_flags(tmp_path):
    # This module has ``from __future__ import annotations``: the builtin inherits it from
    # its caller, and so must the cache (not from its own module).
    cache = CodeCache(str(tmp_path / "c"))
    for inherit in (False, True):
        mine = cache.compile(SOURCE, NAME, "exec", dont_inherit=inherit)
        builtin = compile(SOURCE, NAME, "exec", dont_inherit=inherit)
        assert marshal.dumps(mine) == marshal.dumps(builtin)
        annotation = run(mine)["f"].__annotations__["x"]
        assert annotation == (int if inherit else "int")
    assert cache.compiled == 2  # the flags are part of the key


def test_other_sources_are_compiled_as_before_and_not_kept(tmp_path):
    cache = CodeCache(str(tmp_path / "c"))
    for args in (
        (SOURCE, "mine.py", "exec"),
        (SOURCE, NAME, "exec", 0, False, 2),  # another optimization level
        ("1 + 1", NAME, "eval"),
    ):
        code = cache.compile(*args)
        assert marshal.dumps(code) == marshal.dumps(compile(*args))
    assert len(cache.used) == 1  # the eval: cacheable; the other two not
    assert cache.compiled == 1


def test_an_ast_is_given_back_and_not_kept(tmp_path):
    import ast

    cache = CodeCache(str(tmp_path / "c"))
    tree = cache.compile(SOURCE, NAME, "exec", ast.PyCF_ONLY_AST)
    assert isinstance(tree, ast.Module)
    assert cache.compiled == 0 and not cache.used
    assert not cache.save()


def test_a_damaged_or_foreign_file_is_compiled_over(tmp_path):
    path = tmp_path / "c"
    good = CodeCache(str(path))
    good.compile(SOURCE, NAME, "exec")
    good.save()
    data = path.read_bytes()
    for bad in (b"", data[:40], b"\0\0\0\0" + data[4:], data[:4] + b"not marshal"):
        path.write_bytes(bad)
        cache = CodeCache(str(path))
        assert run(cache.compile(SOURCE, NAME, "exec"))["ANSWER"] == 42
        assert cache.compiled == 1
        assert cache.save()
        reread = CodeCache(str(path))
        assert run(reread.compile(SOURCE, NAME, "exec"))["ANSWER"] == 42
        assert reread.compiled == 0


def test_an_unwritable_place_is_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = CodeCache(str(blocker / "sub" / "c"))  # a folder under a file: cannot exist
    assert run(cache.compile(SOURCE, NAME, "exec"))["ANSWER"] == 42
    assert not cache.save()


# A fresh interpreter importing shiboken6 with the cache at argv[1]: the module is loaded
# from its file (importing the package would import shiboken6 first).
IMPORT = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("embedded_code", sys.argv[2])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
with mod.cached_compiles(sys.argv[1]) as cache:
    import shiboken6
import builtins
from PySide6 import QtCore
try:  # the signature package (what was compiled) writes this error's second half
    QtCore.QRect.adjusted(QtCore.QRect(), "x", 1, 2, 3)
except TypeError as exc:
    signature = str(exc)
print(json.dumps({
    "compiled": cache.compiled,
    "used": sorted(k[0] for k in cache.used),
    "restored": builtins.compile is mod._builtin_compile,
    "signature": signature,
}))
"""


def import_shiboken(cache: Path, write: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT, str(cache), embedded_code.__file__],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_shiboken6_starts_from_the_cache_with_the_same_signatures(tmp_path):
    cache = tmp_path / "shiboken.marshal"
    first = import_shiboken(cache, write=True)
    second = import_shiboken(cache, write=True)
    assert "signature_bootstrap.py" in first["used"]
    assert len(first["used"]) >= 10  # the signature package's modules
    assert first["compiled"] == len(first["used"])
    assert second["compiled"] == 0
    assert second["used"] == first["used"]
    assert "adjusted(x1: int, y1: int, x2: int, y2: int" in first["signature"]
    assert second["signature"] == first["signature"]
    assert first["restored"] and second["restored"]


def test_nothing_is_written_where_bytecode_is_not(tmp_path):
    cache = tmp_path / "shiboken.marshal"
    got = import_shiboken(cache, write=False)
    assert got["compiled"] > 0
    assert not cache.exists()
