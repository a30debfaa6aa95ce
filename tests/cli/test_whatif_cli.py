"""`vramscope whatif` in a real subprocess: predictions, JSON, --recommend, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import DATA, expected_for


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_json_prediction_matches_the_other_recording():
    out = vramscope(
        "whatif",
        str(DATA / "whatif_default.pickle"),
        "--conf",
        "expandable_segments:True",
        "--conf",
        "recorded",
        "--memory-limit",
        "10000000000",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["conf"] for r in rows] == ["expandable_segments:True", "recorded"]
    want = expected_for(DATA / "whatif_expandable.pickle")["memory_stats"]
    assert abs(rows[0]["peak_reserved_bytes"] / want["reserved_bytes.all.peak"] - 1) <= 0.02
    own = expected_for(DATA / "whatif_default.pickle")["memory_stats"]
    assert rows[1]["peak_reserved_bytes"] == own["reserved_bytes.all.peak"]
    assert rows[1]["peak_allocated_bytes"] == own["allocated_bytes.all.peak"]
    assert rows[1]["cuda_malloc_count"] == own["num_device_alloc"]
    for r in rows:
        assert r["oom"] is None and 0.0 <= r["fragmentation_at_peak"] <= 1.0
        assert r["memory_limit_bytes"] == 10_000_000_000


def test_text_names_the_oom_and_why():
    out = vramscope(
        "whatif",
        str(DATA / "fragmentation_oom.pickle"),
        "--conf",
        "recorded",
        "--conf",
        "expandable_segments:True",
    )
    assert out.returncode == 0, out.stderr
    assert "peak reserved" in out.stdout and "(inferred)" in out.stdout
    assert "recorded: OOM at event" in out.stdout and "capacity" in out.stdout
    assert out.stderr == ""  # the self-check passed


def test_recommend_ranks_by_peak_reserved():
    out = vramscope(
        "whatif", str(DATA / "whatif_h200" / "whatif_default.pickle.xz"), "--recommend", "--json"
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) >= 6 and "expandable_segments:True" in [r["conf"] for r in rows]
    keys = [(r["oom"] is not None, r["peak_reserved_bytes"]) for r in rows]
    assert keys == sorted(keys)


def test_json_oom_has_a_verdict():
    out = vramscope("whatif", str(DATA / "gpt2_oom.pickle"), "--conf", "recorded", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    stats = expected_for(DATA / "gpt2_oom.pickle")["memory_stats"]
    assert row["oom"]["as_recorded"] and row["oom"]["kind"] == "fragmentation"
    assert row["peak_reserved_bytes"] == stats["reserved_bytes.all.peak"]
    assert "largest block" in row["oom"]["verdict"]


@pytest.mark.parametrize("conf", ["expandable_segments:Maybe", "max_split_size_mb:1", "nonsense:3"])
def test_bad_conf_exits_2_with_one_line(conf):
    out = vramscope("whatif", str(DATA / "small_pool_mixed.pickle"), "--conf", conf)
    assert out.returncode == 2
    assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
    assert conf.split(":")[0] in out.stderr


def test_bad_file_and_bad_limit_exit_2(tmp_path):
    junk = tmp_path / "junk.pickle"
    junk.write_bytes(b"not a snapshot")
    out = vramscope("whatif", str(junk), "--conf", "expandable_segments:True")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    out = vramscope("whatif", str(DATA / "small_pool_mixed.pickle"), "--memory-limit", "lots")
    assert out.returncode == 2 and "not a size" in out.stderr


def test_snapshot_without_trace_exits_2(tmp_path):
    import pickle

    from tests.snapshot_forms import raw_object

    obj = raw_object(DATA / "small_pool_mixed.pickle")
    obj["device_traces"] = [[]]
    path = tmp_path / "notrace.pickle"
    path.write_bytes(pickle.dumps(obj))
    out = vramscope("whatif", str(path), "--conf", "expandable_segments:True")
    assert out.returncode == 2 and "no trace events" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_text_header_shows_the_given_memory_limit():
    """Regression: the header named the inferred limit while the table used --memory-limit."""
    out = vramscope(
        "whatif",
        str(DATA / "gpt2_oom.pickle"),
        "--conf",
        "expandable_segments:True",
        "--memory-limit",
        "5GiB",
    )
    assert out.returncode == 0, out.stderr
    head = out.stdout.splitlines()[0]
    assert "memory limit: 5.00 GiB (given" in head, head
    assert "the recording's: " in head and "(inferred)" in head  # named as the recording's
    rows = json.loads(
        vramscope(
            "whatif",
            str(DATA / "gpt2_oom.pickle"),
            "--conf",
            "expandable_segments:True",
            "--memory-limit",
            "5GiB",
            "--json",
        ).stdout
    )
    assert rows[0]["memory_limit_bytes"] == 5 << 30


def _whatif_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run `vramscope whatif` with stderr on a pseudo-terminal: (exit code, stdout, stderr)."""
    import os
    import pty
    import tempfile

    master, slave = pty.openpty()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vramscope.viewer", "whatif", *args],
            stdout=out,
            stderr=slave,
            stdin=subprocess.DEVNULL,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        code = proc.wait(timeout=300)
        out.seek(0)
        return code, out.read().decode(), b"".join(chunks).decode()


