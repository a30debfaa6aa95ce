"""``python capture_fakerun.py ARGS`` = ``python -m vramscope.capture ARGS`` on a fake GPU.

The child's CUDA starts uninitialised, as in a real process, and the script
under test reaches the fake through ``vramscope.capture.backend.get_backend()``.
"""

import os
import sys

sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

from capture_fakes import FakeBackend

from vramscope.capture import backend, runner

backend.set_backend(FakeBackend(initialized=False))
sys.exit(runner.main(sys.argv[1:]))
