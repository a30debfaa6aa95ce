"""A picture of the Diagnosis panel over the main window (the README's assets/diagnosis.png).

``python -m vramscope.viewer._qt.diagnosis_shot FILE OUT.png [--batch N] [--remedy ID]``
loads FILE in a main window, opens the Diagnosis panel, runs it, selects a remedy
(by id, default the first simulated one) and saves one PNG: the main window, whose
timeline shows the remedy's predicted curve over the recorded ones and the
allocations it acts on highlighted, above the panel.  Offscreen works
(``QT_QPA_PLATFORM=offscreen``).
"""

from __future__ import annotations

import argparse
import sys

from PySide6.QtCore import QEventLoop, QSize, QTimer
from PySide6.QtGui import QColor, QImage, QPainter

WINDOW_SIZE = QSize(1440, 900)
PANEL_SIZE = QSize(1440, 700)
SPLIT = [400, 250, 170]  # the main window's timeline / map / table: the timeline tall


def _wait(predicate, timeout_ms: int = 300_000) -> bool:
    loop = QEventLoop()
    timer = QTimer(interval=50)
    timer.timeout.connect(lambda: predicate() and loop.quit())
    timer.start()
    QTimer.singleShot(timeout_ms, loop.quit)
    if not predicate():
        loop.exec()
    timer.stop()
    return bool(predicate())


def shoot(path: str, out: str, batch: int | None = None, remedy: str | None = None) -> int:
    """Render (see the module docstring); 0 on success, else 2 with one line on stderr."""
    from PySide6.QtCore import qInstallMessageHandler

    from .app import application, grab_main_window, quiet_qt_messages, wait_for_load
    from .diagnosis.panel import open_panel
    from .main_window import MainWindow
    from .widgets.png import save_png

    qInstallMessageHandler(quiet_qt_messages)  # stderr: vramscope's own lines only
    app = application()
    window = MainWindow(persist=False)
    window.resize(WINDOW_SIZE)
    window.show()
    window.open_file(path)
    if wait_for_load(window) != "loaded":
        sys.stderr.write(f"vramscope: error: {path}: {window.last_error or 'not loaded'}\n")
        return 2
    window.main_split.setSizes(SPLIT)
    panel = open_panel(window)
    if batch:  # (open_panel started a run without it: the answer then has no batch)
        _wait(lambda: panel.thread is None)
        panel.batch_spin.setValue(batch)
        panel.run()
    _wait(lambda: panel.thread is None and panel.advice is not None)
    if panel.advice is None:
        sys.stderr.write(f"vramscope: error: {path}: {panel.error.text() or 'no advice'}\n")
        return 2
    rems = panel.advice.remedies
    want = [
        r
        for r, rem in enumerate(rems)
        if (rem.remedy == remedy if remedy else rem.method == "simulated")
    ]
    if not want:
        sys.stderr.write(f"vramscope: error: no remedy {remedy!r} for {path}\n")
        return 2
    panel.table.selectRow(want[0])
    panel.resize(PANEL_SIZE)
    for _ in range(3):
        app.processEvents()
    top = grab_main_window(window).toImage()
    bottom = panel.grab().toImage()
    ratio = top.devicePixelRatio()
    w = max(top.width(), bottom.width())
    gap = int(8 * ratio)
    image = QImage(w, top.height() + gap + bottom.height(), QImage.Format.Format_RGB32)
    image.fill(QColor("#9e9e9e"))
    painter = QPainter(image)
    painter.drawImage(0, 0, top)
    painter.drawImage(0, top.height() + gap, bottom)
    painter.end()
    panel.close()
    window.close()
    if not save_png(image, out):
        sys.stderr.write(f"vramscope: error: {out}: cannot write the PNG\n")
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m vramscope.viewer._qt.diagnosis_shot", description=__doc__.splitlines()[0]
    )
    p.add_argument("file")
    p.add_argument("out")
    p.add_argument("--batch", type=int, help="the recorded batch size")
    p.add_argument("--remedy", help="the id of the remedy to select (smaller_batch, ...)")
    args = p.parse_args(argv)
    return shoot(args.file, args.out, args.batch, args.remedy)


if __name__ == "__main__":
    sys.exit(main())
