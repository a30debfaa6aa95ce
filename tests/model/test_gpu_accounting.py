"""The whole GPU: the sidecar's ``gpu_memory`` added up, and the OOM verdict naming holders.

The first tests build sidecars by hand (no torch, no GPU).  The last ones read the
recordings of ``tests/workloads/other_process_holds.py`` (run on a GPU machine, copied
into ``tests/data/gpu_accounting/``) and check the accounting against what that
program knew: the other process's pid and bytes, this process's reserved, the device's
free memory at the OOM.  Without recordings they skip, saying how many were found.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramscope.viewer.model.analysis.gpu_accounting import (
    GpuHolder,
    at_oom,
    format_lines,
    from_record,
    gpu_accounting,
    split_gpu,
)
from vramscope.viewer.model.analysis.oom import last_oom
from vramscope.viewer.model.core.units import format_bytes as fb
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.reports.summary import format_text, summarize, summary_timeline

MiB = 1 << 20
GiB = 1 << 30
DATA = Path(__file__).resolve().parents[1] / "data"
RECORDED = DATA / "gpu_accounting"
WORKLOAD = "tests/workloads/other_process_holds.py"


def _snap(name: str = "capacity_oom.pickle"):
    return load_snapshot(DATA / name, use_cache=False)


def _record(**kw) -> dict:
    g = {
        "device": 0,
        "pid": 100,
        "total_bytes": 80 * GiB,
        "free_bytes": 10 * MiB,
        "uuid": "GPU-x",
        "source": "nvml",
        "processes": [
            {
                "pid": 100,
                "used_bytes": None,
                "name": "python3",
                "cmdline": None,
                "this_process": True,
            }
        ],
    }
    g.update(kw)
    return g


# --- adding up, without a GPU ----------------------------------------------------------
def test_the_split_adds_up_to_the_total_whatever_the_figures():
    for total, free, reserved, mine, others in [
        (80 * GiB, 0, 70 * GiB, 71 * GiB, [5 * GiB]),
        (80 * GiB, 3 * GiB, GiB, None, [18 * GiB, None]),
        (24 * GiB, 0, 3 * GiB, 2 * GiB, []),  # the driver reports less than reserved
    ]:
        acc = split_gpu(
            total, free, reserved, mine, [GpuHolder(i, b, None) for i, b in enumerate(others)]
        )
        assert sum(n for _, n, _ in acc.rows()) == total
        assert acc.rows()[0][1] == reserved and acc.rows()[-1][1] == free


def test_less_than_reserved_is_said_not_clipped():
    acc = split_gpu(24 * GiB, 0, 3 * GiB, 2 * GiB, [])
    assert acc.outside_allocator_bytes == -GiB
    assert any("less than PyTorch reserved" in n for n in acc.notes)


def test_a_file_without_the_record_is_not_known_and_says_why():
    snap = _snap()
    acc = gpu_accounting(snap)
    assert not acc.known and "no record of the whole GPU" in (acc.reason or "")
    assert acc.rows() == [] and acc.to_dict()["known"] is False
    snap.sidecar = None
    assert "no sidecar" in (gpu_accounting(snap).reason or "")
    s = summarize(snap, summary_timeline(snap)[0])
    assert s["gpu_accounting"]["known"] is False
    assert "the whole GPU: not known (" in format_text(s)
    # Nothing else of the summary changed shape: its keys are the old ones and this one.
    assert "oom" in s and "devices" in s and "top_sites_at_oom" in s


def test_the_reserved_row_is_the_snapshot_s_segments_of_that_device():
    snap = _snap()
    reserved = snap.sidecar["memory_stats"]["reserved_bytes.all.current"]
    acc = from_record(_record(), snap, "oom")
    assert acc.reserved_bytes == reserved
    assert from_record(_record(device=1), snap).reserved_bytes == 0  # no segments there


def test_the_verdict_names_holders_only_from_that_oom_s_own_dump():
    snap = _snap()
    oom = last_oom(snap)
    assert oom is not None and oom.kind == "capacity"
    base = dict(snap.sidecar)
    free = oom.device_free_bytes
    holders = [
        {"pid": 100, "used_bytes": 4 * GiB, "this_process": True},
        {
            "pid": 4121,
            "used_bytes": 18 * GiB + 200 * MiB,
            "name": "/usr/bin/python3",
            "cmdline": "python train_old.py",
            "this_process": False,
        },
    ]
    # This OOM was at the process's memory limit (the device had room): nobody is named.
    snap.sidecar = {**base, "reason": "oom", "gpu_memory": _record(processes=holders)}
    assert at_oom(snap, 0, free) is not None
    assert "the GPU had too little left" not in last_oom(snap).verdict
    # Another device's record, another OOM's (its free differs), a later dump's: None.
    snap.sidecar = {**base, "reason": "oom", "gpu_memory": _record(device=1)}
    assert at_oom(snap, 0, free) is None
    snap.sidecar = {**base, "reason": "oom", "oom_device_free": free + 1, "gpu_memory": _record()}
    assert at_oom(snap, 0, free) is None
    snap.sidecar = {**base, "reason": "exit", "gpu_memory": _record()}
    assert at_oom(snap, 0, free) is None


def test_the_text_comes_back_from_the_json():
    acc = split_gpu(
        80 * GiB,
        MiB,
        GiB,
        GiB + 300 * MiB,
        [GpuHolder(7, 60 * GiB, "python3 old.py")],
        source="nvml",
        device=0,
        taken_at="oom",
    )
    assert format_lines(json.loads(json.dumps(acc.to_dict()))) == acc.lines()
    assert acc.lines()[0] == (
        "the whole GPU (device 0, at the oom dump, processes from NVML): 80.00 GiB"
    )
    assert "60.00 GiB held by pid 7 `python3 old.py`" in acc.holders_phrase()


# --- the GPU machine's recordings --------------------------------------------------------
def recordings() -> list[Path]:
    return sorted(RECORDED.glob("*.truth.json")) if RECORDED.is_dir() else []


def _cases():
    found = recordings()
    if found:
        return [pytest.param(p, id=p.name[: -len(".truth.json")]) for p in found]
    return [
        pytest.param(
            None,
            marks=pytest.mark.skip(
                reason=(
                    f"0 recordings found in {RECORDED.relative_to(DATA.parents[1])}: run "
                    f"`python3 {WORKLOAD} --out $OUT` (and again with --no-nvml) on a GPU machine "
                    "and copy $OUT/* there"
                )
            ),
            id="no-recording",
        )
    ]


@pytest.fixture(params=_cases())
def recorded(request):
    truth = json.loads(request.param.read_text())
    snap = load_snapshot(RECORDED / truth["snapshot"], use_cache=False)
    return truth, snap


def test_recorded_total_and_free_are_the_oom_instant_s(recorded):
    truth, snap = recorded
    g = snap.sidecar["gpu_memory"]
    oom = truth["oom"]
    assert snap.sidecar["reason"] == "oom"
    assert g["total_bytes"] == oom["mem_get_info_total"]
    # Read by two observers of the same OOM, one after the other: nothing ran on the GPU
    # in between (the capture only pickles); allow the driver a little slack.
    assert abs(g["free_bytes"] - oom["mem_get_info_free"]) <= 64 * MiB
    assert abs(g["free_bytes"] - oom["device_free"]) <= 64 * MiB


def test_recorded_accounting_adds_up_and_reserved_is_exact(recorded):
    truth, snap = recorded
    acc = gpu_accounting(snap)
    assert acc.known and acc.taken_at == "oom"
    assert acc.reserved_bytes == truth["oom"]["reserved"]
    assert sum(n for _, n, _ in acc.rows()) == acc.total_bytes == truth["oom"]["mem_get_info_total"]


def test_recorded_other_process_is_named_with_its_bytes(recorded):
    truth, snap = recorded
    acc = gpu_accounting(snap)
    other = truth["other"]
    g = snap.sidecar["gpu_memory"]
    if "processes" not in g:
        pytest.skip(f"the capture had no process list there: {g.get('processes_missing')}")
    mine = {h.pid: h for h in acc.others}
    if other["pid"] not in mine:
        pytest.skip(
            f"the other process (pid {other['pid']}) is not among the "
            f"{len(g['processes'])} listed (pids {[p['pid'] for p in g['processes']]}):"
            " another PID namespace"
        )
    held = mine[other["pid"]].used_bytes
    assert held is not None and held >= other["memory_reserved"] >= other["hold_bytes"]
    independent = other["nvml_used_bytes"] if g["source"] == "nvml" else other["smi_used_bytes"]
    if independent is not None:
        assert abs(held - independent) <= MiB  # nvidia-smi: whole MiB
    verdict = last_oom(snap).verdict
    # It would have fitted without the other process: the verdict starts with it.
    assert verdict.startswith(f"the GPU was full because of another process: pid {other['pid']} `")
    if acc.this_process_bytes is not None:
        assert acc.outside_allocator_bytes is not None and acc.outside_allocator_bytes > 0
        # Everything known by holder: what is left is the driver's own, well under 2 GiB.
        assert abs(acc.unexplained_bytes) < 2 * GiB, acc.lines()


def test_the_holders_come_first_only_when_the_request_would_have_fitted_without_them():
    snap = _snap()
    oom = last_oom(snap)
    row = oom.event_index
    free = 2 * MiB  # the device full at this OOM (the recording's own had room)
    snap.trace.device_free[row] = free
    judged = last_oom(snap)
    assert judged.verdict.startswith("capacity:") and judged.gpu_shortfall is None
    base = {**snap.sidecar, "reason": "oom", "oom_device_free": free}
    need = judged.new_segment_bytes
    small = need // 8  # freeing it (and as much outside the allocator) leaves too little

    def holders(other: int) -> dict:
        return _record(
            free_bytes=free,
            processes=[
                {"pid": 100, "used_bytes": judged.reserved_bytes + small, "this_process": True},
                {
                    "pid": 4121,
                    "used_bytes": other,
                    "cmdline": "python3 hold.py",
                    "this_process": False,
                },
            ],
        )

    snap.sidecar = {**base, "gpu_memory": holders(small)}
    v = last_oom(snap)
    assert v.gpu_shortfall is None and v.verdict.startswith(judged.verdict)
    assert v.verdict.endswith(
        f"; without them {fb(free + 2 * small)} would have been "
        f"free, still less than the new {fb(need)} segment"
    )
    snap.sidecar = {**base, "gpu_memory": holders(need)}
    v = last_oom(snap)
    assert v.verdict.startswith(
        "the GPU was full because of another process: pid 4121 "
        f"`python3 hold.py` holds {fb(need)}, "
    )
    assert v.verdict.endswith(f"; within the {fb(judged.reserved_bytes + free)}: {judged.verdict}")
    assert v.gpu_shortfall["holders"][0]["pid"] == 4121
    # This process's memory outside the allocator alone would have made room: said so.
    snap.sidecar = {
        **base,
        "gpu_memory": _record(
            free_bytes=free,
            processes=[
                {"pid": 100, "used_bytes": judged.reserved_bytes + need, "this_process": True}
            ],
        ),
    }
    v = last_oom(snap)
    assert v.verdict.startswith(
        f"the GPU was full: this process holds {fb(need)} of the GPU outside PyTorch's allocator"
    )
    assert v.gpu_shortfall["blamed"] == "outside the allocator"
