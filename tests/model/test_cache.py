"""The columnar cache: identical columns, safe against damage, bounded, bypassable."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.conftest import DATA
from tests.snapshot_forms import assert_same_snapshot
from vramscope.viewer.model import cache, load_snapshot, memory_stats


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VRAMSCOPE_NO_CACHE", raising=False)
    src = tmp_path / "gpt2.pickle"
    shutil.copy(DATA / "gpt2_oom.pickle", src)
    return src


def entries():
    return sorted(cache.cache_dir().glob("*.npz"))


def test_second_open_comes_from_cache_with_identical_columns(cache_env):
    first = load_snapshot(cache_env)
    assert len(entries()) == 1
    seen = []
    second = load_snapshot(cache_env, lambda stage, f: seen.append(stage))
    assert "parse" not in seen  # no pickle parsing the second time
    assert_same_snapshot(first, second)
    assert second.frames.strings == first.frames.strings
    assert second.pools == first.pools and second.allocator_settings == first.allocator_settings
    assert memory_stats(second) == memory_stats(first)
    assert second.sidecar == first.sidecar and second.path == first.path
    for a, b in ((first.trace.stack, second.trace.stack), (first.stacks.frames, second.stacks.frames)):
        assert np.array_equal(a, b)


def test_changed_file_is_parsed_again(cache_env):
    load_snapshot(cache_env)
    st = os.stat(cache_env)
    os.utime(cache_env, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    load_snapshot(cache_env)
    assert len(entries()) == 2


def test_damaged_entry_is_dropped_and_rebuilt(cache_env):
    ref = load_snapshot(cache_env)
    [entry] = entries()
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    again = load_snapshot(cache_env)
    assert_same_snapshot(ref, again)
    assert len(entries()) == 1 and entries()[0].stat().st_size > 1000


def test_inconsistent_entry_is_not_trusted(cache_env):
    ref = load_snapshot(cache_env)
    [entry] = entries()
    key = entry.stem
    arrays = dict(np.load(entry, allow_pickle=False))
    arrays["blocks__segment"] = arrays["blocks__segment"] + 10**6
    with open(entry, "wb") as f:
        np.savez(f, **arrays)
    assert cache.load_cached(key) is None
    assert_same_snapshot(ref, load_snapshot(cache_env))


def test_no_cache_bypasses(cache_env, monkeypatch):
    load_snapshot(cache_env, use_cache=False)
    assert entries() == []
    monkeypatch.setenv("VRAMSCOPE_NO_CACHE", "1")
    load_snapshot(cache_env)
    assert entries() == []


def test_small_files_are_not_cached(cache_env):
    load_snapshot(DATA / "fragmentation_oom.pickle")
    assert entries() == []


def test_cache_is_size_capped(cache_env, monkeypatch):
    load_snapshot(cache_env)
    [entry] = entries()
    monkeypatch.setenv("VRAMSCOPE_CACHE_MAX_BYTES", str(entry.stat().st_size + 10))
    copy = cache_env.with_name("other.pickle")
    shutil.copy(cache_env, copy)
    os.utime(copy, ns=(1, 10**18))
    load_snapshot(copy)
    assert len(entries()) == 1  # the least recently used one went
