"""``make bench``'s rows of independent runs (tests/bench/bench_parallel.py): each row
one after the other, on a small machine's cores (``taskset``) and on all of them, with
the core count, in the table and the JSON.  A real run on a small snapshot: the figures
are the bench's business, the test holds that both columns are measured and shown."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "bench" / "bench_parallel.py"
SMALL = ROOT / "tests" / "data" / "fragmentation_oom.pickle"


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), str(SMALL), "--no-ranks", "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VRAMSCOPE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, json.loads(out.read_text())


def test_each_row_on_a_few_cores_and_on_all(tmp_path):
    # One core is the small machine here, so that a 2-core host measures both columns too.
    assert shutil.which("taskset"), "taskset (util-linux) is what pins the small machine"
    proc, rows = run(tmp_path, "--only", "whatif,advise", "--small-cores", "1")
    first = sorted(os.sched_getaffinity(0))[0]
    assert [r["row"] for r in rows] == ["whatif, one setting", "advise"]
    for r in rows:
        assert r["cpus"] == len(os.sched_getaffinity(0))
        assert r["small_cores"] == 1 and r["two_cpus"] == str(first)
        assert r["serial_s"] > 0 and r["two_s"] > 0 and r["all_s"] > 0
        assert r["two_s"] != r["all_s"]  # (two runs: the same figure only by chance)
    header = next(line for line in proc.stdout.splitlines() if line.startswith("file"))
    assert "1 cores" in header and "all cores" in header and "all/1" in header
    assert f"on CPUs {first} (taskset)" in proc.stdout
    table = [line for line in proc.stdout.splitlines() if line.startswith(SMALL.name)]
    assert len(table) == 2 and all(("PASS" in t) != ("MISS" in t) for t in table)


def test_no_more_cores_than_the_small_machine_is_one_column(tmp_path):
    many = len(os.sched_getaffinity(0))
    proc, rows = run(tmp_path, "--only", "whatif", "--small-cores", str(many))
    assert rows[0]["two_cpus"] is None and rows[0]["two_s"] == rows[0]["all_s"]
    assert "that column is the all one" in proc.stdout


def test_a_row_that_does_not_exist_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH), str(SMALL), "--only", "advice"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--only: no row advice" in proc.stderr
    assert "Traceback" not in proc.stderr
