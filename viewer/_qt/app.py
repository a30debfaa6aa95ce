"""QApplication setup and the headless screenshot path."""

from __future__ import annotations

import os
import sys

import pyqtgraph as pg
from PySide6.QtCore import (QCoreApplication, QEventLoop, QSize, QtMsgType, QTimer,
                            qInstallMessageHandler)
from PySide6.QtWidgets import QApplication

from ..early.parse_handover import stamp
from .main_window import MainWindow, app_icon
from .widgets import settings as st
from .widgets.png import save_png

SCREENSHOT_SIZE = QSize(1440, 900)


def application(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance()
    if app is None:
        app = QApplication(list(argv) if argv is not None else [sys.argv[0]])
    QCoreApplication.setOrganizationName(st.ORGANIZATION)
    QCoreApplication.setApplicationName(st.APPLICATION)
    app.setApplicationDisplayName("vramscope")
    app.setDesktopFileName("vramscope")  # Wayland: match the menu entry and its icon
    app.setWindowIcon(app_icon())
    pg.setConfigOptions(antialias=False, useOpenGL=False)
    MainWindow.attach_handler = _open_attach  # the composition root wires File > Attach
    MainWindow.remote_handler = _open_remote  # ... and File > Open remote
    return app


def _open_remote(window: MainWindow):
    from .live.remote_open import open_remote_dialog  # (ssh: imported on first use)

    return open_remote_dialog(window)


def _open_attach(window: MainWindow):
    from .live.controller import open_attach_dialog  # (its ~10 ms of imports on first use)

    return open_attach_dialog(window)


def run_live(target: str) -> int:
    """``vramscope attach TARGET --gui``: a live window as the whole application."""
    from .live.controller import LiveController

    app = application()
    live = LiveController(target)
    live.window.show()
    return app.exec()


def wait_for_load(window, timeout_ms: int = 0) -> str:
    """Run an event loop until the window's current load ends; its outcome.

    Any window with ``is_loading()`` and a ``loadFinished(str)`` signal (the main
    window, the rank overview).
    """
    if not window.is_loading():
        return "idle"
    outcome = {"value": "timeout"}
    loop = QEventLoop()

    def done(result: str) -> None:
        outcome["value"] = result
        loop.quit()

    window.loadFinished.connect(done)
    if timeout_ms:
        QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    window.loadFinished.disconnect(done)
    return outcome["value"]


def render_window(window, size: QSize = SCREENSHOT_SIZE):
    """Lay the window out at ``size`` and grab it (a QPixmap of exactly that size)."""
    window.resize(size)
    window.show()
    app = QApplication.instance()
    for _ in range(3):
        app.processEvents()
    window.resize(size)
    if isinstance(window, MainWindow):
        window.map.home()
    app.processEvents()
    return window.grab()


def grab_main_window(window: MainWindow):
    """The main window of :func:`screenshot` (shown at its final size, updates off),
    settled and grabbed in one paint."""
    app = QApplication.instance()
    for _ in range(3):  # layout requests and resizes of the loaded views: nothing paints
        app.processEvents()
    window.map.home()
    window.timeline.flush()  # its stacked allocations for this size: now, not after a debounce
    app.processEvents()
    window.setUpdatesEnabled(True)
    wiring = getattr(window, "categories_wiring", None)
    thread = wiring.panel.thread if wiring is not None else None
    if thread is None or thread.isFinished():
        pixmap = window.grab()
        stamp("first_paint")
        return pixmap
    # What the memory is (the categories) is built off the GUI thread, after the window first
    # shows: the first paint (what a user sees first, stamped for ``make bench``) does
    # not wait for it; the PNG does - it is painted again once the breakdown is drawn.
    window.grab()
    stamp("first_paint")
    wiring.settle()
    window.map.home()
    window.timeline.flush()
    app.processEvents()
    return window.grab()


def _save(window, out: str, pixmap=None) -> tuple[int, str]:
    """Write ``pixmap`` (else :func:`render_window` of ``window``) to ``out`` as a PNG."""
    image = (pixmap if pixmap is not None else render_window(window)).toImage()
    if not save_png(image, out):
        return 2, f"{out}: cannot write the PNG"
    return 0, ""


def quiet_qt_messages(mode, context, message) -> None:
    """Headless renders keep stderr for vramscope's own one-line errors."""
    if mode in (QtMsgType.QtCriticalMsg, QtMsgType.QtFatalMsg):
        sys.stderr.write(message + "\n")


def screenshot(path: str | None, out: str) -> tuple[int, str]:
    """Load ``path`` (if any), render the main window to ``out``; (exit code, error).

    A directory of per-rank snapshots renders the rank overview instead.
    """
    qInstallMessageHandler(quiet_qt_messages)
    application()
    if path and os.path.isdir(path):
        try:
            return _screenshot_ranks(path, out)
        finally:
            qInstallMessageHandler(None)
    window = MainWindow(persist=False)
    try:
        # Laid out at its final size while the document loads, not after: the loaded
        # views are then built for that size once.  Updates stay off until the grab: the
        # window is painted once, into the PNG (a headless window has no screen to update).
        window.resize(SCREENSHOT_SIZE)
        window.setUpdatesEnabled(False)
        window.show()
        QApplication.instance().processEvents()
        if path:
            window.open_file(path)
            result = wait_for_load(window)
            if result != "loaded":
                return 2, window.last_error or f"{path}: load {result}"
            if window.error_box is not None:
                window.error_box.close()
        return _save(window, out, grab_main_window(window))
    finally:
        window.close()
        window.deleteLater()
        qInstallMessageHandler(None)


def _screenshot_ranks(directory: str, out: str) -> tuple[int, str]:
    from .ranks.window import RanksWindow

    window = RanksWindow()
    try:
        window.open_directory(directory)
        result = wait_for_load(window)
        if window.last_error or result not in ("loaded", "idle"):
            return 2, window.last_error or f"{directory}: load {result}"
        return _save(window, out)
    finally:
        window.close()
        window.deleteLater()
