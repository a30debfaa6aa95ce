"""``python -m vramscope.viewer`` is the same as the ``vramscope`` command."""

import sys

from vramscope.viewer.cli import main

sys.exit(main())
