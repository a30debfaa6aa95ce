"""The CLI's indented JSON (commands.json_text) is json.dumps(indent=1), byte for byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramscope.viewer.commands.json_text import dumps_indented
from vramscope.viewer.commands.summary import summarize_loaded
from vramscope.viewer.model import load_snapshot

DATA = Path(__file__).resolve().parents[1] / "data"

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)  # quotes, backslashes, newlines, braces, non-ASCII
    | st.sampled_from(["}", "},\n  {", '"', "\n", "{", "]"])
)
keys = st.text(max_size=6) | st.integers(-5, 5) | st.booleans() | st.none()
records = st.lists(st.dictionaries(keys, scalars, min_size=1, max_size=4), max_size=4)
values = st.recursive(
    scalars | records,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(keys, inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_same_text_as_the_standard_library(obj):
    assert dumps_indented(obj) == json.dumps(obj, indent=1)


@pytest.mark.parametrize(
    "obj",
    [
        {},
        [],
        [[]],
        [{}],
        [{"a": 1}, {}],
        [{"a": 1}, [2]],
        {"rows": [{"a": "}", "b": 1}, {"a": "x\n", "b": -0.0}], "n": math.inf},
        {1: {2: [3, {"k": None}]}, 2.5: (1, 2), False: [], None: "é"},
    ],
)
def test_edges(obj):
    assert dumps_indented(obj) == json.dumps(obj, indent=1)


@pytest.mark.parametrize("name", ["gpt2_oom.pickle", "fragmentation_oom.pickle"])
def test_a_real_summary(name):
    snap = load_snapshot(DATA / name, use_cache=False)
    summary = summarize_loaded(snap, name, None, None)
    assert dumps_indented(summary) == json.dumps(summary, indent=1)


def test_unencodable_is_refused_alike():
    with pytest.raises(TypeError):
        json.dumps({"a": [object()]}, indent=1)
    with pytest.raises(TypeError):
        dumps_indented({"a": [object()]})
