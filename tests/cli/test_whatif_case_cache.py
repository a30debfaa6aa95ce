"""The prepared-case cache (:mod:`vramscope.viewer.model.whatif.case_cache`): ``whatif``
stores the case it prepared after its answer, a re-run reads it and answers the same to
the byte; a changed file, sidecar, code or version, a damaged entry and ``--no-cache``
prepare afresh."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.commands import whatif as whatif_cmd
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.whatif import case_cache, predictions, prepare

BIG = DATA / "gpt2_oom.pickle"  # over the 1 MiB below which nothing is cached
ARGS = ("--json", "--conf", "max_split_size_mb:64", "--conf", "expandable_segments:True")


def whatif(path, cache, *extra):
    env = dict(os.environ, VRAMSCOPE_CACHE_DIR=str(cache))
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "whatif", str(path), *ARGS, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def entries(cache) -> list:
    """The case entries once written (the store runs after the answer, detached)."""
    cases = cache / "cases"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = sorted(cases.glob(f"*{case_cache.SUFFIX}")) if cases.exists() else []
        if done and not list(cases.glob(".*")):
            return done
        time.sleep(0.05)
    return []


def aged(path) -> int:
    """Set ``path``'s mtime an hour back (a read of the entry moves it to now)."""
    old = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(old, old))
    return old


def copy_recording(tmp_path):
    path = tmp_path / BIG.name
    shutil.copy(BIG, path)
    shutil.copy(BIG.with_suffix(".json"), path.with_suffix(".json"))
    return path


def test_a_rerun_reads_the_case_and_answers_the_same(tmp_path):
    path, cache = copy_recording(tmp_path), tmp_path / "cache"
    first = whatif(path, cache)
    assert first.returncode == 0, first.stderr
    [entry] = entries(cache)
    old = aged(entry)
    again = whatif(path, cache)
    assert again.returncode == 0 and again.stdout == first.stdout
    assert entry.stat().st_mtime_ns > old  # read (a least-recently-used cache)

    old = aged(entry)
    fresh = whatif(path, cache, "--no-cache")
    assert fresh.stdout == first.stdout
    assert entry.stat().st_mtime_ns == old  # neither read nor written
    assert entries(cache) == [entry]

    # Another sidecar is another case (the limit and the counters come from it).
    side = json.loads(path.with_suffix(".json").read_text())
    side["memory_limit_bytes"] = 8 << 30
    path.with_suffix(".json").write_text(json.dumps(side))
    other = whatif(path, cache)
    assert other.returncode == 0 and other.stdout != first.stdout
    assert '"memory_limit_bytes": 8589934592' in other.stdout
    assert len(entries_after(cache, 2)) == 2
    assert whatif(path, cache).stdout == other.stdout


def entries_after(cache, n: int) -> list:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = entries(cache)
        if len(got) >= n:
            return got
        time.sleep(0.05)
    return entries(cache)


def same_case(a, b) -> None:
    for f in dataclasses.fields(a.requests):
        x, y = getattr(a.requests, f.name), getattr(b.requests, f.name)
        if f.name == "initial":
            for g in dataclasses.fields(x):
                u, v = getattr(x, g.name), getattr(y, g.name)
                assert u.dtype == v.dtype and np.array_equal(u, v), g.name
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name
    for name in ("device", "recorded", "limit", "limit_source", "bounds", "gpu_bytes", "window"):
        assert getattr(a, name) == getattr(b, name), name


