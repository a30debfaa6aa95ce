"""model/io/atomic.write_atomic, the one way the viewer writes a file another reader may
open meanwhile (the column cache, the result cache, a live session's saved snapshot):
the file is the old one or the new one, never half of one, and no temporary is left."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vramscope.viewer.model.io.atomic import write_atomic


def test_bytes_or_a_writer_land_whole_in_a_new_folder(tmp_path):
    target = tmp_path / "new" / "deeper" / "a.bin"
    write_atomic(target, b"first")
    assert target.read_bytes() == b"first"
    write_atomic(target, lambda f: (f.write(b"sec"), f.write(b"ond")), durable=True)
    assert target.read_bytes() == b"second"
    assert os.listdir(target.parent) == ["a.bin"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "entry.cols"
    target.write_bytes(b"old and whole")

    def half_then_fail(f):
        f.write(b"half of the new")
        seen.append(target.read_bytes())  # a reader meanwhile sees the old file
        raise OSError("disk full")

    seen: list[bytes] = []
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, half_then_fail)
    assert seen == [b"old and whole"]
    assert target.read_bytes() == b"old and whole"
    assert os.listdir(tmp_path) == ["entry.cols"]


def test_the_viewers_writers_all_go_through_it(tmp_path, monkeypatch):
    """The result cache and the column cache write through write_atomic (a writer of its
    own would not be seen here)."""
    from vramscope.viewer.commands import result_cache
    from vramscope.viewer.model.io import atomic, cache

    written = []
    real = atomic.write_atomic

    def spy(target, data, durable=False):
        written.append(os.path.basename(target))
        real(target, data, durable)

    monkeypatch.setattr(atomic, "write_atomic", spy)
    monkeypatch.setattr(cache, "write_atomic", spy)
    monkeypatch.setenv("VRAMSCOPE_CACHE_DIR", str(tmp_path))
    result_cache.put("k1", "text\n")
    cache.write_entry(tmp_path / "e.cols", {"a": np.arange(3)}, {})
    assert written == ["k1.txt", "e.cols"]
    assert cache.read_entry(tmp_path / "e.cols")[0]["a"].tolist() == [0, 1, 2]
