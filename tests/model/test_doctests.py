"""The examples in the model's docstrings run: every module of viewer/model that holds a
``>>>`` example is run through doctest, so an example that no longer matches the code fails
here instead of misleading its reader."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "viewer" / "model"


def _modules_with_examples() -> list[str]:
    out = []
    for path in sorted(MODEL.rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(MODEL).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append(".".join(("vramscope.viewer.model", *parts)))
    return out


MODULES = _modules_with_examples()


def test_the_units_examples_are_found():
    # The walk above must see the module whose examples this file was written for.
    assert "vramscope.viewer.model.core.units" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), verbose=False, report=False)
    assert result.attempted > 0, f"{name}: no example ran"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples fail"
