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

from vramscope.viewer.model import fast_pickle
from vramscope.viewer.model._native import PURE_PYTHON_ENV

PATHS = ["native", "python"]


@pytest.fixture(params=PATHS, autouse=True)
def parser_path(request, monkeypatch):
    if request.param == "native":
        monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
        if not fast_pickle.available():
            pytest.skip("the compiled parser is not built (tests/model/test_native_parser.py "
                        "fails for that unless VRAMSCOPE_BUILD_NATIVE=0)")
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
    tables = [(table, getattr(a, table), getattr(b, table)) for table in (
        "segments", "blocks", "trace", "annotations", "frames", "stacks", "alloc_annotations")]
    assert (a.host is None) == (b.host is None), "host memory on one path only"
    if a.host is not None:
        assert a.host.pools == b.host.pools
        tables += [(f"host.{t}", getattr(a.host, t), getattr(b.host, t))
                   for t in ("segments", "blocks", "trace", "alloc_annotations")]
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
