"""`vramscope summary` in a real subprocess: output, JSON keys, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.bad_inputs import cases
from tests.conftest import DATA, expected_for

REQUIRED_KEYS = {
    "reserved_bytes",
    "allocated_bytes",
    "active_bytes",
    "requested_bytes",
    "segment_count",
    "inactive_split_bytes",
    "largest_free_block_bytes",
    "oom",
}


def vramscope(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


@pytest.mark.parametrize(
    "name", ["fragmentation_oom", "capacity_oom", "cuda_graph_pool", "whatif_expandable"]
)
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
    script.write_text(
        "import sys\nassert __name__ == '__main__'\nprint('args', sys.argv[1:])\nsys.exit(7)\n"
    )
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
    from vramscope.viewer.model.replay.timeline import build_timeline

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
    """Regression: fragmentation_oom has a capacity OOM (event 1068) and a fragmentation OOM
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
    """Regression: `--at 0` printed the verdict of an OOM that happens later."""
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


def test_unknown_format_error_names_every_form_that_loads(tmp_path):
    """Regression: the error said "protocol 2-5, gzip, xz or JSON" while protocol 0/1 and
    bz2 files load; each form it names must load."""
    import bz2
    import pickle

    bad = tmp_path / "notes.pickle"
    bad.write_bytes(b"hello, this is not a snapshot")
    out = vramscope("summary", str(bad))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "protocol 0-5" in out.stderr and "bz2" in out.stderr, out.stderr
    segments = [
        {
            "device": 0,
            "address": 1 << 30,
            "total_size": 2 << 20,
            "stream": 0,
            "segment_type": "small",
            "allocated_size": 0,
            "active_size": 0,
            "requested_size": 0,
            "blocks": [
                {
                    "address": 1 << 30,
                    "size": 2 << 20,
                    "requested_size": 0,
                    "state": "inactive",
                    "frames": [],
                }
            ],
        }
    ]
    for name, data in (
        ("p0.pickle", pickle.dumps({"segments": segments}, protocol=0)),
        ("p1.pickle", pickle.dumps({"segments": segments}, protocol=1)),
        ("bz.pickle.bz2", bz2.compress(pickle.dumps({"segments": segments}))),
    ):
        (tmp_path / name).write_bytes(data)
        out = vramscope("summary", str(tmp_path / name), "--json", "--no-cache")
        assert out.returncode == 0, (name, out.stderr)
        assert json.loads(out.stdout)["reserved_bytes"] == 2 << 20


def test_help_names_bz2_and_the_directory_of_ranks():
    """Regression: `vramscope --help` omitted bz2 and the directory form."""
    out = vramscope("--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "bz2" in text and "directory of per-rank snapshots" in text
    assert "bz2" in " ".join(vramscope("summary", "--help").stdout.split())


def test_summary_device_not_in_the_file_is_an_error():
    """Regression: `summary --device 1` on a one-device file was silently accepted."""
    out = vramscope("summary", str(DATA / "gpt2_oom.pickle"), "--device", "1", "--no-cache")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        f"vramscope: error: {DATA / 'gpt2_oom.pickle'}: no device 1 "
        "in this snapshot (its devices: 0)"
    )
    out = vramscope("summary", str(DATA / "gpt2_oom.pickle"), "--device", "0", "--at", "5")
    assert out.returncode == 0, out.stderr


def test_text_plurals():
    """Regression: "in 1 gaps"."""
    out = vramscope("summary", str(DATA / "fragmentation_oom.pickle"), "--at", "0")
    assert "in 1 segment\n" in out.stdout and "in 1 gap," in out.stdout, out.stdout


