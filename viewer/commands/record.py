"""``vramscope record [options] script.py [args...]``: the capture runner.

The same as ``python -m vramscope.capture``.  Imported only when used, so the
viewer itself never imports torch.  Installers ship the viewer alone; there
this command answers (``--help`` too) with one line saying where capture
lives instead of failing.
"""

from __future__ import annotations

import sys

from ..early.install_hint import install_hint

ELSEWHERE = (
    "capture runs in the training environment, next to torch: there, "
    f"{install_hint('capture')}, then python -m vramscope.capture "
    "[--out DIR] script.py [args ...] (this installation is the viewer only)"
)


def main(argv: list[str]) -> int:
    try:
        from vramscope.capture.runner import main as run
    except ImportError:
        if argv[:1] in (["-h"], ["--help"]):
            print(f"vramscope record: {ELSEWHERE}")
            return 0
        print(f"vramscope: error: record: {ELSEWHERE}", file=sys.stderr)
        return 2
    return run(argv, prog="vramscope record")
