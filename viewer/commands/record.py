"""``vramscope record [options] script.py [args...]``: the capture runner.

The same as ``python -m vramscope.capture``.  Imported only when used, so the
viewer itself never imports torch.  Installers ship the viewer alone; there
this command says where capture lives instead of failing.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    try:
        from vramscope.capture.runner import main as run
    except ImportError:
        print("vramscope: error: recording needs the capture side, which runs next to torch: "
              "pip install vramscope in the training environment, then "
              "python -m vramscope.capture ...", file=sys.stderr)
        return 2
    return run(argv, prog="vramscope record")
