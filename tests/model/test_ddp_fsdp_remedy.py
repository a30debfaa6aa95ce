"""advise's ``fsdp_full_shard`` remedy: a DDP recording's model state as FSDP2 full
sharding (``fully_shard``) would keep it on each of the same ranks, an estimate.

Offered on a DDP recording (its gradient buckets) whose capture sidecar says more than
one rank, never on one rank (sharding over one rank saves nothing).  Each rank keeps 1/W
of the parameters, of their gradients and of the optimizer state (the program's own
tensors, as the DDP recordings' truth counts them) and no bucket; what FSDP gathers in a
pass depends on how the model is wrapped, unknown to the recording: the range's ends.

No FSDP run of the same model as a DDP recording is in tests/data (the FSDP recordings
of tests/data/truth train other GPT-2 configurations and a decoder; the two-rank DDP run
an MLP), so no prediction is held to a real FSDP run here: its arithmetic and its
labelling are, on the real DDP recordings (tests/data/ddp_1rank with their truth, given
two or four ranks in their sidecar, and the real two-rank run tests/data/ddp_2ranks), and
the range's premise (what FSDP gathers lies between its two units) on the real FSDP2 runs.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import browser
from vramscope.viewer.model.categories import CATEGORY_NAMES, MemoryBreakdown
from vramscope.viewer.model.core.progress import Progress
from vramscope.viewer.model.core.units import format_bytes as fb
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.remedies import evidence
from vramscope.viewer.model.remedies.advise import advise, format_peak
from vramscope.viewer.model.remedies.catalogue import context, ddp
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.whatif import prepare
from vramscope.viewer.model.whatif import requests as rq

ROOT = Path(__file__).resolve().parents[2]
ONE_RANK = ROOT / "tests" / "data" / "ddp_1rank"
RUNS = sorted(p.name for p in ONE_RANK.iterdir() if p.is_dir()) if ONE_RANK.is_dir() else []
# A real two-rank DDP run (tests/workloads/ddp_train.py); rank 0 also dumped at an OOM it
# caught (an impossible request), which its exit file holds.
TWO_RANKS = sorted((ROOT / "tests" / "data" / "ddp_2ranks").glob("*_exit_*.pickle"))
ID = ddp.FSDP_FULL_SHARD.id


def _snapshot(run: str) -> Path:
    return next((ONE_RANK / run).glob("*.pickle.xz"))


@functools.lru_cache(maxsize=None)
def truth(run: str) -> dict:
    return json.loads(next((ONE_RANK / run).glob("*.truth.json")).read_text())


@functools.lru_cache(maxsize=None)
def _case(path: Path, world: int | None = None):
    """The recording, its sidecar's number of ranks replaced by ``world`` where given."""
    snap = load_snapshot(path, use_cache=False)
    if world is not None:
        snap = dataclasses.replace(snap, sidecar=dict(snap.sidecar or {}, world_size=world))
    return prepare(snap)


@functools.lru_cache(maxsize=None)
def _ctx(path: Path, world: int | None = None) -> context.Context:
    return context.gather(_case(path, world), None, None, Progress())


@functools.lru_cache(maxsize=None)
def _advice(path: Path, world: int | None = None):
    return advise(_case(path, world))


def _offered(path: Path, world: int | None = None):
    return next((r for r in _advice(path, world).remedies if r.remedy == ID), None)


