"""The device every command answers for when none is given (the last OOM's, else the
highest reserved peak's), said in text and JSON; per-device figures, never a sum beside
one GPU's OOM; the argument checks and plurals of the CLI text; the batch rows' text."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests import shared_data
from tests.conftest import DATA
from vramscope.viewer.model.analysis import focus
from vramscope.viewer.model.analysis.figures import Selection, memory_stats
from vramscope.viewer.model.analysis.oom import oom_reports
from vramscope.viewer.model.core.units import format_bytes as fb
from vramscope.viewer.model.io.load import load_snapshot

EXTERNAL = shared_data.EXTERNAL
THREE_GPUS = EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"
GPT2 = DATA / "gpt2_oom.pickle"


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args, "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def three():
    snap = load_snapshot(str(shared_data.require(THREE_GPUS)), use_cache=False)
    oom_device = oom_reports(snap)[-1].device
    return snap, oom_device


@shared_data.needs(THREE_GPUS)
@pytest.mark.parametrize(
    "command",
    [["advise"], ["whatif", "--recommend"], ["summary"], ["whatif", "--batch-scale", "0.5"]],
)
def test_every_command_answers_for_the_oom_device_and_says_so(three, command):
    snap, oom_device = three
    assert oom_device != min(focus.devices_of(snap))  # "the first device" would miss it
    out = vramscope(command[0], str(THREE_GPUS), *command[1:], "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    for row in got if isinstance(got, list) else [got]:
        assert row["device"] == oom_device and row["device_chosen_by"] == "last_oom"
    text = vramscope(command[0], str(THREE_GPUS), *command[1:])
    assert text.returncode == 0, text.stderr
    assert f"device {oom_device} (the last OOM's)" in text.stdout
    given = vramscope(command[0], str(THREE_GPUS), *command[1:], "--device", "0", "--json")
    got = json.loads(given.stdout)
    for row in got if isinstance(got, list) else [got]:
        assert row["device"] == 0 and row["device_chosen_by"] == "given"


@shared_data.needs(THREE_GPUS)
def test_advise_names_the_oom(three):
    _snap, oom_device = three
    out = vramscope("advise", str(THREE_GPUS))
    assert "out of memory" in out.stdout and f"device {oom_device}:" in out.stdout


@shared_data.needs(THREE_GPUS)
def test_summary_gives_each_device_its_own_figures(three):
    """No line sums the GPUs (the whole snapshot's reserved bytes or largest free block
    beside one GPU's OOM); each device has its block, the OOM's first."""
    snap, oom_device = three
    out = vramscope("summary", str(THREE_GPUS))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    whole = memory_stats(snap)
    assert not any(f"reserved {fb(whole.reserved_bytes)}" in line for line in lines)
    heads = [line for line in lines if re.fullmatch(r"device \d+:", line)]
    assert heads[0] == f"device {oom_device}:"
    assert sorted(heads) == [f"device {d}:" for d in focus.devices_of(snap)]
    for d in focus.devices_of(snap):
        own = memory_stats(snap, Selection(device=d))
        block = lines[lines.index(f"device {d}:") + 1 :][:4]
        assert block[0].startswith(f"  reserved {fb(own.reserved_bytes)}")
        assert f"largest free block {fb(own.largest_free_block_bytes)}" in block[2]
    got = json.loads(vramscope("summary", str(THREE_GPUS), "--json").stdout)
    assert got["reserved_bytes"] == whole.reserved_bytes  # the existing key is kept
    assert got["peak_device"] == got["device"] == oom_device
    sites = got["top_sites_at_peak"]
    assert sites["device"] == oom_device and sites["sites"]
    assert len(got["top_sites_at_oom"]) == len(got["ooms"])
    assert "1 iterations" not in out.stdout


def test_summary_refuses_a_negative_event_in_one_line():
    out = vramscope("summary", str(GPT2), "--at", "-5")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert "--at -5" in line and "from 0" in line
    assert vramscope("summary", str(GPT2), "--at", "0").returncode == 0


@pytest.mark.parametrize("command", ["whatif", "advise"])
def test_a_negative_memory_limit_reaches_the_size_parser(command):
    out = vramscope(command, str(GPT2), "--memory-limit", "-1GB")
    assert out.returncode == 2
    assert "must be positive" in out.stderr and "expected one argument" not in out.stderr


def test_batch_rows_of_a_transformer():
    """GPT-2 at half and twice the batch: no zero-width range, no cuDNN, every example
    once, and the row that runs out of memory says so instead of a percentage."""
    out = vramscope("whatif", str(GPT2), "--batch-scale", "0.5", "--batch-scale", "2")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for low, high in re.findall(r"estimate (\S+ \S+) to (\S+ \S+)", text):
        assert low != high
    assert "cuDNN-like" not in text
    examples = [line.strip() for line in text.splitlines() if line.strip().startswith("e.g.")]
    rows = text.split("how each allocation was judged")[1].split("\n  ")
    for row in rows:
        shown = [line.strip() for line in row.splitlines() if line.strip().startswith("e.g.")]
        assert len(shown) == len(set(shown))
    assert examples
    rows_json = json.loads(
        vramscope(
            "whatif", str(GPT2), "--batch-scale", "0.5", "--batch-scale", "2", "--json"
        ).stdout
    )
    table = [line for line in text.splitlines() if line.startswith("batch x")]
    assert len(table) == len(rows_json)
    for line, row in zip(table, rows_json):
        if row["oom"] is not None:
            assert "out of memory" in line and "%" not in line.split("out of memory")[0]
            assert not re.search(r"[+-]\d+\.\d%", line)
        else:
            assert re.search(r"[+-]\d+\.\d%", line)
    assert any(r["oom"] is not None for r in rows_json)


def test_summary_text_names_the_top_sites():
    """summary says where the memory was made: the sites at the peak and at the OOM, as
    in --json, each with its bytes and blocks (one block: "1 block")."""
    got = json.loads(vramscope("summary", str(GPT2), "--json").stdout)
    text = vramscope("summary", str(GPT2)).stdout
    assert "allocated at the peak" in text and "allocated at the OOM on device" in text
    for entry in [got["top_sites_at_peak"]] + got["top_sites_at_oom"]:
        for site in entry["sites"]:
            blocks = f"{site['count']} {'block' if site['count'] == 1 else 'blocks'}"
            assert f"{fb(site['bytes'])}  {blocks}  {site['frame']}" in text
    assert not re.search(r"\b1 (blocks|iterations|segments|gaps)\b", text)
