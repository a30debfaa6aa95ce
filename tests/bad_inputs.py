"""A catalogue of bad snapshot files: damaged, random, hostile, wrong shape.

Each entry is (name, bytes, expectation) where expectation is "error" (the
loader must refuse with a one-line SnapshotError) or "warn" (it loads what is
sound and names what it skipped).
"""

from __future__ import annotations

import gzip
import lzma
import os
import pickle
import random
import struct
from pathlib import Path

DATA = Path(__file__).parent / "data"
PWNED = "/tmp/vramscope-test-pwned"


class _Evil:
    """Pickles to GLOBAL/REDUCE that would run a shell command."""

    def __reduce__(self):
        return (os.system, (f"touch {PWNED}",))


class _Stateful:
    """Pickles to NEWOBJ + BUILD."""

    def __init__(self):
        self.x = 1


def _real() -> bytes:
    return (DATA / "side_stream_pending.pickle").read_bytes()


def _snapshot_obj():
    from vramscope.viewer.model.io.safe_pickle import safe_loads

    return safe_loads(_real())


def _mutated(fn) -> bytes:
    obj = _snapshot_obj()
    fn(obj)
    return pickle.dumps(obj, protocol=4)


def _deep_list(depth: int) -> bytes:
    return b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b"."


def _deep_list_under_segments(depth: int) -> bytes:
    """{'segments': [[[...]]]}: deep nesting where the loader looks for segments."""
    return b"\x80\x04}\x8c\x08segments" + b"]" * depth + b"a" * (depth - 1) + b"s."


def cases():
    rng = random.Random(1234)
    real = _real()
    yield "empty", b"", "error"
    yield "truncated-1", real[:1], "error"
    yield "truncated-half", real[: len(real) // 2], "error"
    yield "truncated-last-byte", real[:-1], "error"
    yield "random", bytes(rng.getrandbits(8) for _ in range(4096)), "error"
    yield (
        "random-after-proto",
        b"\x80\x04" + bytes(rng.getrandbits(8) for _ in range(4096)),
        "error",
    )
    yield "text", b"Just some notes about the run\nloss went down\n", "error"
    yield "json-garbage", b'{"segments": [1, 2', "error"
    yield "json-not-snapshot", b'{"hello": "world"}', "error"
    yield "pickle-int", pickle.dumps(42), "error"
    yield "pickle-dict-not-snapshot", pickle.dumps({"model": "resnet", "loss": 0.1}), "error"
    yield "pickle-list-not-segments", pickle.dumps([1, 2, 3]), "error"
    yield "global-reduce", pickle.dumps(_Evil(), protocol=2), "error"
    yield "stack-global", pickle.dumps(_Evil(), protocol=4), "error"
    yield "protocol0-inst", pickle.dumps(_Stateful(), protocol=0), "error"
    yield "newobj-build", pickle.dumps(_Stateful(), protocol=2), "error"
    yield "persistent-id", b"\x80\x02X\x01\x00\x00\x00xQ.", "error"
    yield "ext1", b"\x80\x02\x82\x01.", "error"
    yield "memo-bomb", b"\x80\x02Nr" + struct.pack("<I", 1 << 30) + b".", "error"
    yield "memo-bomb-text", b"(dp99999999999\nI42\n.", "error"
    yield "absurd-unicode-length", b"\x80\x04X" + struct.pack("<I", 0xFFFFFFF0) + b"abc.", "error"
    yield "absurd-bytes8-length", b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62) + b"x.", "error"
    yield "absurd-frame-length", b"\x80\x04\x95" + struct.pack("<Q", 1 << 60) + b"N.", "error"
    yield "empty-list-flood", b"\x80\x04" + b"]" * 3_000_000 + b".", "error"
    yield "none-flood", b"\x80\x04" + b"N" * 1_000_000 + b".", "error"
    yield "deep-nesting", _deep_list(200_000), "error"
    yield "deep-nesting-under-segments", _deep_list_under_segments(100_000), "warn"
    yield "gzip-truncated", gzip.compress(real)[:200], "error"
    yield "xz-truncated", lzma.compress(real)[:200], "error"
    yield "xz-corrupt", lzma.compress(real)[:40] + b"\x00" * 200, "error"
    yield (
        "unknown-action",
        _mutated(lambda o: o["device_traces"][0][0].update(action="teleport")),
        "warn",
    )
    yield (
        "unknown-state",
        _mutated(lambda o: o["segments"][0]["blocks"][0].update(state="haunted")),
        "warn",
    )
    yield "missing-size", _mutated(lambda o: o["segments"][0]["blocks"][0].pop("size")), "warn"
    yield "negative-size", _mutated(lambda o: o["device_traces"][0][3].update(size=-5)), "warn"
    yield "huge-int-size", _mutated(lambda o: o["device_traces"][0][3].update(size=10**40)), "warn"
    yield "segment-not-dict", _mutated(lambda o: o["segments"].append("segment?")), "warn"
    yield "frames-not-list", _mutated(lambda o: o["device_traces"][0][1].update(frames=7)), "warn"
    yield "segments-not-list", _mutated(lambda o: o.update(segments={"a": 1})), "warn"
