"""``vramscope summary DIR``: what each rank's memory is, side by side - the split by
category ``vramscope summary FILE`` gives for each rank's file, the same bytes, at the
same instant, in text (one column per rank, wrapped past eight) and JSON."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA
from vramscope.viewer.model.categories import CATEGORY_LABELS, CATEGORY_NAMES
from vramscope.viewer.model.core.units import format_bytes
from vramscope.viewer.model.reports import ranks

DDP = DATA / "ddp_2ranks"  # torchrun on 2 x H200: rank 0 an OOM dump, rank 1 +1 GiB
ONE_RANK = sorted(p for p in (DATA / "ddp_1rank").iterdir() if p.is_dir())
DIRS = [DDP, *ONE_RANK]
SPLIT_KEYS = (
    "categories_device",
    "categories_event",
    "categories_at_peak",
    "categories_guessed_bytes_at_peak",
    "ddp_bucket_bytes_at_peak",
)


def vramscope(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "summary", *args, "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if "--json" in args else {"text": out.stdout}


def test_the_recordings_are_there():
    # ten DDP runs of one rank (GPT-2 and a ResNet, bucket views on and off, accumulation)
    assert len(ONE_RANK) == 10 and all(any(d.glob("*.pickle*")) for d in ONE_RANK)


@pytest.mark.parametrize("directory", DIRS, ids=lambda p: p.name)
def test_each_ranks_split_is_its_files_summary(directory: Path):
    got = vramscope(str(directory), "--json")
    assert got["ranks"]
    for r in got["ranks"]:
        own = vramscope(r["file"], "--json")
        assert set(SPLIT_KEYS) <= set(r)
        # The same keys and bytes per category as summary FILE, at its instant.
        assert r["categories_at_peak"] == own["categories_at_peak"], r["rank"]
        assert list(r["categories_at_peak"]) == list(CATEGORY_NAMES)
        assert r["categories_device"] == own["categories_device"] == own["peak_device"]
        assert r["categories_event"] == own["peak_requested_event"]
        assert r["categories_guessed_bytes_at_peak"] == own["categories_guessed_bytes_at_peak"]
        assert sum(r["categories_at_peak"].values()) == own["peak_requested_bytes"]
        # DDP's gradient buckets: gradients, named; never more than the gradients.
        assert 0 < r["ddp_bucket_bytes_at_peak"] <= r["categories_at_peak"]["gradient"]


def test_the_text_puts_the_ranks_side_by_side():
    got = vramscope(str(DDP), "--json")
    text = vramscope(str(DDP))["text"].splitlines()
    at = text.index(ranks.SPLIT_HEAD)
    head = text[at + 1].split()
    assert head == ["rank", "0", "rank", "1"]
    labels = dict(zip(CATEGORY_NAMES, CATEGORY_LABELS))
    rows = {}
    for line in text[at + 2 :]:
        label = next((lb for lb in (*labels.values(), "total") if line.startswith(lb + " ")), None)
        if label is not None:
            rows[label] = line[len(label) :].split()
    split = [r["categories_at_peak"] for r in got["ranks"]]
    for name, label in labels.items():
        values = [s[name] for s in split]
        if any(values):  # every category some rank holds, in summary FILE's words
            cells = " ".join(format_bytes(v) for v in values).split()
            assert rows.pop(label) == cells, label
        else:
            assert label not in rows
    assert rows.pop("total") == " ".join(format_bytes(sum(s.values())) for s in split).split()
    assert not rows
    bucket = next(line for line in text[at:] if line.startswith("  in DDP buckets"))
    assert (
        bucket.split()[3:]
        == " ".join(format_bytes(r["ddp_bucket_bytes_at_peak"]) for r in got["ranks"]).split()
    )


def test_more_than_eight_ranks_wrap_into_blocks():
    ov = ranks.load_ranks(DDP, jobs=1)
    a, b = ov.ranks
    many = [dataclasses.replace(a if i % 2 else b, rank=i) for i in range(11)]
    # A rank whose file could not be loaded has no split: "?" in its column.
    many[9] = dataclasses.replace(many[9], categories_at_peak=None, error="damaged")
    lines = ranks.split_lines(dataclasses.replace(ov, ranks=many))
    heads = [line for line in lines if line.lstrip().startswith("rank ")]
    assert [h.split()[1::2] for h in heads] == [
        [str(i) for i in range(8)],
        ["8", "9", "10"],
    ]
    second = lines[lines.index(heads[1]) :]
    total = next(line for line in second if line.startswith("total"))
    assert total.split()[1:] == [
        *format_bytes(sum((many[8].categories_at_peak or {}).values())).split(),
        "?",
        *format_bytes(sum((many[10].categories_at_peak or {}).values())).split(),
    ]
    assert max(len(line) for line in lines) < 120  # eight columns stay on a wide terminal


def test_each_file_is_read_and_split_once(monkeypatch):
    from vramscope.viewer.model.categories import MemoryBreakdown

    loads: list[str] = []
    builds: list[int] = []
    real_load, real_build = ranks.load_snapshot, MemoryBreakdown.build
    monkeypatch.setattr(ranks, "load_snapshot", lambda p, **k: loads.append(p) or real_load(p, **k))
    monkeypatch.setattr(
        MemoryBreakdown,
        "build",
        classmethod(lambda cls, *a, **k: builds.append(1) or real_build(*a, **k)),
    )
    ov = ranks.load_ranks(DDP, jobs=1, use_cache=False)
    assert sorted(loads) == sorted(e.file.path for e in ov.ranks)
    assert len(builds) == len(ov.ranks) == 2
    assert all(e.categories_at_peak for e in ov.ranks)


def test_jobs_give_the_same_split():
    one = vramscope(str(DDP), "--json", "--jobs", "1")
    two = vramscope(str(DDP), "--json", "--jobs", "2")
    assert [r["categories_at_peak"] for r in one["ranks"]] == [
        r["categories_at_peak"] for r in two["ranks"]
    ]
    assert all(r["categories_at_peak"] for r in one["ranks"])


def test_mcp_and_the_python_api_give_the_same_split():
    import vramscope
    from tests.cli.test_mcp import answer, with_server

    cli = vramscope_cli_split(DDP)

    async def session(client):
        return await client.call_tool("summary", {"file": str(DDP)})

    mcp = json.loads(answer(with_server(session)))
    assert [{k: r[k] for k in SPLIT_KEYS} for r in mcp["ranks"]] == cli
    api = vramscope.open(str(DDP)).summary()
    assert [{k: r[k] for k in SPLIT_KEYS} for r in api.to_dict()["ranks"]] == cli
    assert ranks.SPLIT_HEAD in str(api)


def vramscope_cli_split(directory: Path) -> list[dict]:
    got = vramscope(str(directory), "--json")
    split = [{k: r[k] for k in SPLIT_KEYS} for r in got["ranks"]]
    assert all(s["categories_at_peak"] for s in split)
    return split
