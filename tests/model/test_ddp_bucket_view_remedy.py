"""advise's ``gradient_as_bucket_view`` remedy on the DDP recordings (tests/data/ddp_1rank,
one rank each, with the program's truth: its DDP settings and ``memory_stats``).

Offered only where the parameters' gradients are tensors of their own beside DDP's
buckets (the programs run with ``gradient_as_bucket_view=False``), never where they are
the buckets; its peak is simulated, held to the same program run with the bucket view
on (within 5 % of that run's peak reserved), and not offered where the simulated saving
is nothing; the CLI's text and JSON, MCP and the HTML report say it in the same words.
"""

from __future__ import annotations

import functools
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import browser
from vramscope.viewer.model.core.progress import Progress
from vramscope.viewer.model.core.units import format_bytes as fb
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies.advise import advise, format_peak
from vramscope.viewer.model.remedies.catalogue import context, ddp
from vramscope.viewer.model.whatif import prepare

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ddp_1rank"
RUNS = sorted(p.name for p in DATA.iterdir() if p.is_dir()) if DATA.is_dir() else []
TOLERANCE = 0.05
ID = ddp.GRADIENT_AS_BUCKET_VIEW.id


def _snapshot(run: str) -> Path:
    return next((DATA / run).glob("*.pickle.xz"))


@functools.lru_cache(maxsize=None)
def truth(run: str) -> dict:
    return json.loads(next((DATA / run).glob("*.truth.json")).read_text())


def _view(run: str) -> bool:
    return bool(truth(run)["ddp"]["gradient_as_bucket_view"])


def _program(run: str) -> tuple:
    """What makes two runs the same program but for the bucket view."""
    t = truth(run)
    d = t["ddp"]
    return (
        t["model"],
        t["batch_size"],
        t["seq_len"],
        t["image_size"],
        d["bucket_cap_mb"],
        d["accumulation"],
    )


VIEW_OFF = [r for r in RUNS if not _view(r)]
VIEW_ON = [r for r in RUNS if _view(r)]
# Each program recorded with the bucket view off beside the same program with it on.
PAIRS = [(off, on) for off in VIEW_OFF for on in VIEW_ON if _program(off) == _program(on)]
# A real two-rank DDP run (tests/workloads/ddp_train.py: DDP's defaults, the view off).
TWO_RANKS = sorted((ROOT / "tests" / "data" / "ddp_2ranks").glob("*_exit_*.pickle"))


@functools.lru_cache(maxsize=None)
def _case(run: str):
    return prepare(load_snapshot(_snapshot(run), use_cache=False))


@functools.lru_cache(maxsize=None)
def _advice(run: str):
    return advise(_case(run))


def _offered(run: str):
    return next((r for r in _advice(run).remedies if r.remedy == ID), None)


@functools.lru_cache(maxsize=None)
def _ctx(run: str) -> context.Context:
    return context.gather(_case(run), None, None, Progress())


def _real_peak_reserved(run: str) -> int:
    return int(truth(run)["memory_stats_at_snapshot"]["reserved_bytes.all.peak"])


def test_every_recording_is_judged():
    # gpt2 and resnet50, accumulation 1 and 4, each with the bucket view off and on.
    assert len(VIEW_OFF) >= 4 and len(VIEW_ON) >= 4 and len(PAIRS) >= 4, (VIEW_OFF, VIEW_ON)
    assert len(TWO_RANKS) == 2


@pytest.mark.parametrize("run", VIEW_OFF)
def test_the_separate_gradients_are_found_where_the_view_is_off(run):
    """The gradients beside the buckets are the program's own ``.grad`` storages: each
    step's bytes those the program counted outside the buckets."""
    sep = ddp.separate_gradients(_ctx(run))
    assert sep is not None
    per_step = int(_case(run).requests.size[sep.grads].sum()) // sep.steps
    want = int(truth(run)["gradients"]["outside_buckets_bytes"])
    assert want > 0 and per_step == want, (fb(per_step), fb(want))
    assert sep.steps == int(truth(run)["iterations"])


@pytest.mark.parametrize("run", VIEW_ON)
def test_not_offered_where_the_gradients_are_the_buckets(run):
    assert truth(run)["gradients"]["outside_buckets_bytes"] == 0
    assert ddp.separate_gradients(_ctx(run)) is None
    assert _offered(run) is None


