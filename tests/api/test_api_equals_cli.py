"""The Python API answers what the CLI answers: ``vramscope.open(p).advise().to_dict()``
equals ``vramscope advise p --json`` (and summary, whatif) on every snapshot of
``tests/data``, advise on every one of ``../shared`` too; ``str()`` equals the text.

Each file is loaded once for the API (one :class:`Recording` per test), while the
CLI's answers run beside it, one after the other in one child process (two cores busy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vramscope
from tests import shared_data

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SUFFIXES = (".pickle", ".pickle.xz", ".pkl.xz", ".json.xz")
CONF = "expandable_segments:True"


def data_files() -> list[Path]:
    """Every snapshot file under tests/data (sidecars and truth files left out)."""
    return sorted(p for p in DATA.rglob("*") if p.name.endswith(SUFFIXES))


def cli(*args: str) -> subprocess.Popen:
    """``vramscope ARGS`` started (stdout: its answer)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "vramscope.viewer", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def answer(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    return out


SEPARATOR = "\n=== next answer ===\n"
CHAIN = """
import subprocess, sys
for args in ARGS:
    out = subprocess.run([sys.executable, "-m", "vramscope.viewer", *args], check=True,
                         capture_output=True, text=True).stdout
    sys.stdout.write(out + SEP)
"""


def cli_chain(*commands: tuple[str, ...]) -> subprocess.Popen:
    """The commands run one after the other in one child (one core for the CLI, the
    other for the API meanwhile); :func:`answers` splits what they print."""
    code = CHAIN.replace("ARGS", repr([list(c) for c in commands])).replace("SEP", repr(SEPARATOR))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def answers(proc: subprocess.Popen) -> list[str]:
    return answer(proc).split(SEPARATOR)[:-1]


def test_there_are_files_of_every_kind():
    files = data_files()
    assert len(files) > 50
    assert any(p.parent == DATA for p in files) and any(p.parent != DATA for p in files)


@pytest.mark.parametrize("path", data_files(), ids=lambda p: str(p.relative_to(DATA)))
def test_summary_advise_whatif_json_equal_the_cli(path):
    p = str(path)
    proc = cli_chain(
        ("summary", p, "--json"), ("advise", p, "--json"), ("whatif", p, "--conf", CONF, "--json")
    )
    rec = vramscope.open(p)
    assert isinstance(rec, vramscope.Recording)
    got = [rec.summary().to_dict(), rec.advise().to_dict(), rec.whatif(CONF).to_dict()]
    for name, mine, theirs in zip(("summary", "advise", "whatif"), got, answers(proc)):
        assert mine == json.loads(theirs), name


TEXT_FILES = [p for p in data_files() if p.parent == DATA]


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: p.name)
def test_str_is_the_cli_text(path):
    p = str(path)
    proc = cli_chain(
        ("summary", p),
        ("advise", p, "--batch", "8"),
        ("whatif", p, "--conf", "recorded", "--conf", CONF, "--batch-scale", "0.5", "--json"),
    )
    rec = vramscope.open(p)
    summary, advice, scaled_json = answers(proc)
    assert str(rec.summary()) + "\n" == summary
    assert str(rec.advise(batch=8)) + "\n" == advice
    # --batch-scale's rows (JSON) through the same pipeline.
    scaled = rec.whatif(["recorded", CONF], batch_scale=0.5)
    assert scaled.to_dict() == json.loads(scaled_json)
    assert [r.batch_scale for r in scaled.rows] == [0.5, 0.5]


def test_at_categories_and_diff_equal_the_cli():
    a, b = str(DATA / "whatif_default.pickle"), str(DATA / "whatif_expandable.pickle")
    procs = {
        "at": cli("summary", a, "--at", "100", "--json"),
        "at_text": cli("summary", a, "--at", "100"),
        "diff": cli("diff", a, b, "--json"),
        "diff_text": cli("diff", a, b),
        "whatif_text": cli("whatif", a, "--conf", CONF, "--recommend"),
    }
    rec = vramscope.open(a)
    at = rec.at(100)
    assert at.to_dict() == json.loads(answer(procs["at"]))
    assert str(at) + "\n" == answer(procs["at_text"])
    assert at.at == 100
    cats = rec.categories(at=100)
    assert cats.to_dict() == {k: at.to_dict()[k] for k in cats.KEYS if k in at.to_dict()}
    assert cats.split == at.to_dict()["categories_at"]
    d = rec.diff(b)
    assert d.to_dict() == json.loads(answer(procs["diff"]))
    assert str(d) + "\n" == answer(procs["diff_text"])
    assert str(rec.whatif(CONF, recommend=True)) + "\n" == answer(procs["whatif_text"])


def test_a_rank_directory_as_the_cli():
    d = str(DATA / "ddp_2ranks")
    proc = cli("summary", d, "--json")
    ranks = vramscope.open(d)
    assert isinstance(ranks, vramscope.Ranks)
    assert ranks.summary().to_dict() == json.loads(answer(proc))
    assert ranks.ranks == [0, 1]
    assert isinstance(ranks.rank(1), vramscope.Recording)


@pytest.mark.parametrize("path", shared_data.params())
def test_advise_equals_the_cli_on_shared_snapshots(path):
    path = shared_data.require(path)
    proc = cli("advise", str(path), "--json")
    rec = vramscope.open(str(path))
    try:
        got = rec.advise().to_dict()
    except vramscope.SnapshotError as exc:
        # A file advise cannot answer (no allocation history): the CLI's one line.
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 2 and out == ""
        assert err.strip() == f"vramscope: error: {exc}"
        return
    assert got == json.loads(answer(proc))


def test_bad_input_is_one_line_like_the_cli(tmp_path):
    bad = tmp_path / "not_a_snapshot.pickle"
    bad.write_bytes(b"this is not a pickle")
    proc = cli("summary", str(bad))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    with pytest.raises(vramscope.SnapshotError) as exc:
        vramscope.open(str(bad))
    assert err.strip() == f"vramscope: error: {exc.value}"
    rec = vramscope.open(str(DATA / "capacity_oom.pickle"))
    with pytest.raises(ValueError, match="no device 7"):
        rec.advise(device=7)
    with pytest.raises(ValueError, match="positive"):
        rec.advise(memory_limit="-1GB")
    with pytest.raises(ValueError):
        rec.whatif("max_split_size_mb:banana")
