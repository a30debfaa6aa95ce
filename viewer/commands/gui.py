"""``vramscope [FILE] [--screenshot OUT.png [--view NAME] [--color-by MODE] [--device N]
[--at EVENT] [--timeout SECONDS]]``: the desktop viewer.

``FILE`` may be ``ssh://[user@]host[:port]/path``: a snapshot on another machine, read
through the user's own ``ssh`` (:mod:`vramscope.viewer.model.io.remote`).

Qt is imported here and in :mod:`vramscope.viewer._qt` only, so headless
commands never load it.
"""

from __future__ import annotations

import gc
import os
import sys

# ``--view`` of ``--screenshot``: the main window with one of its bottom tabs, or a Tools
# panel run (the same names as vramscope.viewer._qt.app.VIEWS, which draws them).
SCREENSHOT_VIEWS = {
    "blocks": "the main window as it opens (the Blocks tab; the default)",
    "calltree": "the main window, its Call tree tab",
    "categories": "the main window, its What it is tab (View > What the memory is)",
    "diagnosis": "the Diagnosis panel (Tools > Diagnosis), run",
    "whatif": "the What-if panel (Tools > What-if), run with its default settings",
}
COLOR_MODES = ("site", "category")
AT_WORDS = ("peak", "oom", "latest")
SHOT_OPTIONS = ("view", "color_by", "device", "at", "timeout")


def shot_option_error(args) -> str | None:
    """The one-line error of ``--view``, ``--color-by``, ``--device``, ``--at`` or
    ``--timeout`` (their form; what the file holds is checked once it is loaded)."""
    given = [name for name in SHOT_OPTIONS if getattr(args, name, None) is not None]
    if given and not getattr(args, "screenshot", None):
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        return f"{flags}: only with --screenshot OUT.png"
    view = getattr(args, "view", None)
    if view is not None and view not in SCREENSHOT_VIEWS:
        return f"--view {view}: not a view (one of: {', '.join(SCREENSHOT_VIEWS)})"
    color = getattr(args, "color_by", None)
    if color is not None and color not in COLOR_MODES:
        return f"--color-by {color}: one of: {', '.join(COLOR_MODES)}"
    device = getattr(args, "device", None)
    if device is not None and device not in ("all", "host") and not _whole(device):
        return f"--device {device}: a device number (0, 1, ...), all or host"
    at = getattr(args, "at", None)
    if at is not None and at not in AT_WORDS and not _whole(at):
        return f"--at {at}: an event number (0-based), peak, oom or latest"
    timeout = getattr(args, "timeout", None)
    if timeout is not None:
        try:
            seconds = float(timeout)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            return f"--timeout {timeout}: a number of seconds above 0"
    return None


def _whole(text: str) -> bool:
    return text.isascii() and text.isdigit()


def shot_options(args):
    """The :class:`~vramscope.viewer._qt.app.ShotOptions` of ``args`` (checked)."""
    from .._qt.app import ShotOptions

    timeout = getattr(args, "timeout", None)
    return ShotOptions(
        view=getattr(args, "view", None) or "blocks",
        color_by=getattr(args, "color_by", None),
        device=getattr(args, "device", None),
        at=getattr(args, "at", None),
        **({"timeout_s": float(timeout)} if timeout is not None else {}),
    )


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
    remote = bool(path) and str(path).startswith("ssh://")
    error = shot_option_error(args)
    if error:
        print(f"vramscope: error: {error}", file=sys.stderr)
        return 2
    if remote and out:
        print("vramscope: error: --screenshot needs a local file (copy it first)", file=sys.stderr)
        return 2
    if not out:
        # Qt aborts the process (exit 134, five lines about xcb) where it cannot open a
        # window: said in one line first, with what to do instead.
        from ..startup.display import window_error

        error = window_error()
        if error:
            print(f"vramscope: error: {error}", file=sys.stderr)
            return 2
    if path and not remote and os.path.isfile(path):
        # Before Qt, pyqtgraph and numpy are imported (~0.45 s): the parse runs meanwhile on
        # a thread (compiled, without the GIL, on the other cores), and the document is
        # built on another thread as soon as it is parsed; the window's loader picks it up.
        from ..startup import parse_ahead, preload

        parse_ahead.start(path, use_cache=os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0"))
        preload.start(path)
    try:
        from .._qt import app as qtapp
    except ImportError as exc:  # pragma: no cover - broken installs
        print(f"vramscope: error: the GUI needs PySide6 and pyqtgraph ({exc})", file=sys.stderr)
        return 2
    from ..early.parse_handover import stamp

    stamp("qt_imported")  # (make bench's stages: the GUI thread's imports end here)
    if out:
        # Headless render: no window ever appears, and no display is needed.
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        code, error = qtapp.screenshot(path, out, shot_options(args))
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
        remote_open.open_remote(window, str(path))
    elif path and os.path.isdir(path):
        window.open_ranks(path)  # a torchrun directory: the rank overview
    elif path:
        window.open_file(path)
    return app.exec()
