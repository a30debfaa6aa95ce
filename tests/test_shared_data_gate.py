"""The ../shared gate: a missing snapshot skips on a developer's machine and fails under
CI (CI=true), so a green CI never hides data it did not read; every test that reads
../shared goes through it (tests/shared_data.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests import shared_data

ROOT = Path(__file__).resolve().parents[1]
GONE = Path("/nonexistent/shared/external/x.pickle.xz")


def test_a_missing_file_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true requires it"):
        shared_data.require(GONE)
    with pytest.raises(pytest.fail.Exception):
        shared_data.require(None)  # (no shared folder at all: the one parameter is None)


def test_a_missing_file_skips_elsewhere(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        shared_data.require(GONE)


def test_no_shared_folder_is_one_parameter_that_requires_it(monkeypatch, tmp_path):
    monkeypatch.setattr(shared_data, "SHARED", tmp_path / "none")
    params = shared_data.params()
    assert len(params) == 1 and params[0].values == (None,)


# The walks over shared_data.params() are only as wide as the folders: a folder that
# went missing would shrink them silently.  30 files today (10 ours, 20 from others).
EXPECTED_AT_LEAST = 30


def test_the_walks_cover_both_shared_folders():
    files = shared_data.snapshot_files()
    if not files:
        shared_data.missing(f"{shared_data.SHARED}/snapshots and external")
    assert {p.parent.name for p in files} == {"snapshots", "external"}, files
    assert len(files) >= EXPECTED_AT_LEAST, files


def test_the_folder_can_be_pointed_elsewhere(tmp_path):
    """VRAMSCOPE_SHARED_DIR replaces ../shared (read when tests/shared_data.py is imported,
    so in a fresh interpreter)."""
    code = "from tests import shared_data; print(shared_data.SHARED, shared_data.EXTERNAL)"
    env = {**os.environ, "VRAMSCOPE_SHARED_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(tmp_path), str(tmp_path / "external")]


# ---------------------------------------------------------------- every reader, gated
# Scripts run by hand (tables, benchmarks, recordings), not by pytest; the truth
# recordings' overflow folder (../shared/truth) is optional: tests/data/truth holds them.
NOT_TESTS = ("tests/workloads/", "tests/bench/", "tests/fuzz/", "tests/categories_truth.py")
OWN_PATH = re.compile(r"""/\s*["']shared["']|["']\.\./shared""")


def _python_files() -> list[Path]:
    return sorted(p for p in (ROOT / "tests").rglob("*.py") if "__pycache__" not in p.parts)


def _readers() -> list[Path]:
    """The test files that reach ../shared (through tests/shared_data.py)."""
    return [
        p
        for p in _python_files()
        if p.name.startswith("test_")
        and p.name != Path(__file__).name
        and "shared_data" in p.read_text(encoding="utf-8")
    ]


def test_no_test_builds_its_own_path_to_shared():
    """A path to ../shared built beside tests/shared_data.py would escape the gate (and
    VRAMSCOPE_SHARED_DIR): a skip of its own, never failing under CI."""
    found = [
        str(p.relative_to(ROOT))
        for p in _python_files()
        if p.name not in ("shared_data.py", Path(__file__).name)
        and not str(p.relative_to(ROOT)).startswith(NOT_TESTS)
        and OWN_PATH.search(p.read_text(encoding="utf-8"))
    ]
    assert not found, found


@pytest.mark.slow
def test_every_reader_fails_under_ci_without_the_data(tmp_path):
    """Every test marked ``shared`` (every test that reads ../shared), run for real under
    CI=true against an empty folder, fails or errors: none passes on nothing, none skips.
    Each file that reads ../shared has such tests."""
    readers = _readers()
    assert len(readers) >= 20, readers  # the walk found the readers
    empty = tmp_path / "shared"
    empty.mkdir()
    report = tmp_path / "report.xml"
    env = {**os.environ, "CI": "true", "VRAMSCOPE_SHARED_DIR": str(empty)}
    env["QT_QPA_PLATFORM"] = "offscreen"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        + ["-m", "shared", f"--junitxml={report}", "-o", "junit_family=xunit2"]
        + [str(p) for p in readers],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-4000:]
    outcome: dict[str, list[str]] = {str(p.relative_to(ROOT)): [] for p in readers}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        path = case.get("classname", "").replace(".", "/")
        path = next(f for f in outcome if f"{path}/".startswith(f"{f.removesuffix('.py')}/"))
        outcome[path].append(kinds[0] if kinds else "passed")
    assert all(outcome.values()), {f: o for f, o in outcome.items() if not o}
    not_failed = {f: o for f, o in outcome.items() if set(o) - {"failure", "error"}}
    assert not not_failed, not_failed
