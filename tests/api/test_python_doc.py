"""viewer/PYTHON.md's examples run (doctest, from the repository root): the page says
what the API answers, and a change to an answer changes the page."""

from __future__ import annotations

import doctest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "viewer" / "PYTHON.md"


def test_the_python_page_examples_run(monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples open tests/data/... as a user in a clone would
    result = doctest.testfile(
        str(PAGE),
        module_relative=False,
        verbose=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted >= 20
    assert result.failed == 0


def test_a_wrong_example_fails(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    page = tmp_path / "PYTHON.md"
    page.write_text(
        PAGE.read_text(encoding="utf-8").replace("11209277440", "11209277441"), encoding="utf-8"
    )
    result = doctest.testfile(
        str(page), module_relative=False, verbose=False, report=False, optionflags=doctest.ELLIPSIS
    )
    assert result.failed == 1