@pytest.mark.parametrize("off,on", PAIRS, ids=[off for off, _ in PAIRS])
def test_predicted_peak_within_5_percent_of_the_run_with_the_view(off, on):
    """Where the real run with the bucket view reserved less, the remedy is offered and
    its simulated peak is within 5 % of that run's ``reserved_bytes.all.peak``."""
    real_on = _real_peak_reserved(on)
    assert real_on < _real_peak_reserved(off)
    r = _offered(off)
    assert r is not None, [x.remedy for x in _advice(off).remedies]
    assert r.method == "simulated" and r.predicted_peak_reserved_range is None
    got = r.predicted_peak_reserved_bytes
    assert abs(got - real_on) <= TOLERANCE * real_on, (fb(got), fb(real_on))


@pytest.mark.parametrize("run", VIEW_OFF)
def test_offered_exactly_where_the_simulated_saving_is_more_than_nothing(run):
    """The catalogue's rule: a remedy that saves nothing is no remedy.  The simulated run
    of the change (the separate gradients freed where the Reducer copies them) decides."""
    ctx = _ctx(run)
    sep = ddp.separate_gradients(ctx)
    assert sep is not None
    ran = {name: call() for name, call in ddp._simulations(ctx, sep).items()}
    saving = ctx.peak - ran["run"].demand
    r = _offered(run)
    assert (r is not None) == (saving > 0), (run, fb(saving))
    if r is not None:
        assert r.saving_bytes == saving


def test_some_recording_shows_the_change_saving_nothing():
    """Not every recording with the view off gains (the larger GPT-2 batch's simulated peak
    stays where it is): the rule above is met both ways here."""
    assert any(_offered(run) is None for run in VIEW_OFF)


@pytest.mark.parametrize("path", TWO_RANKS, ids=[p.name.split("_cuda")[0] for p in TWO_RANKS])
def test_the_separate_gradients_are_found_on_each_rank_of_a_two_rank_run(path):
    ctx = context.gather(prepare(load_snapshot(path, use_cache=False)), None, None, Progress())
    sep = ddp.separate_gradients(ctx)
    assert sep is not None and sep.steps >= 1


def test_the_remedy_names_the_line_that_built_ddp():
    run = PAIRS[0][0]
    line = truth(run)["code_lines"]["ddp"]
    r = _offered(run)
    assert r is not None and r.where is not None
    assert r.where.endswith(f"{Path(line['file']).name}:{line['line']}"), r.where


def _vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_text_json_mcp_and_report_say_the_same_words(tmp_path):
    from vramscope.viewer.commands import mcp_tools

    run = next(off for off, _ in PAIRS if _offered(off) is not None)
    path = str(_snapshot(run))
    r = _offered(run)
    spec = ddp.GRADIENT_AS_BUCKET_VIEW
    assert r is not None and (r.title, r.change) == (spec.title, spec.change)

    text = _vramscope("advise", path)
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if spec.title in line)
    cells = re.split(r"\s{2,}", row.strip())
    assert cells[1:] == [spec.title, format_peak(r), fb(r.saving_bytes), r.fits_word, r.method]
    k = cells[0]
    assert f"  {k}. {spec.change}  [{r.where}]" in text.stdout.splitlines()

    out = _vramscope("advise", path, "--json")
    assert out.returncode == 0, out.stderr
    got = next(x for x in json.loads(out.stdout)["remedies"] if x["remedy"] == ID)
    assert got == r.to_dict()
    assert json.loads(mcp_tools.advise(path)[0]) == json.loads(out.stdout)

    page = tmp_path / "report.html"
    rep = _vramscope("report", path, "-o", str(page))
    assert rep.returncode == 0, rep.stderr
    dom = browser._run(["--virtual-time-budget=5000", "--dump-dom", page.as_uri()], tmp_path)
    rows = re.findall(r'<tr><td class="change">(.*?)</tr>', dom.stdout, re.S)
    mine = [html.unescape(re.sub(r"<[^>]+>", "|", x)) for x in rows if spec.title in x]
    assert len(mine) == 1, rows
    words = [w for w in mine[0].split("|") if w]
    assert words == [
        spec.title,
        spec.change,
        format_peak(r),
        fb(r.saving_bytes),
        r.method,
        r.fits_word,
        r.where,
    ], words
