"""Entry point of the frozen app (PyInstaller): the same as the ``vramscope`` command."""

import sys

from vramscope.viewer.cli import main

if __name__ == "__main__":
    sys.exit(main())
