"""QApplication setup and the headless screenshot path."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import (
    QCoreApplication,
    QEventLoop,
    QSize,
    QTimer,
    QtMsgType,
    qInstallMessageHandler,
)
from PySide6.QtWidgets import QApplication, QSplitter

from ..early.parse_handover import stamp
from .main_window import MainWindow, app_icon
from .widgets import settings as st
from .widgets.png import save_png

SCREENSHOT_SIZE = QSize(1440, 900)
# What ``vramscope FILE --screenshot OUT.png --view NAME`` can show: the main window with
# one of its bottom tabs (Blocks, Call tree, What it is), or a Tools panel, run.  The
# command line offers the same names (commands.gui.SCREENSHOT_VIEWS; a test keeps them so).
VIEWS = ("blocks", "calltree", "categories", "diagnosis", "whatif")
COLOR_MODES = ("site", "category")  # View > Colour by category: off, on
SETTLE_TIMEOUT_S = 300.0  # how long a screenshot waits for the work off the GUI thread
# --view categories: the main window's timeline / map / bottom tabs and tabs / stack panel
CATEGORIES_SPLIT = [200, 190, 330]
CATEGORIES_BOTTOM = [1100, 340]


class ShotError(Exception):
    """A screenshot that cannot be taken as asked: its one-line reason."""


@dataclass
class ShotOptions:
    """What a screenshot shows (the command line's --view, --color-by, --device, --at,
    --timeout; checked for their form there, against the file here)."""

    view: str = "blocks"
    color_by: str | None = None  # None: as the window opens (by code site)
    device: str | None = None  # "N", "all" or "host"; None: as the window opens
    at: str | None = None  # "EVENT", "peak", "oom" or "latest"; None: as the window opens
    timeout_s: float = SETTLE_TIMEOUT_S


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


def open_and_wait(window: MainWindow, path: str) -> str | None:
    """Open ``path`` in ``window`` and wait for it to load; None once loaded, else the
    one-line error (a headless run has nobody to read the error box, which is closed)."""
    window.open_file(path)
    result = wait_for_load(window)
    if result != "loaded":
        return window.last_error or f"{path}: load {result}"
    if window.error_box is not None:
        window.error_box.close()
    return None


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


def wait_until(predicate, timeout_s: float) -> bool:
    """Run an event loop until ``predicate()`` holds (checked every 20 ms) or
    ``timeout_s`` pass; whether it holds.  The GUI thread keeps handling events (the
    workers' progress and results) meanwhile: it never blocks on a thread."""
    if predicate():
        return True
    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    timer = QTimer(interval=20)
    timer.timeout.connect(lambda: (predicate() or time.monotonic() > deadline) and loop.quit())
    timer.start()
    loop.exec()
    timer.stop()
    return bool(predicate())


def settle_categories(window, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Wait (an event loop) until the window's breakdown of what the memory is, built
    off the GUI thread, is drawn; :class:`ShotError` after ``timeout_s``."""
    wiring = getattr(window, "categories_wiring", None)
    if wiring is None:
        return
    wiring.start_deferred()  # (waiting for it: a build held back for a paint starts now)
    # Settled: the build's thread ended and its outcome (queued to this thread) is what
    # the header's "What it is" line and the tab show - not merely a finished thread.
    if not wait_until(wiring.settled, timeout_s):
        raise ShotError(
            f"the memory categories were not computed within {timeout_s:g} s "
            "(--timeout SECONDS to wait longer)"
        )


def grab_main_window(window: MainWindow, timeout_s: float = SETTLE_TIMEOUT_S):
    """The main window of :func:`screenshot` (shown at its final size, updates off),
    settled and grabbed in one paint; :class:`ShotError` when what the memory is was not
    computed within ``timeout_s``."""
    app = QApplication.instance()
    for _ in range(3):  # layout requests and resizes of the loaded views: nothing paints
        app.processEvents()
    window.map.home()
    window.timeline.flush()  # its stacked allocations for this size: now, not after a debounce
    app.processEvents()
    window.setUpdatesEnabled(True)
    wiring = getattr(window, "categories_wiring", None)
    if wiring is None or wiring.settled():
        pixmap = window.grab()
        stamp("first_paint")
        return pixmap
    # What the memory is (the categories) is built off the GUI thread, after the window first
    # shows: the first paint (what a user sees first, stamped for ``make bench``) does
    # not wait for it; the PNG does - it is painted again once the breakdown is drawn.
    window.grab()
    stamp("first_paint")
    settle_categories(window, timeout_s)
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


def screenshot(path: str | None, out: str, options: ShotOptions | None = None) -> tuple[int, str]:
    """Load ``path`` (if any), render the main window to ``out``; (exit code, error).

    ``options``: which view, colouring, device and moment (default: the window as it
    opens).  A directory of per-rank snapshots renders the rank overview instead.
    """
    opts = options or ShotOptions()
    qInstallMessageHandler(quiet_qt_messages)
    application()
    if path and os.path.isdir(path):
        try:
            if opts != ShotOptions(timeout_s=opts.timeout_s):
                return 2, (
                    f"{path}: a directory of ranks shows the rank overview: --view, "
                    "--color-by, --device and --at need a snapshot file"
                )
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
        stamp("window_shown")  # (make bench's stages: the empty window is up)
        if path:
            error = open_and_wait(window, path)
            if error is not None:
                return 2, error
        try:
            panel = show_view(window, opts)
            if panel is not None:
                return _save(panel, out, grab_panel(panel, opts))
            if opts.at is not None and window.vs.doc is not None:
                # The What it is tab shows its breakdown at the peak when it lands: at the
                # moment asked for instead, as the header (a cursor move after it landed).
                settle_categories(window, opts.timeout_s)
                window.categories_wiring.panel.set_cursor(window.vs.cursor_k)
            pixmap = grab_main_window(window, opts.timeout_s)
            if opts.color_by == "category":
                _check_category_colours(window)
            return _save(window, out, pixmap)
        except ShotError as exc:
            return 2, f"{path}: {exc}" if path else str(exc)
    finally:
        for w in list(window.aux_windows):  # (a Tools panel: its job cancelled)
            w.close()
        window.close()
        window.deleteLater()
        qInstallMessageHandler(None)


def show_view(window: MainWindow, opts: ShotOptions):
    """Drive ``window`` as a user would to what ``opts`` asks for: the device selector,
    the cursor (Timeline menu), View > Colour by category, then the tab (or the Tools
    panel, opened and run: returned).  :class:`ShotError` for what the file cannot show."""
    if opts.view not in VIEWS:
        raise ShotError(f"no view {opts.view!r} (one of: {', '.join(VIEWS)})")
    if opts.color_by not in (None, *COLOR_MODES):
        raise ShotError(f"no colouring {opts.color_by!r} (one of: {', '.join(COLOR_MODES)})")
    if window.vs.doc is None:
        if opts != ShotOptions(timeout_s=opts.timeout_s):
            raise ShotError("--view, --color-by, --device and --at need a snapshot file")
        return None
    if opts.device is not None:
        _choose_device(window, opts.device)
    if opts.at is not None:
        _move_cursor(window, opts.at)
    wiring = window.categories_wiring
    if opts.color_by is not None:
        if opts.color_by == "category" and window.vs.cursor_device is None:
            raise ShotError(
                "--color-by category needs the allocation history (a trace): "
                "this snapshot (device) has none"
            )
        wiring.color_action.setChecked(opts.color_by == "category")
    if opts.view == "blocks":
        window.tabs.setCurrentWidget(window.table)
    elif opts.view == "calltree":
        window.tabs.setCurrentWidget(window.calltree)
    elif opts.view == "categories":
        wiring.tab_action.trigger()  # View > What the memory is
        # The tab is what the picture is of: the splitters dragged to give it room (the
        # bottom area taller and wider, its category timeline as wide as its Leaks view).
        window.main_split.setSizes(CATEGORIES_SPLIT)
        window.bottom_split.setSizes(CATEGORIES_BOTTOM)
        app = QApplication.instance()
        for _ in range(3):  # (laid out at these sizes first: a splitter hands a later
            app.processEvents()  # resize out by its stretch factors)
        body = wiring.panel.findChild(QSplitter)
        if body is not None:
            half = max(body.width() // 2, 1)
            body.setSizes([half, half])
        leaks = wiring.panel.leaks.findChild(QSplitter)  # its table (Line, Function, ...)
        if leaks is not None:  # wider than its chart: the columns' names readable
            leaks.setSizes([max(leaks.width() * 3 // 5, 1), max(leaks.width() * 2 // 5, 1)])
    else:
        return _open_panel(window, opts.view)
    return None


def _choose_device(window: MainWindow, value: str) -> None:
    from ..model.analysis.figures import Selection
    from ..model.core.snapshot import HOST_DEVICE

    choices = window.vs.device_choices()
    names = ", ".join(
        "all" if d is None else "host" if d == HOST_DEVICE else str(d) for _, d in choices
    )
    device = None if value == "all" else HOST_DEVICE if value == "host" else int(value)
    if device not in [d for _, d in choices]:
        raise ShotError(f"no device {value} in this snapshot (--device: {names})")
    window.set_selection(Selection(device=device))  # (as the toolbar's device selector)


def _move_cursor(window: MainWindow, at: str) -> None:
    dev = window.vs.cursor_device
    if dev is None:
        raise ShotError(
            "--at needs the allocation history (a trace): this snapshot (device) has none"
        )
    n = window.vs.doc.n_events(dev)
    if at == "peak":
        window.peak_action.trigger()  # Timeline > Jump to peak allocated
    elif at == "oom":
        if not window.vs.doc.oom_events(dev):
            raise ShotError(f"--at oom: no out-of-memory event in device {dev}'s trace")
        window.oom_action.trigger()  # Timeline > Jump to OOM (the last)
    elif at == "latest":
        window.latest_action.trigger()  # Timeline > Latest (as recorded)
    else:
        k = int(at)
        if not 0 <= k < n:
            raise ShotError(f"--at {k}: device {dev}'s trace has events 0 to {n - 1:,}")
        window.set_cursor(k)  # (a click on the timeline at that event)


def _open_panel(window: MainWindow, view: str):
    """Tools > Diagnosis (it runs on opening) or Tools > What-if (Run pressed, its
    default settings): the panel once its job has ended; :class:`ShotError` if it
    failed or did not end within the timeout."""
    from .diagnosis.panel import DiagnosisPanel
    from .whatif.panel import WhatIfPanel

    kind, action = (
        (DiagnosisPanel, window.diagnosis_action)
        if view == "diagnosis"
        else (WhatIfPanel, window.whatif_action)
    )
    action.trigger()
    panel = next((w for w in window.aux_windows if isinstance(w, kind)), None)
    if panel is None:
        raise ShotError(f"the {kind.title} panel did not open")
    if panel.thread is None and view == "whatif":
        panel.run_button.click()
    return panel


def grab_panel(panel, opts: ShotOptions):
    """A Tools panel at the screenshot's size once its job has ended."""
    panel.resize(SCREENSHOT_SIZE)
    panel.show()
    if not wait_until(lambda: panel.thread is None, opts.timeout_s):
        raise ShotError(
            f"the {panel.title} panel did not finish within {opts.timeout_s:g} s "
            "(--timeout SECONDS to wait longer)"
        )
    done = panel.advice is not None if opts.view == "diagnosis" else bool(panel.preds)
    if not done:
        why = panel.error.text().strip() or panel.status_line().text().strip() or "no result"
        raise ShotError(f"the {panel.title} panel has no result: {why.splitlines()[0]}")
    return render_window(panel)


def _check_category_colours(window: MainWindow) -> None:
    """--color-by category: the breakdown is there (else the views are coloured by code
    site, which is not what was asked)."""
    wiring = window.categories_wiring
    if wiring.cv.bd is None:
        status = wiring.panel.status.text().strip() or "no breakdown"
        raise ShotError(f"--color-by category: what the memory is is unknown ({status})")


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