def _up(a: int, b: int) -> int:
    """``a / b`` rounded up."""
    return -(-a // b)


def test_every_recording_is_judged():
    assert len(RUNS) >= 8 and len(TWO_RANKS) == 2, (RUNS, TWO_RANKS)
    assert len(FSDP2_RUNS) == 8, FSDP2_RUNS


@pytest.mark.parametrize("path", TWO_RANKS, ids=[p.name.split("_cuda")[0] for p in TWO_RANKS])
def test_offered_on_each_rank_of_a_two_rank_run_as_an_estimate_with_a_range(path):
    assert _case(path).snap.sidecar["world_size"] == 2
    r = _offered(path)
    assert r is not None, [x.remedy for x in _advice(path).remedies]
    assert r.method == "estimated" and r.is_estimate and r.to_dict()["predicted_peak_is_estimate"]
    rng = r.predicted_peak_reserved_range
    assert rng is not None and rng[0] < rng[1], rng
    assert rng[0] <= r.predicted_peak_reserved_bytes <= rng[1]
    # (Rank 0's words read its range as one figure: its peak is the 1 PiB it asked for.)
    assert r.saving_bytes > 0
    # (The line that built DDP when it was recorded: the workload has changed since.)
    assert r.where is not None and r.where.startswith("tests/workloads/ddp_train.py:"), r.where
    assert r.detail.startswith("estimated for FSDP2 full sharding over the same 2 ranks")


@pytest.mark.parametrize("run", RUNS)
def test_never_offered_on_one_rank(run):
    path = _snapshot(run)
    assert truth(run)["world_size"] == 1 and _case(path).snap.sidecar["world_size"] == 1
    assert ddp.sharded(_ctx(path)) is None
    assert _offered(path) is None


@pytest.mark.parametrize("run", RUNS)
def test_the_number_of_ranks_decides(run):
    """The same recording whose sidecar says two ranks is offered it: the rule above is
    the number of ranks, not the recording."""
    assert ddp.sharded(_ctx(_snapshot(run), 2)) is not None


@pytest.mark.parametrize("run", RUNS)
def test_the_sharded_tensors_are_the_programs_own(run):
    """The parameters, their gradients and the optimizer state sharding keeps 1/W of are
    the tensors the program counted (the parameters' gradients: outside the buckets where
    the bucket view is off, the buckets where it is on)."""
    t = truth(run)
    path = _snapshot(run)
    ctx = _ctx(path, 2)
    sh = ddp.sharded(ctx)
    assert sh is not None and sh.world == 2
    size = ctx.case.requests.size
    # The categories call the modules' buffers (BatchNorm's running statistics)
    # parameters: they are counted (and sharded) with them, a few hundred KiB in ResNet-50.
    params = t["parameters"]["bytes"] + t["buffers"]["bytes"]
    assert sh.model == params, (fb(sh.model), fb(params))
    assert sh.largest == max(b for _, b in t["parameters"]["blocks"])
    view = t["ddp"]["gradient_as_bucket_view"]
    want_grads = t["ddp_buckets"]["bytes"] if view else t["gradients"]["outside_buckets_bytes"]
    assert sh.grad_model == want_grads, (fb(sh.grad_model), fb(want_grads))
    kept = ctx.evd.free_at >= ctx.n
    assert int(size[sh.state & kept].sum()) == t["optimizer_state"]["bytes"]
    assert sh.buckets.any() != view  # the buckets go where they are not the gradients


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("run", ["gpt2_viewoff_acc1", "resnet_viewon_acc1"])
def test_the_shards_are_one_wth_of_each_tensor(run, world):
    """In the re-simulated stream every parameter and optimizer state tensor asks 1/W of
    its bytes (rounded up to the allocator's 512 B), the buckets that go the smallest
    block."""
    t = truth(run)
    path = _snapshot(run)
    ctx = _ctx(path, world)
    sh = ddp.sharded(ctx)
    assert sh is not None
    edited = ddp.sharded_case(ctx, sh).requests
    assert len(edited) == ctx.n and (edited.kind == ctx.case.requests.kind).all()
    kept = ctx.evd.free_at >= ctx.n
    for mask, keys in (
        (sh.params, ("parameters", "buffers")),
        (sh.state & kept, ("optimizer_state",)),
    ):
        blocks = [b for key in keys for _, b in t[key]["blocks"]]
        want = sum(_up(_up(b, world), 512) * 512 for b in blocks)
        assert int(edited.size[mask].sum()) == want, (keys, fb(int(edited.size[mask].sum())))
    assert (edited.size[sh.buckets] == 512).all()


@pytest.mark.parametrize("run", ["gpt2_viewoff_acc1", "resnet_viewoff_acc4", "gpt2_viewon_acc1"])
def test_the_range_follows_from_the_wrapping(run):
    """The low end: the shards re-simulated and one unit of the largest parameter tensor in
    each pass; the high end: the whole model's parameters and gradients gathered there.
    The ends hold the shards' run, differ by no more than the two units do, and the point
    lies between; the detail names the program's own bytes over the ranks."""
    t = truth(run)
    path = _snapshot(run)
    ctx = _ctx(path, 2)
    sh = ddp.sharded(ctx)
    assert sh is not None
    lo_x, point_x, hi_x = ddp.unit_bytes(sh)
    assert lo_x == sh.largest < point_x <= hi_x == sh.model + sh.grad_model
    r = _offered(path, 2)
    assert r is not None
    lo, hi = r.predicted_peak_reserved_range
    shards = ddp._sharded_simulations(ctx, sh)["run"]()
    passes = np.isin(ctx.evd.phase, [evidence.FORWARD, evidence.BACKWARD])
    in_passes = int(shards.reserved[passes].max())
    assert lo == max(shards.demand, in_passes + lo_x)
    assert hi == max(shards.demand, in_passes + hi_x)
    assert lo < r.predicted_peak_reserved_bytes <= hi
    assert 0 < hi - lo <= hi_x - lo_x
    # The curve drawn is the point's: the shards' run, the point's unit in every pass.
    assert r.curve is not None and len(r.curve) == len(shards.reserved)
    assert int(r.curve.max()) == max(int(shards.reserved.max()), in_passes + point_x)
    p = t["parameters"]["bytes"] + t["buffers"]["bytes"]
    o = t["optimizer_state"]["bytes"]
    assert f"parameters {fb(p // 2)}" in r.detail and f"optimizer state {fb(o // 2)}" in r.detail
    # The change says what each rank keeps for good, in the program's own bytes.
    g = (
        t["ddp_buckets"]["bytes"]
        if t["ddp"]["gradient_as_bucket_view"]
        else t["gradients"]["outside_buckets_bytes"]
    )
    assert r.change.endswith(
        f"each of the 2 ranks keeps 1/2 of the parameters ({fb(p // 2)}), of their gradients "
        f"({fb(g // 2)}) and of the optimizer state ({fb(o // 2)}), and no gradient bucket"
    ), r.change
    line = t["code_lines"]["ddp"]
    assert r.where is not None and r.where.endswith(f"{Path(line['file']).name}:{line['line']}")


def test_more_ranks_leave_each_less():
    path = _snapshot("gpt2_viewoff_acc1")
    two, four = _offered(path, 2), _offered(path, 4)
    assert two is not None and four is not None
    assert four.predicted_peak_reserved_bytes < two.predicted_peak_reserved_bytes
    assert four.predicted_peak_reserved_range[0] < two.predicted_peak_reserved_range[0]
    assert two.predicted_peak_reserved_bytes < _ctx(path, 2).peak


def test_at_an_oom_the_split_answers_with_a_range():
    """Rank 0's exit file ends at the OOM it caught: estimated from the split there, still
    a range (a pass after the cut may gather the whole model)."""
    path = next(p for p in TWO_RANKS if "_rank0_" in p.name)
    ctx = _ctx(path)
    assert ctx.cut
    sh = ddp.sharded(ctx)
    assert sh is not None
    r = _offered(path)
    assert r is not None and "estimated from the split at the OOM" in r.detail
    lo, hi = r.predicted_peak_reserved_range
    assert lo < hi
    # The high end: rank 0's model state live at the OOM halved, its buckets gone, and
    # the whole model's parameters and gradients gathered.
    live = (np.arange(ctx.n) <= ctx.at) & (ctx.evd.free_at > ctx.at)
    size = ctx.case.requests.size
    alloc = ctx.case.requests.kind == rq.ALLOC
    state = int(size[live & alloc & (sh.params | sh.grads | sh.state)].sum())
    buckets = int(size[live & sh.buckets].sum())
    assert ctx.peak - hi == state - state // 2 + buckets - ddp.unit_bytes(sh)[2]


FSDP2_RUNS = sorted(
    p.name[: -len(".truth.json")]
    for p in (ROOT / "tests" / "data" / "truth").glob("fsdp2_*.truth.json")
)


@pytest.mark.parametrize("name", FSDP2_RUNS)
def test_what_real_fsdp2_runs_gathered_lies_between_the_units_ends(name):
    """The range's premise on the real FSDP2 runs of tests/data/truth (other models than
    the DDP recordings, so no prediction is held to them): the most a rank held at once
    of gathered parameters and FSDP's collectives' buffers lies between the low end's unit
    (the largest parameter tensor: its shard times the ranks) and the high end's (the
    whole model's parameters and gradients), from those runs' own truth."""
    truth_dir = ROOT / "tests" / "data" / "truth"
    t = json.loads((truth_dir / f"{name}.truth.json").read_text())
    snap = load_snapshot(truth_dir / f"{name}.pickle.xz", use_cache=False)
    bd = MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), int(t["device"]))
    iv = bd.intervals
    m = np.isin(
        bd.category,
        [CATEGORY_NAMES.index("parameter_gathered"), CATEGORY_NAMES.index("communication")],
    )
    events = np.r_[iv.start[m], iv.end[m]]
    delta = np.r_[iv.requested[m], -iv.requested[m]]
    held = int(np.cumsum(delta[np.argsort(events, kind="stable")]).max())
    w = int(t["world_size"])
    none = np.zeros(0, bool)
    sh = ddp._Sharded(
        world=w,
        params=none,
        grads=none,
        state=none,
        buckets=none,
        largest=max(b for _, b in t["parameters"]["blocks"]) * w,
        model=t["parameters"]["bytes"] * w,
        grad_model=t["gradients"]["bytes"] * w,
    )
    low, _, high = ddp.unit_bytes(sh)
    assert low <= held <= high, (fb(low), fb(held), fb(high))


