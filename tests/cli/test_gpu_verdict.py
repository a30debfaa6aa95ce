"""The OOM verdict reads the whole GPU: when another process held the device and the
request would have fitted without it, `summary`, `summary --json`, `advise` (its
verdict and its first remedy) and the MCP tools say so first, word for word alike,
from the recordings in tests/data/gpu_accounting (tests/gpu_verdicts.py builds the
expected words from each recording's truth file).  An OOM outside the allocator
(cuBLAS could not create its handle) is explained the same way.  The GUI's banner:
tests/gui/test_gpu_verdict_gui.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_mcp import answer, with_server
from tests.gpu_verdicts import (
    HOLDER,
    cublas_verdict,
    derive_outside_oom,
    figures,
    holder_verdict,
    load,
    truths,
    vramscope,
    wholly_free_segments,
)
from vramscope.viewer.model.analysis.oom import last_oom
from vramscope.viewer.model.core.units import format_bytes as fb
from vramscope.viewer.model.io.load import load_snapshot

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
TRUTHS = truths()


def test_the_recordings_are_there():
    assert all(p.is_file() for p in TRUTHS) and len(TRUTHS) >= 3, TRUTHS
    assert (HOLDER / "holder_cublas_oom.truth.json").is_file()


def _judgement(snap_path: Path) -> str:
    """The allocator's own verdict on this OOM, without the record of the whole GPU."""
    snap = load_snapshot(snap_path, use_cache=False)
    snap.sidecar = {k: v for k, v in snap.sidecar.items() if k != "gpu_memory"}
    return last_oom(snap).verdict


@pytest.fixture(params=TRUTHS, ids=lambda p: p.name.split("_rank")[0].split(".")[0])
def recording(request):
    truth, snap, side = load(request.param)
    return figures(truth, side), snap, side, holder_verdict(truth, side, _judgement(snap))


def test_summary_says_the_other_process_first_in_text_and_json(recording):
    truth, snap, _side, verdict = recording
    text = vramscope("summary", str(snap)).splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("OOM on device 0"))
    assert text[at + 1] == f"  {verdict}"
    d = json.loads(vramscope("summary", str(snap), "--json"))
    assert d["oom"]["verdict"] == verdict
    short = d["oom"]["gpu_shortfall"]
    assert short["blamed"] == "other processes"
    assert [h["pid"] for h in short["holders"]] == [truth["pid"]]
    assert short["could_have_bytes"] == truth["reserved"] + truth["free"]
    # The whole-GPU table adds up to the device's total, its unexplained rest within 64 MiB.
    acc = d["gpu_accounting"]
    assert sum(r["bytes"] for r in acc["rows"]) == acc["total_bytes"] == truth["total"]
    assert abs(acc["unexplained_bytes"]) <= 64 * MiB, acc["rows"]
    assert [r["bytes"] for r in acc["rows"] if r.get("pid") == truth["pid"]] == [truth["held"]]


def test_advise_leads_with_the_other_process(recording):
    truth, snap, side, verdict = recording
    event = json.loads(vramscope("summary", str(snap), "--json"))["oom"]["event"]
    text = vramscope("advise", str(snap))
    assert f"verdict: out of memory at event {event}: {verdict}\n" in text
    a = json.loads(vramscope("advise", str(snap), "--json"))
    assert a["verdict"] == f"out of memory at event {event}: {verdict}"
    first = a["remedies"][0]
    pid = truth["pid"]
    assert first["remedy"] == "free_gpu" and first["method"] == "the limit rises"
    cmd = next(p["cmdline"] for p in side["gpu_memory"]["processes"] if p["pid"] == pid)
    assert f"pid {pid} `{cmd}`" in first["change"] and "CUDA_VISIBLE_DEVICES" in first["change"]
    # Honest: the program's own peak, unchanged; it fits because the limit rises.
    assert first["predicted_peak_reserved_bytes"] == a["needed_peak_reserved_bytes"]
    assert first["saving_bytes"] == 0 and first["fits"] is True
    could = truth["reserved"] + truth["free"]
    assert first["limit_with_change_bytes"] == could + truth["held"]
    assert a["memory_limit_bytes"] == could
    # The allocator held more before the other process took the room: said beside it.
    peak = side["memory_stats"]["reserved_bytes.all.peak"]
    note = f"; it held {fb(peak)} earlier in the run: other processes took room meanwhile"
    assert a["memory_limit_source"] == (
        "reserved + the GPU's free memory at the OOM" + (note if peak > could else "")
    )
    # Allocator settings are offered only where they make the run fit.
    assert all(r["fits"] for r in a["remedies"] if r["remedy"].startswith("allocator:"))


