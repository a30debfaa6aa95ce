"""Shared fixtures: the real snapshots in tests/data and their allocator counters."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from tests import shared_data

# Tests (and the subprocesses they start) never touch the user's cache.
os.environ["VRAMSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="vramscope-test-cache-")

DATA = Path(__file__).parent / "data"
ASSETS = Path(__file__).resolve().parents[1] / "assets"


def snapshot_files() -> list[Path]:
    """Every real snapshot bundled with the tests (pickle or compressed pickle)."""
    files = sorted(DATA.glob("*.pickle")) + sorted(DATA.glob("*.pickle.xz"))
    return files + sorted(ASSETS.glob("*.pickle"))  # the bundled example, written by capture


def expected_for(path: Path) -> dict:
    """NAME.json beside NAME.pickle[.xz]: the workload and its memory_stats."""
    name = path.name.split(".pickle")[0]
    return json.loads((path.parent / f"{name}.json").read_text())


def snapshot_id(path: Path) -> str:
    return path.name.split(".pickle")[0]


@pytest.fixture(autouse=True)
def _shared_files_required(request):
    """The files a test's ``shared`` marks name (shared_data.needs) are there: else the test
    skips, or fails under CI, before it runs."""
    for mark in request.node.iter_markers("shared"):
        for path in mark.args:
            shared_data.require(path)


@pytest.fixture(scope="session")
def loaded_snapshots():
    """Load every bundled snapshot once per session (the 1M-event one takes seconds)."""
    from vramscope.viewer.model import load_snapshot

    cache: dict[str, object] = {}

    def get(path: Path):
        key = os.fspath(path)
        if key not in cache:
            cache[key] = load_snapshot(path)
        return cache[key]

    return get


@pytest.fixture
def isolated_qt_settings(tmp_path, monkeypatch):
    """A private settings file for a GUI test: real user settings are never touched."""
    from PySide6.QtCore import QSettings

    path = tmp_path / "settings" / "vramscope.ini"
    path.parent.mkdir()
    monkeypatch.setenv("VRAMSCOPE_SETTINGS_FILE", os.fspath(path))
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.fspath(path.parent))
    return path
