"""``vramscope --self-test``: passes on a working install, one line and exit 1 otherwise.

The frozen app runs the same code; ``make package`` runs it there (and
tests/packaging/test_frozen_app.py does when an archive has been built).
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys

import pytest

from vramscope.viewer.commands import selftest


def _env() -> dict:
    env = dict(os.environ)
    env.pop("QT_QPA_PLATFORM", None)  # the self-test must go offscreen by itself
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return env


def test_self_test_passes(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "--self-test"],
        capture_output=True,
        text=True,
        timeout=180,
        env=_env(),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("self-test passed: ")
    assert "verdict 'fragmentation'" in out.stdout
    assert "7 figures equal memory_stats" in out.stdout
    assert "1440x900" in out.stdout
    for name in ("vramscope", "Qt", "PySide6", "pyqtgraph", "numpy"):
        assert f"{name} " in lines[-2], name  # the About line
    assert out.stderr == ""


def test_self_test_keeps_the_render_with_screenshot(tmp_path):
    png = tmp_path / "render.png"
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "--self-test", "--screenshot", str(png)],
        capture_output=True,
        text=True,
        timeout=180,
        env=_env(),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1440, 900)


def _fails(capsys) -> str:
    code = selftest.main(argparse.Namespace(screenshot=None))
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("vramscope: self-test failed: ")
    return lines[0]


def test_wrong_figures_fail_in_one_line(monkeypatch, capsys):
    real = selftest.expected_stats

    def off_by_one(path):
        expected = real(path)
        expected["reserved_bytes"] += 1
        return expected

    monkeypatch.setattr(selftest, "expected_stats", off_by_one)
    assert "reserved_bytes" in _fails(capsys)


def test_wrong_verdict_fails_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(selftest, "EXPECTED_VERDICT", "capacity")
    assert "verdict is 'fragmentation'" in _fails(capsys)


def test_missing_example_fails_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(selftest, "EXAMPLE", "no_such_example.pickle")
    assert "missing" in _fails(capsys)


def test_unexpected_error_fails_in_one_line(monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(selftest, "check_model", boom)
    assert _fails(capsys).endswith("RuntimeError: something broke")


@pytest.mark.parametrize("name", ["reserved_bytes", "segment_count", "allocation_count"])
def test_sidecar_names_the_allocator_counters(name):
    expected = selftest.expected_stats(selftest.assets_dir() / selftest.SIDECAR)
    assert isinstance(expected[name], int) and expected[name] > 0
