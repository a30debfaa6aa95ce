"""What the aligned comparison (``vramscope diff``, Compare ▸ Over time) lists, on real
pairs: a site is "changed" only when its bytes differ, the categories side by side lead
with the ones that changed and leave out those empty on both sides, and the text never
prints the sites' header with nothing under it.

The pairs: one program under two allocator settings (``whatif_default`` /
``whatif_expandable``: the same bytes at every site, other reserved memory), a leak
removed and checkpointing turned on (``tests/data/truth``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramscope.viewer.model.categories import CATEGORY_NAMES
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports import aligned

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TRUTH = DATA / "truth"
WHATIF = (DATA / "whatif_default.pickle", DATA / "whatif_expandable.pickle")
LEAK = (TRUTH / "gpt2_leak.pickle.xz", TRUTH / "pair_gpt2_noleak.pickle.xz")
GROWN = (TRUTH / "gpt2_adamw_fp32.pickle.xz", TRUTH / "gpt2_leak.pickle.xz")
CKPT = (TRUTH / "gpt2_adamw_fp32.pickle.xz", TRUTH / "pair_gpt2_ckpt.pickle.xz")
PAIRS = {"whatif": WHATIF, "leak": LEAK, "grown": GROWN, "ckpt": CKPT}
HEADER = "live bytes at each side's peak by allocation site"

_cache: dict[str, aligned.Alignment] = {}


def _align(name: str) -> aligned.Alignment:
    if name not in _cache:
        a, b = (load_snapshot(p) for p in PAIRS[name])
        _cache[name] = aligned.align(a, b, build_timeline(a), build_timeline(b))
    return _cache[name]


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_a_site_is_changed_only_when_its_bytes_differ(name):
    al = _align(name)
    assert al.sites
    for s in al.sites:
        if s.a_bytes == s.b_bytes:
            assert s.status == "unchanged", s
        elif not s.a_count:
            assert s.status == "added", s
        elif not s.b_count:
            assert s.status == "gone", s
        else:
            assert s.status == "changed", s
        assert s.to_dict()["status"] == s.status
    differ = [s for s in al.sites if s.a_bytes != s.b_bytes]
    assert al.changed_sites() == differ
    counts = al.site_counts()
    assert sum(counts.values()) == len(al.sites)
    assert counts["unchanged"] == len(al.sites) - len(differ)
    assert al.to_dict()["site_counts"] == counts


def test_an_allocator_setting_changes_no_site():
    """The same program under another allocator setting asks for the same bytes at the
    same lines: every site is "unchanged", and the summary says none differs."""
    al = _align("whatif")
    assert al.detected_change == "allocator:expandable_segments:True"
    assert [s.status for s in al.sites] == ["unchanged"] * len(al.sites)
    assert al.changed_sites() == []
    assert al.site_summary() == (
        f"no site differs ({len(al.sites)} sites hold the same bytes on both sides)"
    )


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_the_sites_header_never_stands_alone(name):
    al = _align(name)
    lines = aligned.format_text(al)
    at = [i for i, line in enumerate(lines) if line.startswith(HEADER)]
    assert len(at) == 1, lines
    i = at[0]
    differ = [s for s in al.sites if s.a_bytes != s.b_bytes]
    if not differ:
        assert (
            lines[i] == f"{HEADER}: no site differs ({len(al.sites)} sites hold the same "
            "bytes on both sides)"
        )
        return
    assert lines[i] == f"{HEADER}, largest change first:"
    shown = differ[: aligned.TOP_SITES]
    rows = lines[i + 1 : i + 1 + len(shown)]
    for row, s in zip(rows, shown):
        assert row.split()[0] != "0" and s.frame in row and f" {s.status} " in row, row
    same = len(al.sites) - len(differ)
    if same:
        assert f"{same} site{'s' if same > 1 else ''} hold" in lines[i + 1 + len(shown)]


def test_categories_side_by_side_lead_with_the_change_and_leave_out_empty_ones():
    al = _align("leak")
    span = al.largest_change()
    a, b = span.a.categories, span.b.categories
    rows = aligned.category_rows(a, b)
    names = [r.name for r in rows]
    # every category with bytes on either side, once; none empty on both
    assert sorted(names) == sorted(n for n in CATEGORY_NAMES if a.get(n) or b.get(n))
    assert all(r.a or r.b for r in rows)
    assert len(rows) < len(CATEGORY_NAMES)  # (this pair has empty categories to leave out)
    # the changed ones first, largest change first; then the rest in the categories' order
    changed = [r for r in rows if r.delta]
    assert changed and rows[: len(changed)] == changed
    assert [abs(r.delta) for r in changed] == sorted((abs(r.delta) for r in changed), reverse=True)
    moved = max(CATEGORY_NAMES, key=lambda n: abs(b.get(n, 0) - a.get(n, 0)))
    assert rows[0].name == moved and rows[0].delta == b.get(moved, 0) - a.get(moved, 0)
    rest = [r.name for r in rows[len(changed) :]]
    assert rest == [n for n in CATEGORY_NAMES if n in rest]
    assert all(r.a == a.get(r.name, 0) and r.b == b.get(r.name, 0) for r in rows)


def test_categories_empty_on_both_sides_list_nothing():
    zeros = dict.fromkeys(CATEGORY_NAMES, 0)
    assert aligned.category_rows(zeros, {}) == []


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_allocations_without_a_stack_are_named_as_the_stack_diff_names_them(name):
    """The sites without a stack read "<no stack recorded>", as in the stack diff above
    them, never as a file called so at line 0."""
    al = _align(name)
    for s in al.sites:
        if (s.filename, s.line, s.function) == aligned.NO_STACK:
            assert s.frame == "<no stack recorded>", s
        assert ":0 " not in s.frame and not s.frame.endswith(":0"), s
