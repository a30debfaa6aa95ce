"""``python -m vramscope.capture [options] script.py [args ...]``: see :mod:`.runner`."""

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
