"""``vramscope --self-test``: check an installed (or frozen) app works (issue 7)."""

from __future__ import annotations

import sys


def main(args) -> int:
    print("vramscope: error: --self-test is not implemented yet", file=sys.stderr)
    return 2
