"""The real snapshots of other people in ``../shared`` (beside the checkout, never copied
into the repository): ``snapshots/`` (ours, with memory_stats sidecars) and
``external/`` (from the world, SOURCES.md).

A developer's machine may not have them: the tests that need them skip there.  CI
(``CI=true``) always has them, so there a missing folder or file fails the test: a
green CI never hides the data it did not read.  Every test that reads them reaches them
through this module and carries the ``shared`` mark (:func:`param` marks one parameter),
so tests/test_shared_data_gate.py can run them all against an empty folder
(``VRAMSCOPE_SHARED_DIR``) and see each one fail under CI.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# VRAMSCOPE_SHARED_DIR points the tests at another folder (the gate's test: an empty one).
SHARED = Path(
    os.environ.get("VRAMSCOPE_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared"
)
EXTERNAL = SHARED / "external"
MARK = pytest.mark.shared
SUFFIXES = (".pickle", ".pickle.xz", ".pkl.xz", ".json.xz")


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(what: str) -> None:
    """Skip the running test for ``what`` missing, or fail it under CI."""
    if under_ci():
        pytest.fail(f"{what} is missing, and CI=true requires it", pytrace=False)
    pytest.skip(f"{what} not present")


def snapshot_files() -> list[Path]:
    """Every snapshot file in ``../shared/snapshots`` and ``../shared/external``, sorted
    (the sidecars and SOURCES.md left out)."""
    out: list[Path] = []
    for folder in ("snapshots", "external"):
        d = SHARED / folder
        if d.is_dir():
            out += sorted(p for p in d.iterdir() if p.name.endswith(SUFFIXES))
    return out


def params() -> list:
    """``snapshot_files()`` as pytest parameters; one parameter that fails under CI (and
    skips elsewhere) when there are none.  Each carries the ``shared`` mark."""
    files = snapshot_files()
    if files:
        return [param(p, id=p.name.split(".")[0][:48]) for p in files]
    return [param(None, id="shared-snapshots-missing")]


def external_files(pattern: str = "*.xz") -> list[Path]:
    """The files of ``../shared/external`` matching ``pattern``, sorted (none without it)."""
    return sorted(EXTERNAL.glob(pattern)) if EXTERNAL.is_dir() else []


def external_params(pattern: str = "*.xz", id_of: Callable[[Path], str] = lambda p: p.name) -> list:
    """:func:`external_files` as marked pytest parameters (ids: ``id_of`` each file); one
    parameter that fails under CI (and skips elsewhere) when there are none."""
    files = external_files(pattern)
    if files:
        return [param(p, id=id_of(p)) for p in files]
    return [param(None, id="shared-external-missing")]


def needs(*paths: Path):
    """Mark a test as reading ``paths`` (in ``../shared``): tests/conftest.py requires each
    (:func:`require`) before the test runs."""
    return pytest.mark.shared(*paths)


def param(path: Path | None, id: str | None = None):
    """``path`` (in ``../shared``) as a pytest parameter with the ``shared`` mark, for a
    list that mixes it with the repository's own files."""
    return pytest.param(path, id=id, marks=MARK)


def require(path: Path | None) -> Path:
    """``path`` when it exists; else skip, or fail under CI."""
    if path is None or not path.exists():
        missing(str(path) if path is not None else f"{SHARED}/snapshots and external")
    assert path is not None
    return path
