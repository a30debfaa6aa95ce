"""The native gate (VRAMSCOPE_REQUIRE_NATIVE=1): a missing C extension fails, never skips.

Real subprocesses: pytest on a test that needs an extension which is "not
built", and setup.py compiling with a flag that breaks the compile; each with
and without the gate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NEEDS_MISSING = textwrap.dedent("""
    from tests import native_gate

    @native_gate.needs(False, "the frobnicator extension is not built")
    def test_compares_c_with_python():
        pass

    def test_skips_in_a_fixture():
        native_gate.skip_unless(False, "the frobnicator extension is not built")
""")


def _pytest(tmp_path: Path, gate: str) -> subprocess.CompletedProcess:
    test = tmp_path / "test_needs_missing.py"
    test.write_text(NEEDS_MISSING)
    env = dict(os.environ, VRAMSCOPE_REQUIRE_NATIVE=gate, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )


def test_without_the_gate_a_missing_extension_skips(tmp_path):
    out = _pytest(tmp_path, "")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 skipped" in out.stdout


def test_with_the_gate_a_missing_extension_fails(tmp_path):
    out = _pytest(tmp_path, "1")
    assert out.returncode != 0
    assert "VRAMSCOPE_REQUIRE_NATIVE=1 requires it" in out.stdout + out.stderr
    assert "skipped" not in out.stdout


def _build(tmp_path: Path, gate: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        VRAMSCOPE_REQUIRE_NATIVE=gate,
        VRAMSCOPE_NATIVE_CFLAGS="-include vramscope_no_such_header.h",
    )
    return subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            str(tmp_path / "lib"),
            "--build-temp",
            str(tmp_path / "tmp"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )


def test_a_failed_compile_warns_without_the_gate(tmp_path):
    out = _build(tmp_path, "")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pure-Python fallback" in out.stderr


def test_a_failed_compile_fails_the_build_under_the_gate(tmp_path):
    out = _build(tmp_path, "1")
    assert out.returncode != 0
    assert "VRAMSCOPE_REQUIRE_NATIVE=1 requires the C extensions" in out.stdout + out.stderr
