"""What a ``whatif`` whose case is cached imports: not what only preparing a case needs
(the OOM reports, the timeline) nor ``numpy.ma`` (which ``np.unique`` imports on first
use) - a real subprocess, its ``-X importtime`` read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.cli.test_whatif_case_cache import BIG, entries
from vramscope.viewer.model.whatif import native_sim

NOT_IMPORTED = (
    "numpy.ma",
    "vramscope.viewer.model.analysis.oom",
    "vramscope.viewer.model.replay.timeline",
)


def imported(path, cache) -> tuple[str, set[str]]:
    env = dict(os.environ, VRAMSCOPE_CACHE_DIR=str(cache))
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vramscope.viewer", "whatif", "--json"]
        + ["--conf", "max_split_size_mb:64", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    names = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    return r.stdout, names


def test_a_cached_whatif_imports_only_what_it_uses(tmp_path):
    path, cache = tmp_path / BIG.name, tmp_path / "cache"
    shutil.copy(BIG, path)
    first, names = imported(path, cache)
    assert "vramscope.viewer.model.analysis.oom" in names  # preparing the case needs it
    assert entries(cache)
    again, names = imported(path, cache)
    assert again == first
    assert "vramscope.viewer.model.whatif.run" in names  # (the list was read)
    assert not names & set(NOT_IMPORTED), names & set(NOT_IMPORTED)


def test_unique_is_numpys():
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 5, 1000):
        for dtype in (np.int64, np.int32):
            values = rng.integers(-3, 4, n).astype(dtype)
            got, want = native_sim._unique(values), np.unique(values)
            assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("command", ["whatif", "advise"])
def test_the_process_ends_after_the_answer_without_teardown(tmp_path, command):
    """Run as the process, whatif and advise end right after their answer (no atexit
    handlers, no freeing of the case): the answer whole, the exit code kept."""
    hook = tmp_path / "hook"
    hook.mkdir()
    mark = tmp_path / "torn_down"
    (hook / "sitecustomize.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(mark)!r}, 'w').close())\n"
    )
    env = dict(os.environ, VRAMSCOPE_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(hook), env.get("PYTHONPATH", "")])
    base = [sys.executable, "-m", "vramscope.viewer", command]
    setting = ["--conf", "max_split_size_mb:64"] if command == "whatif" else []
    r = subprocess.run(
        [*base, "--json", *setting, str(BIG)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    json.loads(r.stdout)  # the answer whole
    assert not mark.exists()
    bad = subprocess.run(
        [*base, str(tmp_path / "none.pickle")], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "error" in bad.stderr and not mark.exists()
    # The check itself: a command that tears down runs the hook.
    subprocess.run([*base, "--help"], capture_output=True, env=env)
    assert mark.exists()