def _vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_text_json_mcp_and_report_say_the_same_words(tmp_path):
    from vramscope.viewer.commands import mcp_tools

    path = next(p for p in TWO_RANKS if "_rank1_" in p.name)
    r = _offered(path)
    spec = ddp.FSDP_FULL_SHARD
    assert r is not None and r.title == spec.title and r.change.startswith(spec.change)

    text = _vramscope("advise", str(path))
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if spec.title in line)
    cells = re.split(r"\s{2,}", row.strip())
    assert cells[1:] == [spec.title, format_peak(r), fb(r.saving_bytes), r.fits_word, r.method]
    assert "(estimate, " in cells[2]
    k = cells[0]
    assert f"  {k}. {r.change}  [{r.where}]" in text.stdout.splitlines()

    out = _vramscope("advise", str(path), "--json")
    assert out.returncode == 0, out.stderr
    got = next(x for x in json.loads(out.stdout)["remedies"] if x["remedy"] == ID)
    assert got == r.to_dict() and got["predicted_peak_is_estimate"] is True
    assert json.loads(mcp_tools.advise(str(path))[0]) == json.loads(out.stdout)

    page = tmp_path / "report.html"
    rep = _vramscope("report", str(path), "-o", str(page))
    assert rep.returncode == 0, rep.stderr
    dom = browser._run(["--virtual-time-budget=5000", "--dump-dom", page.as_uri()], tmp_path)
    rows = re.findall(r'<tr><td class="change">(.*?)</tr>', dom.stdout, re.S)
    mine = [html.unescape(re.sub(r"<[^>]+>", "|", x)) for x in rows if spec.title in x]
    assert len(mine) == 1, rows
    words = [w for w in mine[0].split("|") if w]
    assert words == [
        spec.title,
        r.change,
        format_peak(r),
        fb(r.saving_bytes),
        r.method,
        r.fits_word,
        r.where,
    ], words
