"""Lazy names of a package (PEP 562): a name is imported from its module when first read.

A package facade lists ``name -> module`` (relative to the package); :func:`exports`
gives it the module-level ``__getattr__`` and ``__dir__``, so importing the package imports
none of those modules (the window's start, a cached ``summary``) and each name, once read,
is a plain attribute.  Stdlib only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def exports(package: str, names: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package`` whose ``names`` map each lazy name to
    its module, relative to the package (``"core.units"``)."""

    def __getattr__(name: str):
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        vars(sys.modules[package])[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
