"""``vramscope record [options] script.py [args...]``: the capture runner.

The same as ``python -m vramscope.capture``.  Imported only when used, so the
viewer itself never imports torch.
"""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from vramscope.capture.runner import main as run

    return run(argv, prog="vramscope record")
