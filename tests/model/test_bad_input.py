"""Bad input gets one clear line or a warning naming what was skipped."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.bad_inputs import PWNED, cases
from tests.parser_paths import parser_path  # noqa: F401 - autouse: both parsers
from vramscope.viewer.model import SnapshotError, UnsafeSnapshotError, load_bytes

CASES = list(cases())


@pytest.mark.parametrize("name,data,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_or_warned(name, data, expect):
    if os.path.exists(PWNED):
        os.unlink(PWNED)
    if expect == "error":
        with pytest.raises(SnapshotError) as info:
            load_bytes(data)
        message = str(info.value)
        assert message and "\n" not in message and len(message) < 300
        assert "Traceback" not in message
    else:
        snap = load_bytes(data)
        assert snap.warnings, "a skipped entry must be named in a warning"
        assert all("\n" not in w for w in snap.warnings)
    assert not os.path.exists(PWNED), "the pickle executed code"


@pytest.mark.parametrize(
    "name", ["global-reduce", "stack-global", "protocol0-inst", "newobj-build"]
)
def test_executable_objects_refused_with_clear_message(name):
    data = dict((c[0], c[1]) for c in CASES)[name]
    with pytest.raises(UnsafeSnapshotError) as info:
        load_bytes(data)
    assert str(info.value).startswith(
        "refusing to load: the file contains executable objects, "
        "so it is not a plain memory snapshot"
    )


def test_warnings_name_what_was_skipped():
    data = dict((c[0], c[1]) for c in CASES)
    snap = load_bytes(data["unknown-action"])
    assert any("unknown action 'teleport'" in w for w in snap.warnings)
    snap = load_bytes(data["unknown-state"])
    assert any("unknown state 'haunted'" in w for w in snap.warnings)
    assert (snap.blocks.state == 3).sum() == 1  # kept, not lost


# VmHWM is this process image's peak RSS; ru_maxrss would carry over the
# parent's peak across fork + exec.
MEMORY_PROBE = """
import sys
from vramscope.viewer.model import load_bytes, SnapshotError
data = sys.stdin.buffer.read()
try:
    load_bytes(data)
except SnapshotError:
    pass
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(int(line.split()[1]) // 1024)
"""


@pytest.mark.parametrize(
    "name",
    [
        "memo-bomb",
        "memo-bomb-text",
        "absurd-unicode-length",
        "absurd-bytes8-length",
        "empty-list-flood",
    ],
)
def test_hostile_input_memory_is_bounded(name):
    """CPython's own unpickler needs 16 GiB for 'memo-bomb' (9 bytes); we need ~nothing."""
    data = dict((c[0], c[1]) for c in CASES)[name]
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE],
        input=data,
        capture_output=True,
        timeout=120,
        check=True,
    )
    peak_mib = int(out.stdout.split()[-1])
    assert peak_mib < 400, f"{name}: peak RSS {peak_mib} MiB"


def test_decompression_bomb_is_refused(monkeypatch):
    import lzma

    monkeypatch.setenv("VRAMSCOPE_MAX_DECOMPRESSED_BYTES", str(1 << 20))
    bomb = lzma.compress(b"N" * (8 << 20))
    with pytest.raises(SnapshotError, match="decompression bomb"):
        load_bytes(bomb)


def test_default_decompression_cap_scales_with_size():
    from vramscope.viewer.model.io.source import decompressed_cap

    assert decompressed_cap(1000) == 1 << 30
    assert decompressed_cap(100 << 20) == 200 * (100 << 20)
