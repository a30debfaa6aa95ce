"""Long sessions stay alive.

PySide6-Essentials 6.12.0 on Python < 3.12 drops a reference to None/True on
every void call and signal emit, so a few thousand pans abort the process;
pyproject.toml excludes that build there.  This test would catch it again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.slow
def test_thousands_of_view_changes_do_not_abort():
    """Run in a fresh interpreter: on affected bindings this aborts."""
    code = textwrap.dedent("""
        import os, sys
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        from vramscope.viewer._qt.app import application
        import pyqtgraph as pg
        app = application()
        w = pg.PlotWidget()
        vb = w.getViewBox()
        for i in range(20000):
            vb.setRange(xRange=(0, 5 + i % 7), yRange=(0, 3), padding=0)
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "ok"


def test_cli_screenshot_error_is_one_line_on_stderr(tmp_path):
    """`vramscope BAD --screenshot OUT` from a shell: exit 2, exactly one stderr line."""
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"garbage")
    out = tmp_path / "out.png"
    run = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", os.fspath(bad), "--screenshot", os.fspath(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert run.returncode == 2
    assert run.stderr.startswith(f"vramscope: error: {bad}: ")
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not out.exists()
