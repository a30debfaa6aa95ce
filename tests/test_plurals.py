"""Counts with their noun: "1 segment", "2 segments", never "1 segments".

Every count the program prints beside a noun goes through ``units.plural`` (or, where
the capture side and the module under ``units`` cannot import it, an explicit
singular).  Checked two ways: in the source, no f-string puts a number straight in
front of a plural noun; in the output, ``vramscope summary`` of every snapshot we have
says no "1 <noun>s"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import shared_data

ROOT = Path(__file__).resolve().parents[1]
NOUNS = (
    "segments|gaps|iterations|ranks|blocks|events|devices|OOMs|allocations|frames|lines"
    "|sites|streams|pools|leaks|files|rows|calls|requests|changes|categories|stacks"
    "|processes|workers|tasks|entries|annotations|phases|snapshots|intervals|settings"
    "|passes|items|columns|threads|agents|GPUs|records|tensors|steps|layers"
)
# `{n} segments`, `{len(x):,} small blocks`: a value put straight before a plural noun.
# Not: sizes in bytes (`{n:,} bytes`, exact figures beside format_bytes), nor the last of a
# list or range of counts ("2, 3 and 1 decode steps", "1 to 4 decode steps").
IN_SOURCE = re.compile(r"(?<! and )(?<! to )\{[^{}]*\}(?: [a-z-]+)? (?:" + NOUNS + r")\b")
IN_OUTPUT = re.compile(r"(?<![\d,.])\b1 (?:[a-z-]+ )?(?:" + NOUNS + r")\b")


def test_no_count_is_printed_before_a_plural_noun_by_hand():
    found = []
    for folder in ("viewer", "capture"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.lstrip().startswith("#"):
                    continue
                found.extend(
                    f"{path.relative_to(ROOT)}:{number}: {m.group(0)}"
                    for m in IN_SOURCE.finditer(line)
                )
    assert not found, "counts printed before a plural noun (use units.plural):\n" + "\n".join(found)


def snapshots() -> list[Path]:
    ours = sorted((ROOT / "tests" / "data").glob("*.pickle"))
    ours += sorted((ROOT / "tests" / "data").glob("*.pickle.xz"))
    return ours + [shared_data.param(p) for p in shared_data.external_files()]


@shared_data.MARK
@shared_data.MARK
def test_the_shared_snapshots_are_there():
    """The walk below is only as good as its files: ../shared/external missing fails
    under CI (tests/shared_data.py)."""
    if not shared_data.external_files():
        shared_data.missing(str(shared_data.EXTERNAL))


@pytest.mark.parametrize("path", snapshots(), ids=lambda p: p.name)
def test_summary_says_1_thing_not_1_things(path, capsys):
    from vramscope.viewer.cli import main

    assert main(["summary", str(path), "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert not IN_OUTPUT.findall(text), [ln for ln in text.splitlines() if IN_OUTPUT.search(ln)]


def test_the_checks_catch_what_they_look_for():
    assert IN_SOURCE.search('f"{len(x)} segments ({n} small)"')
    assert IN_SOURCE.search('f"in {node.count:,} blocks"')
    assert not IN_SOURCE.search("f\"{plural(n, 'segment')}\"")
    assert not IN_SOURCE.search('f"{node.bytes:,} bytes"')
    assert not IN_SOURCE.search('f"{a:,} to {b:,} decode steps"')
    assert IN_OUTPUT.search("note: 1 blocks allocated before the first event")
    assert not IN_OUTPUT.search("11 blocks, 2.1 segments, 1 block")