def test_recommend_shows_progress_on_a_terminal_and_nothing_when_piped():
    """Regression: --recommend ran for seconds with no sign of life on the terminal."""
    path = str(DATA / "gpt2_oom.pickle")
    code, stdout, stderr = _whatif_on_a_terminal(path, "--recommend")
    assert code == 0, stderr
    assert "vramscope whatif: simulating 1/9: (defaults)" in stderr, stderr
    assert "\r" in stderr and stderr.endswith("\r")  # redrawn in place, erased at the end
    assert stderr.replace("\r", "").strip(" ").startswith("vramscope whatif: loading")
    assert "ranked by predicted peak reserved" in stdout  # the result on stdout, unchanged
    piped = vramscope("whatif", path, "--recommend")
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout == stdout


WRAPPED = DATA / "transformer_long_python_1000k.pickle.xz"  # the ring started after every segment


def test_wrapped_trace_says_what_the_window_cannot_show():
    """Regression: on the 1M file every setting gave 1.34 GiB with no word that the trace saw
    none of the segment creation; an unchanged peak was presented as a prediction."""
    out = vramscope("whatif", str(WRAPPED), "--conf", "expandable_segments:True")
    assert out.returncode == 0, out.stderr
    assert "trace starts after 67 segments (1.34 GiB) already existed" in out.stdout
    assert "cudaMalloc/cudaFree count the window only" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("expandable"))
    assert "1.34 GiB*" in row and "n/a*" in row and "+0.0%" not in row
    assert "recorded, not a prediction" in out.stdout
    (d,) = json.loads(
        vramscope("whatif", str(WRAPPED), "--conf", "expandable_segments:True", "--json").stdout
    )
    assert d["window_started_late"] and d["peak_reserved_is_window_start"]
    assert d["peak_reserved_vs_recorded"] is None


def test_whole_recording_has_no_window_note():
    out = vramscope(
        "whatif", str(DATA / "gpt2_oom.pickle"), "--conf", "expandable_segments:True", "--json"
    )
    (d,) = json.loads(out.stdout)
    assert not d["window_started_late"] and not d["peak_reserved_is_window_start"]
    assert isinstance(d["peak_reserved_vs_recorded"], float)


def test_a_row_that_runs_out_of_memory_says_so_not_a_percentage():
    """A run cut short by an OOM has no peak to compare: '-0.7 %' read as an improvement."""
    out = vramscope("whatif", str(DATA / "gpt2_oom.pickle"), "--recommend")
    assert out.returncode == 0, out.stderr
    rows = [r for r in out.stdout.splitlines() if "(fragmentation)" in r or "(capacity)" in r]
    assert rows, out.stdout
    for r in rows:
        assert "out of memory" in r and not re.search(r"[+-]\d+\.\d%", r), r
