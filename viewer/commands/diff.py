"""``vramscope diff A B [--json]``: what grew between two snapshots (issue 9)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    print("vramscope: error: diff is not implemented yet", file=sys.stderr)
    return 2
