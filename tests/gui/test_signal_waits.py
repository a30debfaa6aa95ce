"""No test waits on a worker's ``progressed`` with a pytest-qt blocker.

A worker thread emits ``progressed`` many times; each emission is queued to the GUI thread.
A blocker (``qtbot.waitSignal``) disconnects on the first one it receives, but the calls
already queued still run, and PySide then calls into the blocker after it was freed: a
segmentation fault that takes the whole test process down (seen under load on CI).  Tests
watch what the window's own handler shows instead (its progress words, its bar).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPEATED = {"progressed"}


def blocker_waits_on_repeated_signals(source: str) -> list[int]:
    """Line numbers of ``qtbot.waitSignal(x.progressed...)`` / ``waitSignals([... ])`` calls."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("waitSignal", "waitSignals", "assertNotEmitted"):
            continue
        for arg in ast.walk(ast.Module(body=[ast.Expr(a) for a in node.args], type_ignores=[])):
            if isinstance(arg, ast.Attribute) and arg.attr in REPEATED:
                lines.append(node.lineno)
                break
    return lines


def test_no_blocker_waits_on_a_workers_progress():
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in blocker_waits_on_repeated_signals(path.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_the_check_finds_one():
    bad = "with qtbot.waitSignal(job.progressed, timeout=10):\n    pass\n"
    good = "with qtbot.waitSignal(job.done, timeout=10):\n    pass\n"
    assert blocker_waits_on_repeated_signals(bad) == [1]
    assert blocker_waits_on_repeated_signals(good) == []
