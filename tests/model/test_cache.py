"""The columnar cache: identical columns, safe against damage, bounded, bypassable."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.conftest import DATA
from tests.parser_paths import parser_path  # noqa: F401 - autouse: both parsers
from tests.snapshot_forms import assert_same_snapshot
from vramscope.viewer.model import load_snapshot, memory_stats
from vramscope.viewer.model.io import cache


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VRAMSCOPE_NO_CACHE", raising=False)
    src = tmp_path / "gpt2.pickle"
    shutil.copy(DATA / "gpt2_oom.pickle", src)
    return src


def entries():
    return sorted(cache.cache_dir().glob(f"*{cache.SUFFIX}"))


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
    for a, b in (
        (first.trace.stack, second.trace.stack),
        (first.stacks.frames, second.stacks.frames),
    ):
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
    arrays, meta = cache.read_entry(entry)
    arrays = {name: np.array(a) for name, a in arrays.items()}
    arrays["blocks__segment"] = arrays["blocks__segment"] + 10**6
    cache.write_entry(entry, arrays, meta)
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


def _rewrite_header(entry, edit):
    """Re-write an entry's JSON header in place (same length, padded with spaces)."""
    import json
    import struct

    raw = bytearray(entry.read_bytes())
    start = len(cache._MAGIC) + 8
    (hlen,) = struct.unpack("<Q", raw[len(cache._MAGIC) : start])
    header = json.loads(raw[start : start + hlen])
    room = min(o for _, o, _ in header["arrays"].values()) - start  # header + its padding
    edit(header)
    text = json.dumps(header).encode()
    assert len(text) <= room
    raw[len(cache._MAGIC) : start] = struct.pack("<Q", len(text))
    raw[start : start + room] = text + b"\0" * (room - len(text))
    entry.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "edit",
    [
        lambda h: h["arrays"]["trace__addr"].__setitem__(0, "|O"),  # objects: never
        lambda h: h["arrays"]["trace__addr"].__setitem__(2, 10**8),  # beyond the file
        lambda h: h["arrays"]["blocks__size"].__setitem__(1, -8),
        lambda h: h["arrays"].pop("stacks__frames"),
        lambda h: h.__setitem__("meta", {"version": cache.CACHE_VERSION}),
    ],
    ids=["object-dtype", "extent", "negative-offset", "missing-column", "no-metadata"],
)
def test_hostile_entry_is_refused_and_rebuilt(cache_env, edit):
    ref = load_snapshot(cache_env)
    [entry] = entries()
    _rewrite_header(entry, edit)
    assert cache.load_cached(entry.stem) is None
    assert not entry.exists()  # dropped ...
    assert_same_snapshot(ref, load_snapshot(cache_env))
    assert len(entries()) == 1  # ... and written again


def test_columns_are_mapped_lazily_not_read(cache_env):
    """A cached open maps the entry: columns are views of the file, writable
    (copy-on-write, the entry is never changed)."""
    import mmap

    load_snapshot(cache_env)
    [entry] = entries()
    before = entry.read_bytes()
    snap = load_snapshot(cache_env)
    base = snap.trace.addr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(getattr(base, "obj", base), mmap.mmap)
    snap.trace.addr[:] = 0  # views are writable ...
    assert entry.read_bytes() == before  # ... without touching the cache


def test_default_location_is_the_user_cache_dir(monkeypatch, tmp_path):
    import sys

    monkeypatch.delenv("VRAMSCOPE_CACHE_DIR", raising=False)
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache.cache_dir() == tmp_path / "xdg" / "vramscope"
        monkeypatch.delenv("XDG_CACHE_HOME")
        assert cache.cache_dir() == cache.Path.home() / ".cache" / "vramscope"
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def test_old_entries_are_ignored_and_trimmed(cache_env, monkeypatch):
    old = cache.cache_dir() / ("0" * 40 + ".npz")
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(b"x" * 4096)
    os.utime(old, ns=(1, 1))
    load_snapshot(cache_env)
    [entry] = entries()
    monkeypatch.setenv("VRAMSCOPE_CACHE_MAX_BYTES", str(entry.stat().st_size + 10))
    cache.trim(cache.max_bytes())
    assert not old.exists() and entry.exists()


def _case_entry(name: str, nbytes: int):
    """A prepared what-if case entry of about ``nbytes`` in the real format (trim reads
    only its size and age)."""
    path = cache.cases_dir() / f"{name}{cache.CASE_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    cache.write_entry(path, {"kind": np.zeros(nbytes // 8, dtype=np.int64)}, {"version": 0})
    return path


def _age(path, seconds: int) -> None:
    then = path.stat().st_mtime_ns - seconds * 10**9
    os.utime(path, ns=(then, then))


def _cache_bytes() -> int:
    cases = cache.cases_dir().glob(f"*{cache.CASE_SUFFIX}")
    return sum(p.stat().st_size for p in [*entries(), *cases])


@pytest.mark.parametrize("oldest", ["case", "columns"])
def test_columns_and_cases_share_one_budget(cache_env, monkeypatch, oldest):
    """Storing columns trims the prepared what-if cases too: the least recently used
    entry goes, whichever kind it is, and the whole cache ends within the budget."""
    load_snapshot(cache_env)
    [columns] = entries()
    case = _case_entry("c" * 40, columns.stat().st_size // 2)
    _age(columns, 7200 if oldest == "columns" else 3600)
    _age(case, 3600 if oldest == "columns" else 7200)
    first, second = (case, columns) if oldest == "case" else (columns, case)
    # Room for the new columns and the newer of the two: only the oldest has to go.
    limit = 2 * columns.stat().st_size + case.stat().st_size - first.stat().st_size
    monkeypatch.setenv("VRAMSCOPE_CACHE_MAX_BYTES", str(limit))
    copy = cache_env.with_name("other.pickle")
    shutil.copy(cache_env, copy)
    load_snapshot(copy)
    assert not first.exists() and second.exists()
    assert len(entries()) == (2 if oldest == "case" else 1)
    assert _cache_bytes() <= limit
