"""`vramscope summary` in a real subprocess: output, JSON keys, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bad_inputs import cases
from tests.conftest import DATA, expected_for

REQUIRED_KEYS = {"reserved_bytes", "allocated_bytes", "active_bytes", "requested_bytes",
                 "segment_count", "inactive_split_bytes", "largest_free_block_bytes", "oom"}


def vramscope(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramscope.viewer", *args],
                          capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize("name", ["fragmentation_oom", "capacity_oom", "cuda_graph_pool",
                                  "whatif_expandable"])
def test_summary_json(name):
    path = DATA / f"{name}.pickle"
    out = vramscope("summary", str(path), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert REQUIRED_KEYS <= summary.keys()
    stats = expected_for(path)["memory_stats"]
    assert summary["reserved_bytes"] == stats["reserved_bytes.all.current"]
    assert summary["requested_bytes"] == stats["requested_bytes.all.current"]
    assert summary["segment_count"] == stats["segment.all.current"]
    assert (summary["oom"] is None) == (stats["num_ooms"] == 0)
    assert summary["devices"] and summary["devices"][0]["pools"]


def test_summary_text_shows_verdict():
    out = vramscope("summary", str(DATA / "fragmentation_oom.pickle"))
    assert out.returncode == 0
    assert "fragmentation: 1.74 GiB is free inside 178 segments" in out.stdout
    assert "largest free block is 4.00 MiB < 8.00 MiB requested" in out.stdout


ERRORS = [c for c in cases() if c[2] == "error"]


@pytest.mark.parametrize("name,data,_", ERRORS, ids=[c[0] for c in ERRORS])
def test_bad_file_exit_2_one_line(tmp_path, name, data, _):
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(data)
    out = vramscope("summary", str(path))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("vramscope: error: ")
    assert "Traceback" not in out.stderr and out.stdout == ""


@pytest.mark.parametrize("target", ["missing", "directory"])
def test_unopenable_path_exit_2(tmp_path, target):
    path = tmp_path / "nope.pickle" if target == "missing" else tmp_path
    out = vramscope("summary", str(path))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_warnings_printed_but_exit_0(tmp_path):
    data = dict((c[0], c[1]) for c in cases())["unknown-action"]
    path = tmp_path / "odd.pickle"
    path.write_bytes(data)
    out = vramscope("summary", str(path), "--json")
    assert out.returncode == 0
    assert json.loads(out.stdout)["warnings"]


def test_version_and_help():
    from vramscope.viewer import __version__

    out = vramscope("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"vramscope {__version__}"
    out = vramscope("--help")
    assert out.returncode == 0 and "summary" in out.stdout and "--screenshot" in out.stdout
    out = vramscope("summary", "--help")
    assert out.returncode == 0 and "--json" in out.stdout


def test_record_runs_a_script_under_capture(tmp_path):
    """`vramscope record` is the capture runner: the script's argv, __main__ and exit code."""
    pytest.importorskip("torch")
    script = tmp_path / "job.py"
    script.write_text("import sys\nassert __name__ == '__main__'\n"
                      "print('args', sys.argv[1:])\nsys.exit(7)\n")
    out = vramscope("record", "--out", str(tmp_path / "snaps"), str(script), "a", "--b")
    assert out.returncode == 7, out.stderr
    assert "args ['a', '--b']" in out.stdout
    assert "CUDA" in out.stderr  # one clear warning: nothing to record on this machine


@pytest.mark.parametrize("name", ["gpt2_oom", "resnet50_train", "whatif_expandable"])
def test_summary_json_peaks_equal_allocator_peaks(name):
    path = DATA / f"{name}.pickle"
    summary = json.loads(vramscope("summary", str(path), "--json").stdout)
    stats = expected_for(path)["memory_stats"]
    assert summary["peak_requested_bytes"] == stats["requested_bytes.all.peak"]
    assert summary["peak_reserved_bytes"] == stats["reserved_bytes.all.peak"]
    assert isinstance(summary["peak_reserved_event"], int)
    assert summary["peak_reserved_time_us"] > 0
    assert summary["at"] is None


def test_summary_at_event_reports_that_moment():
    from vramscope.viewer.model import load_snapshot, memory_stats
    from vramscope.viewer.model.timeline import build_timeline

    path = DATA / "fragmentation_oom.pickle"
    summary = json.loads(vramscope("summary", str(path), "--at", "1067", "--json").stdout)
    tl = build_timeline(load_snapshot(path))
    expected = memory_stats(tl.snapshot_at(0, 1067))
    assert summary["at"]["event"] == 1067 and summary["at"]["action"] == "alloc"
    assert summary["reserved_bytes"] == expected.reserved_bytes
    assert summary["allocated_bytes"] == expected.allocated_bytes == expected.reserved_bytes
    assert summary["largest_free_block_bytes"] == 0
    out = vramscope("summary", str(path), "--at", "5000")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_summary_text_lists_every_oom():
    """Issue 17.4: fragmentation_oom has a capacity OOM (event 1068) and a fragmentation OOM
    (1959); the text showed only the last."""
    path = DATA / "fragmentation_oom.pickle"
    ooms = json.loads(vramscope("summary", str(path), "--json").stdout)["ooms"]
    assert [o["kind"] for o in ooms] == ["capacity", "fragmentation"]
    out = vramscope("summary", str(path))
    assert out.returncode == 0, out.stderr
    assert "2 OOMs:" in out.stdout
    for o in ooms:
        assert f"OOM on device 0 at event {o['event']}:" in out.stdout
        assert o["verdict"] in out.stdout


def test_summary_at_shows_only_the_ooms_up_to_that_event():
    """Issue 17.10: `--at 0` printed the verdict of an OOM that happens later."""
    path = DATA / "fragmentation_oom.pickle"
    out = vramscope("summary", str(path), "--at", "0")
    assert out.returncode == 0, out.stderr
    assert "OOM on device" not in out.stdout and "verdict" not in out.stdout
    assert "2 later OOMs after this event" in out.stdout
    summary = json.loads(vramscope("summary", str(path), "--at", "0", "--json").stdout)
    assert summary["oom"] is None and summary["ooms_after_at"] == 2
    first = summary["ooms"][0]["event"]
    summary = json.loads(vramscope("summary", str(path), "--at", str(first), "--json").stdout)
    assert summary["oom"]["kind"] == "capacity" and summary["ooms_after_at"] == 1
