"""The ../shared gate: a missing snapshot skips on a developer's machine and fails under
CI (CI=true), so a green CI never hides data it did not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import shared_data

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
