"""``vramscope [FILE] [--screenshot OUT.png]``: the desktop viewer.

``FILE`` may be ``ssh://[user@]host[:port]/path``: a snapshot on another machine, read
through the user's own ``ssh`` (:mod:`vramscope.viewer.model.io.remote`).

Qt is imported here and in :mod:`vramscope.viewer._qt` only, so headless
commands never load it.
"""

from __future__ import annotations

import gc
import os
import sys


def main(args) -> int:
    # Starting the window allocates ~10^6 objects that live as long as it does (Qt and
    # pyqtgraph classes, their enums, numpy): the cyclic GC would walk them ~150 times on
    # the way (~30 ms) and free almost nothing.  It is off until the first window is up.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(args, collecting)
    finally:
        if collecting:
            gc.enable()


def _main(args, collecting: bool) -> int:
    path = getattr(args, "file", None)
    out = getattr(args, "screenshot", None)
    # The viewer does no matrix algebra: one BLAS thread starts ~30 ms faster.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    remote = bool(path) and str(path).startswith("ssh://")
    if remote and out:
        print("vramscope: error: --screenshot needs a local file (copy it first)",
              file=sys.stderr)
        return 2
    if path and not remote and os.path.isfile(path):
        # Before Qt, pyqtgraph and numpy are imported (~0.45 s): the parse runs meanwhile in
        # a forked child, on another core (first: fork before any thread exists), and the
        # document is built on a thread as soon as it is parsed; the window's loader
        # picks it up.
        from ..startup import parse_ahead, preload

        parse_ahead.start(path, use_cache=os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0"))
        preload.start(path)
    try:
        from .._qt import app as qtapp
    except ImportError as exc:  # pragma: no cover - broken installs
        print(f"vramscope: error: the GUI needs PySide6 and pyqtgraph ({exc})", file=sys.stderr)
        return 2
    if out:
        # Headless render: no window ever appears, and no display is needed.
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        code, error = qtapp.screenshot(path, out)
        if code:
            print(f"vramscope: error: {error}", file=sys.stderr)
        return code
    from PySide6.QtCore import QTimer

    from .._qt.live import remote_open

    app = qtapp.application(sys.argv[:1])  # (wires File > Attach and File > Open remote)
    window = qtapp.MainWindow()
    window.show()
    if collecting:
        QTimer.singleShot(0, gc.enable)  # once the event loop runs: the window is up
    if remote:
        remote_open.open_remote(window, path)
    elif path and os.path.isdir(path):
        window.open_ranks(path)  # a torchrun directory: the rank overview
    elif path:
        window.open_file(path)
    return app.exec()
