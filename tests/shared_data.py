"""The real snapshots of other people in ``../shared`` (beside the checkout, never copied
into the repository): ``snapshots/`` (ours, with memory_stats sidecars) and
``external/`` (from the world, SOURCES.md).

A developer's machine may not have them: the tests that need them skip there.  CI
(``CI=true``) always has them, so there a missing folder or file fails the test: a
green CI never hides the data it did not read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
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
    skips elsewhere) when there are none."""
    files = snapshot_files()
    if files:
        return [pytest.param(p, id=p.name.split(".")[0][:48]) for p in files]
    return [pytest.param(None, id="shared-snapshots-missing")]


def require(path: Path | None) -> Path:
    """``path`` when it exists; else skip, or fail under CI."""
    if path is None or not path.exists():
        missing(str(path) if path is not None else f"{SHARED}/snapshots and external")
    assert path is not None
    return path
