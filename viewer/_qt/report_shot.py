"""``vramscope report FILE -o OUT.html``: File > Export report in a window never shown.

The file is loaded in a main window laid out at the screenshot's size (offscreen works,
``QT_QPA_PLATFORM=offscreen``), the device chosen as the device selector would, and the
window's own export runs (:class:`~.main_window.report_export.ReportExport`: it waits
for what the memory is, grabs the views, computes each device's section): the page is
the one File > Export report writes.
"""

from __future__ import annotations

from PySide6.QtCore import qInstallMessageHandler
from PySide6.QtWidgets import QApplication

from .app import (
    SCREENSHOT_SIZE,
    ShotError,
    ShotOptions,
    application,
    open_and_wait,
    quiet_qt_messages,
    show_view,
    wait_until,
)
from .main_window import MainWindow


def export_report(
    path: str, out: str, device: int | None = None, timeout_s: float = 300.0
) -> tuple[int, str]:
    """Write the report of ``path`` to ``out`` (only ``device``'s section when given,
    else one per device); (exit code, one-line error)."""
    qInstallMessageHandler(quiet_qt_messages)
    application()
    window = MainWindow(persist=False)
    try:
        window.resize(SCREENSHOT_SIZE)
        window.show()
        QApplication.processEvents()
        error = open_and_wait(window, path)
        if error is not None:
            return 2, error
        try:
            if device is not None:
                show_view(window, ShotOptions(device=str(device)))
        except ShotError as exc:
            return 2, f"{path}: {exc}"
        window.map.home()
        export = window.export_report(out, devices=[device] if device is not None else None)
        if export is None:
            return 2, f"{path}: nothing to report"
        got: dict[str, tuple[str, str]] = {}
        export.finished.connect(lambda outcome, detail: got.setdefault("end", (outcome, detail)))
        if not wait_until(lambda: "end" in got, timeout_s):
            export.cancel()
            wait_until(lambda: "end" in got, 30.0)
            return 2, f"{path}: the report was not done within {timeout_s:g} s"
        outcome, detail = got["end"]
        if outcome != "done":
            return 2, f"{out}: {detail or outcome}"
        return 0, ""
    finally:
        for w in list(window.aux_windows):
            w.close()
        window.close()
        window.deleteLater()
        qInstallMessageHandler(None)
