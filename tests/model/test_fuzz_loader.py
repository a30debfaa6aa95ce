"""Property-based fuzzing of the loader: any bytes give a Snapshot or a
one-line SnapshotError -- never another exception, a hang or runaway memory.
Runs through both parsers (tests/parser_paths.py); the long differential run
of the compiled parser is tests/fuzz/fuzz_parser.py.

Mutations start from real snapshots so the fuzzer reaches deep into the
schema code, not only the first opcode."""

from __future__ import annotations

import pickle

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import DATA
from tests.parser_paths import parallel_parse, parser_path, same_parse  # noqa: F401 - autouse
from vramscope.viewer.model import Snapshot, SnapshotError, load_bytes
from vramscope.viewer.model.io import fast_pickle

SEED = (DATA / "side_stream_pending.pickle").read_bytes()
SEED_P2 = pickle.dumps(pickle.loads(SEED), protocol=2)  # trusted test data
FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


def check(data: bytes) -> None:
    if fast_pickle.available():  # the parallel sections answer as the serial VM
        from vramscope.viewer.model._native import native_module

        assert same_parse(parallel_parse(data), native_module("snapparse").parse(data))
    try:
        snap = load_bytes(data)
    except SnapshotError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert isinstance(snap, Snapshot)
    assert all("\n" not in w for w in snap.warnings)


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes(data):
    check(data)


@FUZZ
@given(
    st.sampled_from([SEED, SEED_P2]),
    st.lists(
        st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)),
        min_size=1,
        max_size=8,
    ),
)
def test_mutated_real_snapshot(seed, edits):
    data = bytearray(seed)
    for pos, value in edits:
        data[pos % len(data)] = value
    check(bytes(data))


@FUZZ
@given(
    st.sampled_from([SEED, SEED_P2]),
    st.integers(min_value=0),
    st.integers(min_value=0),
    st.binary(max_size=64),
)
def test_spliced_real_snapshot(seed, start, length, insert):
    start %= len(seed)
    end = min(len(seed), start + length % 512)
    check(seed[:start] + insert + seed[end:])
