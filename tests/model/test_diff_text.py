"""The diff's text: rows that share their allocating line are told apart, the columns are
named A and B (the paths printed once above), and no row names the allocator's own frame."""

from __future__ import annotations

import pytest

from tests import shared_data
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.reports.diff import diff_snapshots, format_text

pytestmark = shared_data.MARK
EXTERNAL = shared_data.EXTERNAL
A = EXTERNAL / "kkaitlyn111_cs336-a2-systems-memory_files_memory_ctx128_fullstep_.pickle.xz"
B = EXTERNAL / "kkaitlyn111_cs336-a2-systems-memory_files_memory_ctx256_forward_mixed.pickle.xz"


@pytest.fixture(scope="module")
def diff():
    shared_data.require(A)
    shared_data.require(B)
    return diff_snapshots(
        load_snapshot(str(A), use_cache=False), load_snapshot(str(B), use_cache=False)
    )


def stack_rows(text: str) -> list[str]:
    part = text.split("top stacks by growth:")[1]
    return [line for line in part.splitlines() if line.startswith("  ")]


def test_rows_with_the_same_line_are_told_apart(diff):
    top = 10
    shown = diff.growing()[:top] + diff.shrinking()[:top]
    labels = [s.label for s in shown]
    assert len(set(labels)) < len(labels)  # this pair has rows allocated at one line
    rows = stack_rows(format_text(diff, top=top))
    assert len(rows) == len(shown)
    # The text of a row without its figures: what a reader tells rows apart by.
    names = [r.split(None, 2)[2].rsplit("  (", 1)[0] for r in rows]
    assert len(set(names)) == len(names)
    assert not any(" in 1 blocks" in r for r in rows)
    assert any(" in 1 block " in r or r.endswith(" in 1 block)") for r in rows)


def test_the_columns_are_a_and_b_with_the_paths_above(diff):
    text = format_text(diff)
    lines = text.splitlines()
    assert lines[0] == f"A: {diff.a.path}" and lines[1] == f"B: {diff.b.path}"
    assert sum(str(A.name) in line for line in lines) == 1
    header = next(line for line in lines if line.rstrip().endswith("B - A"))
    assert header.split() == ["A", "B", "B", "-", "A"]
    table = lines[lines.index(header) : lines.index(header) + 8]
    assert max(len(line) for line in table) < 80


def test_no_row_is_the_allocator_s_frame(diff):
    rows = stack_rows(format_text(diff, top=50))
    assert rows
    for r in rows:
        function = r.split(None, 2)[2].split("(", 1)[0]  # the label without its arguments
        assert "CUDACachingAllocator" not in function and " c10::" not in function, r
