"""The allocator's split decision has one home (allocator_rules.should_split): the Python
replay and the what-if simulator call it, and the C loops apply the same rule
(_native/common/allocator_rules.h) with the sizes they are handed (their C = Python
equality is tested on real and random traces)."""

from __future__ import annotations

import ast
from pathlib import Path

from vramscope.viewer.model.core import allocator_rules as rules

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def test_the_split_rule():
    # The small pool and expandable segments keep any remainder of at least one block.
    assert rules.should_split(512, 512, True, None)
    assert not rules.should_split(0, 512, True, None)
    # The large pool keeps only remainders over 1 MiB...
    assert rules.should_split(MIB + 512, 20 * MIB, False, None)
    assert not rules.should_split(MIB, 20 * MIB, False, None)
    # ... and never splits blocks for requests at or over max_split_size.
    assert not rules.should_split(8 * MIB, 64 * MIB, False, 64 * MIB)
    assert rules.should_split(8 * MIB, 63 * MIB, False, 64 * MIB)


def test_the_replay_and_the_simulator_use_the_one_rule():
    callers = []
    for rel in ("viewer/model/replay/state.py", "viewer/model/whatif/simulator.py"):
        tree = ast.parse((ROOT / rel).read_text())
        calls = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and getattr(n.func, "attr", None) == "should_split"
            and getattr(n.func.value, "id", None) == "rules"
        ]
        callers.append((rel, len(calls)))
    assert all(n == 1 for _, n in callers), callers


def test_the_c_loops_declare_no_sizes_of_their_own():
    # They are handed allocator_rules.native_rules (_native/common/allocator_rules.h).
    native = ROOT / "viewer/model/_native"
    sources = [*native.glob("*.c"), *native.glob("common/*.h")]
    assert len(sources) >= 4
    for path in sources:
        text = path.read_text()
        for name in ("MIN_BLOCK_SIZE", "SMALL_SIZE", "SMALL_BUFFER", "LARGE_BUFFER", "ROUND_LARGE"):
            assert f"#define {name}" not in text, path