def test_summary_of_a_wrapped_trace_says_what_the_window_cannot_show():
    """Regression: summary put the peak at "event 0" with no word that the recording saw none
    of the segment creation."""
    path = DATA / "transformer_long_python_1000k.pickle.xz"
    out = vramscope("summary", str(path), "--no-cache")
    assert out.returncode == 0, out.stderr
    assert "(event 0)" not in out.stdout
    assert (
        "peak over the recorded window: reserved 1.34 GiB (already at the window's start)"
        in out.stdout
    )
    assert (
        "note: device 0's trace starts after 67 segments (1.34 GiB) already existed" in out.stdout
    )
    assert "shows none of their creation" in out.stdout and "no segment was created" in out.stdout
    summary = json.loads(vramscope("summary", str(path), "--json").stdout)
    (w,) = summary["windows"]
    stats = expected_for(path)["memory_stats"]
    assert w["started_late"] and w["reserved_fixed"] and w["segment_events"] == 0
    assert w["segments_before"] == stats["segment.all.current"]
    assert w["reserved_before"] == stats["reserved_bytes.all.current"]
    whole = json.loads(vramscope("summary", str(DATA / "gpt2_oom.pickle"), "--json").stdout)
    assert not whole["windows"][0]["started_late"]
    assert "peak over the recording:" in vramscope("summary", str(DATA / "gpt2_oom.pickle")).stdout


def test_summary_process_ends_after_its_output(tmp_path):
    """As the process's entry, `summary` ends right after its output (no teardown of the
    columns, no atexit handlers), with the full output and its exit code; called with an
    argv list (tests, embedding) cli.main returns instead."""
    path = DATA / "fragmentation_oom.pickle"
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('TEARDOWN', file=sys.stderr))\n"
        "from vramscope.viewer.cli import main\n"
        "sys.argv = ['vramscope'] + sys.argv[1:]\n"
        "code = main() if sys.argv[1] == 'entry' else None\n"
        "print('RETURNED', main(sys.argv[2:]), file=sys.stderr)\n"
    )
    env_args = ["--no-cache", "--json"]
    entry = subprocess.run(
        [
            sys.executable,
            "-c",
            script.replace("sys.argv[1] == 'entry'", "True"),
            "summary",
            str(path),
            *env_args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert entry.returncode == 0, entry.stderr
    assert json.loads(entry.stdout)["oom"] is not None
    assert "TEARDOWN" not in entry.stderr and "RETURNED" not in entry.stderr
    missing = subprocess.run(
        [
            sys.executable,
            "-c",
            script.replace("sys.argv[1] == 'entry'", "True"),
            "summary",
            str(tmp_path / "absent.pickle"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "error" in missing.stderr
    assert "TEARDOWN" not in missing.stderr
    embedded = subprocess.run(
        [sys.executable, "-c", script, "x", "summary", str(path), *env_args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert embedded.returncode == 0, embedded.stderr
    assert "RETURNED 0" in embedded.stderr and "TEARDOWN" in embedded.stderr


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`vramscope summary FILE --json | head -1`: the pipe closes under the writer (here
    before it writes at all, so even a short output meets it)."""
    script = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from vramscope.viewer.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "sys.stderr.write(f'CODE {code}\\n')\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "summary",
            str(DATA / "fragmentation_oom.pickle"),
            "--json",
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr
    assert "CODE 1" in out.stderr


def test_an_oom_in_an_estimated_stretch_says_not_exact(tmp_path):
    """A real recording whose trace start is cut off (a wrapped ring): its first OOM lies
    where sizes are estimated, so its verdict line says so; the last OOM's does not."""
    from tests.model.test_oom_exactness import cut_ring

    path = cut_ring(tmp_path / "cut.pickle")
    out = vramscope("summary", str(path), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    (u,) = summary["untrusted"]
    assert [o["exact"] for o in summary["ooms"]] == [False, True]
    assert summary["ooms"][0]["not_exact_reason"] == u["reason"]
    text = vramscope("summary", str(path))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    marked = [i for i, line in enumerate(lines) if "(not exact: " in line]
    assert len(marked) == 1 and u["reason"] in lines[marked[0]]
    first = summary["ooms"][0]["event"]
    assert lines[marked[0] - 1].startswith(f"OOM on device 0 at event {first}:")


def test_a_command_line_loads_numpy_with_one_blas_thread():
    # The process's own command line: set before numpy loads (no command does matrix
    # algebra); a caller's own setting is kept.
    probe = (
        "import atexit, os, sys\n"
        "atexit.register(lambda: print('BLAS', os.environ.get('OPENBLAS_NUM_THREADS')))\n"
        "from vramscope.viewer.cli import main\n"
        "sys.argv = ['vramscope', 'summary', '--help']\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert "BLAS 1" in out.stdout
    env["OPENBLAS_NUM_THREADS"] = "3"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert "BLAS 3" in out.stdout
