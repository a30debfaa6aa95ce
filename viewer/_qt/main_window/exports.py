"""File > Export: the segment map as a PNG image or an SVG drawing, and the HTML report.

Each dialog proposes a file name after the open snapshot's and adds the suffix a name
typed without it lacks; the report is written off the GUI thread
(:class:`~.report_export.ReportExport`, imported when first used: not with every
window), starting in the folder a report was last written to.  Success goes to the
status bar, failure to the window's error box.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

if TYPE_CHECKING:
    from .report_export import ReportExport


class ExportController(QObject):
    """The exports of ``window``; :attr:`report_export`: the last report export begun."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.report_export: ReportExport | None = None

    # ------------------------------------------------------------------ segment map
    def export_map(self, path: str) -> bool:
        """Write the segment map to ``path`` (.svg: vector, else PNG)."""
        if str(path).lower().endswith(".svg"):
            return self.window.map.export_svg(path)
        return self.window.map.export_png(path)

    def _map_dialog(self, suffix: str, filt: str) -> None:
        w = self.window
        if w.vs.doc is None:
            return
        stem = w.vs.doc.name.split(".")[0] + "-segments." + suffix
        path, _ = QFileDialog.getSaveFileName(w, "Export segment map", stem, filt)
        if not path:
            return
        if not path.lower().endswith("." + suffix):
            path += "." + suffix
        if self.export_map(path):
            w.statusBar().showMessage(f"Exported {path}", 6000)
        else:
            w.show_error("Export failed", f"Could not write {path}")

    def png_dialog(self) -> None:
        """File > Export segment map as PNG…"""
        self._map_dialog("png", "PNG image (*.png)")

    def svg_dialog(self) -> None:
        """File > Export segment map as SVG…"""
        self._map_dialog("svg", "SVG drawing (*.svg)")

    # ------------------------------------------------------------------ report
    def report_dialog(self) -> None:
        """File > Export report…: ask where (starting in the folder last written to)."""
        from .report_export import last_folder

        w = self.window
        if w.vs.doc is None:
            return
        name = w.vs.doc.name.split(".")[0] + "-report.html"
        start = os.path.join(last_folder(), name) if w.persist and last_folder() else name
        path, _ = QFileDialog.getSaveFileName(w, "Export report", start, "HTML page (*.html)")
        if not path:
            return
        if not path.lower().endswith((".html", ".htm")):
            path += ".html"
        self.export_report(path)

    def export_report(
        self, path: str, remedies: bool = True, devices: list[int] | None = None
    ) -> ReportExport | None:
        """See :meth:`.window.MainWindow.export_report`."""
        from .report_export import ReportExport, remember_folder

        w = self.window
        if w.vs.doc is None:
            return None
        export = ReportExport(w, os.fspath(path), remedies, devices)

        def ended(outcome: str, detail: str) -> None:
            if outcome == "done":
                if w.persist:
                    remember_folder(detail)
                w.statusBar().showMessage(f"Exported {detail}", 8000)
            elif outcome == "failed":
                w.show_error(
                    "Export failed", f"Could not write the report: {detail}", os.fspath(path)
                )
            else:
                w.statusBar().showMessage("Report export cancelled", 4000)
            export.deleteLater()

        export.finished.connect(ended)
        self.report_export = export
        export.start()
        return export