def test_mcp_says_what_the_cli_says(recording):
    _truth, snap, _side, verdict = recording

    async def session(client):
        s = answer(await client.call_tool("summary", {"file": str(snap)}))
        a = answer(await client.call_tool("advise", {"file": str(snap)}))
        return json.loads(s), json.loads(a)

    s, a = with_server(session)
    assert s["oom"]["verdict"] == verdict
    assert a["verdict"].endswith(f": {verdict}") and a["remedies"][0]["remedy"] == "free_gpu"


def test_cublas_s_failure_names_the_holder_and_the_free_memory():
    truth, snap, side = load(HOLDER / "holder_cublas_oom.truth.json")
    assert truth["training"]["allocator_oom"] is False
    want = cublas_verdict(truth, side)
    f = figures(truth, side)
    text = vramscope("summary", str(snap)).splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("OOM outside"))
    # Named at the program's own innermost frame (the line that called backward), not
    # torch's.
    own = [f for f in side["outside_allocator_oom"]["stack"] if "site-packages" not in f]
    assert own[-1].endswith(" train")
    assert text[at] == f"OOM outside PyTorch's allocator on device 0 (cuBLAS) at {own[-1]}"
    assert text[at + 1] == f"  {want}"
    d = json.loads(vramscope("summary", str(snap), "--json"))
    assert d["oom"] is None and d["outside_oom"]["verdict"] == want
    acc = d["gpu_accounting"]
    assert sum(r["bytes"] for r in acc["rows"]) == acc["total_bytes"] == f["total"]
    assert abs(acc["unexplained_bytes"]) <= 64 * MiB, acc["rows"]
    a = json.loads(vramscope("advise", str(snap), "--json"))
    assert a["verdict"] == f"out of memory outside the allocator: {want}"
    # The holder took more than was left: freeing or moving it comes first, then the
    # allocator's wholly free segments handed back where cuBLAS can have them.
    first, second = a["remedies"][:2]
    assert first["remedy"] == "free_gpu" and f"pid {f['pid']} `" in first["change"]
    assert first["predicted_peak_reserved_bytes"] == a["recorded_peak_reserved_bytes"]
    whole = wholly_free_segments(truth, side)
    assert whole > f["free"] and second["remedy"] == "empty_cache"
    assert second["change"] == (
        f"call `torch.cuda.empty_cache()` before the call that "
        f"failed  [{own[-1]}]: {fb(whole)} of wholly free segments "
        f"go back to the GPU, where cuBLAS can allocate (the GPU "
        f"had {fb(f['free'])} free)"
    )
    # What the allocator could have had: its reserved then plus the free memory.
    assert a["memory_limit_bytes"] == f["reserved"] + f["free"]

    async def session(client):
        s = answer(await client.call_tool("summary", {"file": str(snap)}))
        return json.loads(s), json.loads(
            answer(await client.call_tool("advise", {"file": str(snap)}))
        )

    s, a2 = with_server(session)
    assert s["outside_oom"]["verdict"] == want and a2["verdict"] == a["verdict"]


def test_an_oom_outside_the_allocator_is_explained(tmp_path):
    path, want = derive_outside_oom(TRUTHS[0], tmp_path)
    text = vramscope("summary", str(path)).splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("OOM outside"))
    assert text[at] == ("OOM outside PyTorch's allocator on device 0 (cuBLAS) at train.py:41 step")
    assert text[at + 1] == f"  {want['verdict']}"
    d = json.loads(vramscope("summary", str(path), "--json"))
    assert d["oom"] is None and d["outside_oom"]["verdict"] == want["verdict"]
    assert d["outside_oom"]["device_free_bytes"] == want["free"]
    a = json.loads(vramscope("advise", str(path), "--json"))
    assert a["verdict"] == f"out of memory outside the allocator: {want['verdict']}"
    # The other process held less than was left free: it is not offered as the cause.
    assert want["held"] < want["free"]
    assert all(r["remedy"] != "free_gpu" for r in a["remedies"])

    async def session(client):
        return json.loads(answer(await client.call_tool("summary", {"file": str(path)})))

    assert with_server(session)["outside_oom"]["verdict"] == want["verdict"]
