"""Run loader tests through both parsers: the compiled one and the pure-Python one.

``VRAMSCOPE_PURE_PYTHON=1`` switches the compiled parser off; the
``parser_path`` fixture runs a test once per path (import it into a test
module, autouse).  :func:`assert_identical` is the strict equality the two
paths promise: every column with its dtype, every interned id, string, pool,
setting and warning.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import fields

import numpy as np
import pytest

from tests import native_gate
from vramscope.viewer.model._native import PURE_PYTHON_ENV
from vramscope.viewer.model.io import fast_pickle

PATHS = ["native", "python"]


@pytest.fixture(params=PATHS, autouse=True)
def parser_path(request, monkeypatch):
    if request.param == "native":
        monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
        native_gate.skip_unless(fast_pickle.available(), "the compiled parser is not built")
    else:
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    return request.param


@contextmanager
def pure_python():
    """Within the block, only the pure-Python parser runs."""
    old = os.environ.get(PURE_PYTHON_ENV)
    os.environ[PURE_PYTHON_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ[PURE_PYTHON_ENV]
        else:
            os.environ[PURE_PYTHON_ENV] = old


def assert_identical(a, b) -> None:
    """Every column equal (values and dtypes), ids included; metadata equal."""
    tables = [
        (table, getattr(a, table), getattr(b, table))
        for table in (
            "segments",
            "blocks",
            "trace",
            "annotations",
            "frames",
            "stacks",
            "alloc_annotations",
        )
    ]
    assert (a.host is None) == (b.host is None), "host memory on one path only"
    if a.host is not None:
        assert a.host.pools == b.host.pools
        tables += [
            (f"host.{t}", getattr(a.host, t), getattr(b.host, t))
            for t in ("segments", "blocks", "trace", "alloc_annotations")
        ]
    for table, ta, tb in tables:
        for f in fields(ta):
            va, vb = getattr(ta, f.name), getattr(tb, f.name)
            if isinstance(va, np.ndarray):
                assert va.dtype == vb.dtype, f"{table}.{f.name}: {va.dtype} != {vb.dtype}"
                assert np.array_equal(va, vb), f"{table}.{f.name} differs"
            else:
                assert va == vb, f"{table}.{f.name} differs"
    assert a.pools == b.pools
    assert repr(a.allocator_settings) == repr(b.allocator_settings)  # NaN equals NaN here
    assert a.source_format == b.source_format
    assert a.warnings == b.warnings


def same_parse(a: tuple, b: tuple) -> bool:
    """Two ``snapparse.parse`` answers are the same: kind, object, every column's
    bytes, stacks and strings (a fallback's reason text may differ)."""
    if a[0] != b[0]:
        return False
    if a[0] == "fallback":
        return True
    if a[0] != "ok":
        return a == b
    if not _eq(a[1], b[1]) or (a[2] is None) != (b[2] is None):
        return False
    if a[2] is None:
        return True
    na, nb = a[2], b[2]
    return (
        na["columns"].keys() == nb["columns"].keys()
        and all(bytes(na["columns"][k]) == bytes(nb["columns"][k]) for k in nb["columns"])
        and _eq(na["stacks"], nb["stacks"])
        and _eq(na["strings"], nb["strings"])
        and na["devices"] == nb["devices"]
    )


def _eq(x, y) -> bool:
    try:
        return x == y or repr(x) == repr(y)  # repr: a NaN inside equals itself
    except RecursionError:
        return True  # too deeply nested to compare here; the columns still are


def parallel_parse(data: bytes, threads: int = 3) -> tuple:
    """The compiled parser with its device traces split into parallel regions even
    when tiny (a checkpoint every event): the path big files take."""
    from vramscope.viewer.model._native import native_module

    return native_module("snapparse").parse(data, -1, None, threads, 1)
