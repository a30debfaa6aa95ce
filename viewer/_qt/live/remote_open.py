"""File ▸ Open remote…: a snapshot on another machine, read through ``ssh``.

:class:`RemoteOpenDialog` asks for ``ssh://[user@]host[:port]/path`` (the recent ones
in an editable list, kept in the settings); :func:`open_remote` loads it into the
window like a local file: the window's progress bar and Cancel (which kills ``ssh``),
the bytes read so far of the remote size in the status bar, the column cache.  The
transfer and the safe decoding are the model's (:mod:`...model.io.remote`).
"""

from __future__ import annotations

import os

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QVBoxLayout,
)

from ...model.core.errors import LoadCancelled
from ...model.core.progress import Progress
from ...model.core.units import format_bytes
from ...model.io.remote import RemoteError, is_remote, load_remote, parse_url
from ...model.view.document import Document
from ..main_window import MainWindow
from ..widgets import settings as st
from ..widgets.loader import LoadThread

RECENT_KEY = "recentRemote"
PLACEHOLDER = "ssh://user@host/path/to/snapshot.pickle"


def recent_urls() -> list[str]:
    value = st.settings().value(RECENT_KEY, [])
    if isinstance(value, str):  # QSettings returns a bare string for one element
        value = [value]
    return [str(v) for v in (value or []) if v]


def add_recent_url(url: str) -> list[str]:
    urls = ([url] + [u for u in recent_urls() if u != url])[: st.MAX_RECENT]
    s = st.settings()
    s.setValue(RECENT_KEY, urls)
    s.sync()
    return urls


class RemoteLoadThread(LoadThread):
    """A :class:`LoadThread` whose bytes come through ssh (no preload, no deferred store)."""

    bytesRead = Signal(int, int, int)  # file bytes done, file size, bytes on the wire

    def work(self) -> Document:  # worker thread
        progress = Progress(self._emit_progress, self.cancel_event)
        snap = load_remote(
            self.path,
            progress,
            on_bytes=lambda done, total, wire: self.bytesRead.emit(done, total, wire),
        )
        if self.cancel_event.is_set():
            raise LoadCancelled()
        return Document.build(snap, Progress(self._emit_progress, self.cancel_event))


def open_remote(window: MainWindow, url: str) -> RemoteLoadThread:
    """Load ``url`` into ``window`` through :meth:`MainWindow.open_file`."""

    def make_loader(path: str, parent: MainWindow) -> RemoteLoadThread:
        t = RemoteLoadThread(path, parent)

        def shown(done: int, total: int, wire: int) -> None:
            if window.loading.loader is t:
                # Compressed on the wire: what crossed it, beside the file's bytes.
                moved = f" ({format_bytes(wire)} on the wire)" if wire != done else ""
                window.statusBar().showMessage(
                    f"Reading {url}: {format_bytes(done)} of {format_bytes(total)}{moved}"
                )

        t.bytesRead.connect(shown)
        window.loadFinished.connect(finished)
        return t

    def finished(outcome: str) -> None:
        window.loadFinished.disconnect(finished)
        if outcome == "loaded" and window.persist:
            # The window remembers a loaded file among the local recent files; a remote
            # one belongs to File > Open remote's list instead.
            local = os.path.abspath(url)
            files = [f for f in st.recent_files() if f != local]
            s = st.settings()
            s.setValue("recentFiles", files)
            s.sync()
            window.loading.fill_recent_menu()
            add_recent_url(url)

    return window.open_file(
        url, make_loader, name=url.rsplit("/", 1)[-1], status=f"Connecting to {url}…"
    )


class RemoteOpenDialog(QDialog):
    """Asks for ``ssh://[user@]host[:port]/path``; ``accepted_url`` on Open."""

    urlChosen = Signal(str)

    def __init__(self, parent=None, persist: bool = True) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open a snapshot on another machine")
        self.persist = persist
        self.combo = QComboBox()
        self.combo.setEditable(True)
        self.combo.addItems(recent_urls() if persist else [])
        self.combo.lineEdit().setPlaceholderText(PLACEHOLDER)
        self.combo.setMinimumWidth(520)
        self.combo.setToolTip(
            "Read through your own ssh (keys, agent, ~/.ssh/config); "
            "never asks for a password. ssh://host/~/x is relative to "
            "the remote home."
        )
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.hide()
        help_text = QLabel(
            "The file is streamed with <tt>ssh host cat</tt> and opened "
            "here; nothing is installed on the server."
        )
        help_text.setWordWrap(True)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self.choose)
        self.buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("Snapshot address:"))
        lay.addWidget(self.combo)
        lay.addWidget(self.error)
        lay.addWidget(help_text)
        lay.addWidget(self.buttons)

    def url(self) -> str:
        return self.combo.currentText().strip()

    def choose(self) -> None:
        url = self.url()
        try:
            if not is_remote(url):
                raise RemoteError(f"{url or 'nothing'}: expected {PLACEHOLDER}")
            parse_url(url)
        except RemoteError as exc:
            self.error.setText(str(exc))
            self.error.show()
            return
        self.accept()
        self.urlChosen.emit(url)


def open_remote_dialog(window: MainWindow) -> RemoteOpenDialog:
    """File > Open remote: the dialog over ``window``; Open loads the address into it."""
    dlg = RemoteOpenDialog(window, persist=window.persist)
    dlg.urlChosen.connect(lambda url: open_remote(window, url))
    dlg.open()
    return dlg


def install() -> None:
    """Wire File > Open remote into windows made without :func:`..app.application`
    (which wires it itself)."""
    MainWindow.remote_handler = open_remote_dialog
