"""`vramscope summary` re-opens: the result cache, and the column cache written after the output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from tests.conftest import DATA

BIG = DATA / "gpt2_oom.pickle"  # over the 1 MiB below which nothing is cached


def run(*args, cache, extra_env=None, python_args=()):
    env = dict(os.environ, VRAMSCOPE_CACHE_DIR=str(cache), **(extra_env or {}))
    return subprocess.run(
        [sys.executable, *python_args, "-m", "vramscope.viewer", "summary", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def wait_for_columns(cache, timeout=30.0) -> list:
    t = time.time()
    while time.time() - t < timeout:
        entries = [p for p in cache.glob("*") if p.is_file() and not p.name.startswith(".tmp")]
        if entries and not list(cache.glob(".tmp*")):
            return entries
        time.sleep(0.05)
    return []


def test_reopen_prints_the_same_without_importing_numpy(tmp_path):
    path = tmp_path / BIG.name
    shutil.copy(BIG, path)
    cache = tmp_path / "cache"
    first = run(path, "--json", cache=cache)
    assert first.returncode == 0 and first.stdout.startswith("{")
    # The column cache is written after the output, in the background: it appears.
    assert wait_for_columns(cache)
    again = run(path, "--json", cache=cache, python_args=("-X", "importtime"))
    assert again.returncode == 0 and again.stdout == first.stdout
    imported = {line.split("|")[-1].strip() for line in again.stderr.splitlines()}
    assert "numpy" not in imported and "vramscope.viewer.model" not in imported
    # The text form is its own entry; --no-cache and a changed file compute afresh.
    text = run(path, cache=cache)
    assert text.returncode == 0 and not text.stdout.startswith("{")
    fresh = run(path, "--json", "--no-cache", cache=cache, python_args=("-X", "importtime"))
    assert fresh.stdout == first.stdout and "numpy" in fresh.stderr
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    changed = run(path, "--json", cache=cache, python_args=("-X", "importtime"))
    assert changed.stdout == first.stdout and "numpy" in changed.stderr


def test_result_cache_can_be_switched_off_alone(tmp_path):
    cache = tmp_path / "cache"
    first = run(BIG, "--json", cache=cache)
    assert wait_for_columns(cache)
    cols_only = run(
        BIG,
        "--json",
        cache=cache,
        extra_env={"VRAMSCOPE_NO_RESULT_CACHE": "1"},
        python_args=("-X", "importtime"),
    )
    assert cols_only.stdout == first.stdout and "numpy" in cols_only.stderr


def test_another_spelling_of_the_same_file_prints_its_own_path(tmp_path):
    """The cached output names the file as it was typed then: another spelling of the
    same file must not get the first one's name."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    src = tmp_path / "snap.pickle"
    shutil.copyfile(DATA / "gpt2_oom.pickle", src)
    env = {k: v for k, v in os.environ.items() if k != "VRAMSCOPE_NO_CACHE"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")

    def run(path, cwd):
        out = subprocess.run(
            [sys.executable, "-m", "vramscope.viewer", "summary", path, "--json"],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["file"]

    assert run(str(src), tmp_path) == str(src)
    assert run("snap.pickle", tmp_path) == "snap.pickle"
