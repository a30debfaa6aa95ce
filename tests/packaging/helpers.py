"""Shared by the packaging tests: the repository root and packaging/build.py as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_module():
    spec = importlib.util.spec_from_file_location(
        "vramscope_packaging_build", ROOT / "packaging" / "build.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