def test_the_stored_case_is_the_prepared_one(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    path = copy_recording(tmp_path)
    snap = load_snapshot(path)
    made = prepare(snap)
    k = case_cache.key(path, snap, None)
    assert k is not None and case_cache.load(k, snap) is None
    case_cache.store(k, made)
    got = case_cache.load(k, snap)
    assert got is not None
    same_case(got, made)
    assert got.simulate("max_split_size_mb:64").peak_reserved == (
        made.simulate("max_split_size_mb:64").peak_reserved
    )
    # Each device asked for is its own entry; the default one is named None.
    assert case_cache.key(path, snap, 0) not in (None, k)


def test_changed_file_code_or_version_is_another_key_or_no_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    path = copy_recording(tmp_path)
    snap = load_snapshot(path)
    k = case_cache.key(path, snap, None)
    case_cache.store(k, prepare(snap))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert case_cache.key(path, snap, None) != k
    monkeypatch.setattr(case_cache, "_code_stamp", lambda: "another checkout")
    assert case_cache.key(path, snap, None) != k
    monkeypatch.undo()
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(case_cache, "VERSION", case_cache.VERSION + 1)
    assert case_cache.load(k, snap) is None  # an entry of another version: dropped
    assert not list((tmp_path / "cases").glob(f"*{case_cache.SUFFIX}"))
    small = DATA / "whatif_default.pickle"  # under 1 MiB: prepared faster than read
    assert case_cache.key(small, load_snapshot(small), None) is None


def test_a_damaged_entry_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    path = copy_recording(tmp_path)
    snap = load_snapshot(path)
    k = case_cache.key(path, snap, None)
    made = prepare(snap)
    made.simulate("recorded")  # (its figures are stored too)
    for damage in (
        lambda raw: raw[: len(raw) // 2],  # cut short
        lambda raw: raw.replace(b'"device": 0', b'"device": 7'),  # no such device's trace
        lambda raw: raw.replace(b'"version": 2', b'"version": "2"'),
        lambda raw: raw.replace(b'"ok": true', b'"ok": 1'),
    ):
        case_cache.store(k, made)
        entry = tmp_path / "cases" / f"{k}{case_cache.SUFFIX}"
        raw = entry.read_bytes()
        assert damage(raw) != raw
        entry.write_bytes(damage(raw))
        assert case_cache.load(k, snap) is None
        assert not entry.exists()
    # Columns that do not fit each other.
    case_cache.store(k, made)
    arrays, meta = case_cache._to_entry(made)
    arrays["ref"] = arrays["ref"][:-1]
    case_cache.column_cache.write_entry(
        tmp_path / "cases" / f"{k}{case_cache.SUFFIX}", arrays, meta
    )
    assert case_cache.load(k, snap) is None


def test_the_recorded_runs_figures_spare_its_simulation(tmp_path, monkeypatch):
    """Stored once the recorded run ran, what the self-check reads of it comes back with
    the case: a plain what-if then simulates the settings only, and answers the same."""
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    path = copy_recording(tmp_path)
    snap = load_snapshot(path)
    k = case_cache.key(path, snap, None)
    made = prepare(snap)
    case_cache.store(k, made)  # before the recorded run: no figures
    assert case_cache.load(k, snap).recorded_known is None
    want = whatif_cmd.answer(made, ["max_split_size_mb:64", "expandable_segments:True"])
    assert made.recorded_run_made
    case_cache.store(k, made)
    got = case_cache.load(k, snap)
    assert got.recorded_known == made.recorded_figures()
    assert not got.recorded_run_made
    simulated = []
    real = predictions.simulate

    def spy(reqs, cfg, *args, **kwargs):
        simulated.append(cfg)
        return real(reqs, cfg, *args, **kwargs)

    monkeypatch.setattr(predictions, "simulate", spy)
    again = whatif_cmd.answer(got, ["max_split_size_mb:64", "expandable_segments:True"])
    assert (again.data, again.text, again.warnings) == (want.data, want.text, want.warnings)
    assert got.recorded not in simulated and len(simulated) == 2
    assert got.self_check() == made.self_check()
    assert got.recorded_peak == made.recorded_peak
    # A changed program (another request stream) knows nothing of its recorded run.
    assert got.with_requests(got.requests).recorded_known is None
    # The recorded setting asked for: its run is simulated (and then read).
    whatif_cmd.answer(got, ["recorded"])
    assert got.recorded in simulated and got.recorded_run_made
    assert got.recorded_figures() == made.recorded_figures()


def test_cases_dir_is_the_column_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    assert case_cache.cases_dir() == case_cache.column_cache.cases_dir() == tmp_path / "cases"


def cache_bytes(cache) -> int:
    found = [*cache.glob("*.cols"), *(cache / "cases").glob(f"*{case_cache.SUFFIX}")]
    return sum(p.stat().st_size for p in found)


def age(path, seconds: int) -> None:
    then = time.time_ns() - seconds * 10**9
    os.utime(path, ns=(then, then))


@pytest.mark.parametrize("oldest", ["columns", "case"])
def test_storing_a_case_trims_columns_and_cases_least_recently_used_first(
    tmp_path, monkeypatch, oldest
):
    """The prepared cases and the columns share one byte budget: storing a case removes
    the least recently used entry of either kind, and the cache ends within it."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(cache))
    path = copy_recording(tmp_path)
    snap = load_snapshot(path)  # stores the columns
    [columns] = cache.glob("*.cols")
    made = prepare(snap)
    k = case_cache.key(path, snap, None)
    case_cache.store(k, made)
    case = case_cache.cases_dir() / f"{k}{case_cache.SUFFIX}"
    age(columns, 7200 if oldest == "columns" else 3600)
    age(case, 3600 if oldest == "columns" else 7200)
    first, second = (columns, case) if oldest == "columns" else (case, columns)
    # Room for the new case (the same columns under another key) and the newer of the two.
    limit = columns.stat().st_size + 2 * case.stat().st_size - first.stat().st_size
    monkeypatch.setenv("VRAMSCOPE_CACHE_MAX_BYTES", str(limit))
    other = case_cache.key(path, snap, 0)
    case_cache.store(other, made)
    assert not first.exists() and second.exists()
    assert (case_cache.cases_dir() / f"{other}{case_cache.SUFFIX}").exists()
    assert cache_bytes(cache) <= limit


@pytest.mark.parametrize("read", ["columns", "case"])
def test_an_entry_just_read_outlives_an_older_one(tmp_path, monkeypatch, read):
    """Reading an entry (the columns at a load, a case at a what-if) makes it the most
    recently used: a trim removes the other one, though it was used later before."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(cache))
    path = copy_recording(tmp_path)
    snap = load_snapshot(path)
    [columns] = cache.glob("*.cols")
    k = case_cache.key(path, snap, None)
    case_cache.store(k, prepare(snap))
    case = case_cache.cases_dir() / f"{k}{case_cache.SUFFIX}"
    kept, dropped = (columns, case) if read == "columns" else (case, columns)
    age(kept, 7200)
    age(dropped, 3600)
    if read == "columns":
        stages = []
        load_snapshot(path, lambda stage, fraction: stages.append(stage))
        assert "parse" not in stages  # read from the entry
    else:
        assert case_cache.load(k, snap) is not None
    case_cache.column_cache.trim(kept.stat().st_size)
    assert kept.exists() and not dropped.exists()
    assert cache_bytes(cache) <= kept.stat().st_size
