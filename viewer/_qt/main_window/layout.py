"""Where the main window's views go, and the geometry it remembers between runs.

The toolbar: Open, the selectors and the Blocks table's search box.  Two pages: a
placeholder (no file open: how to open one) and the views - the header over the
timeline, the segment map and, side by side, the Blocks table / call tree tabs and the
stack panel, in two splitters.  The window's geometry, its toolbar and the splitters'
sizes are saved on close and restored when a window opens (settings).
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, Qt
from PySide6.QtWidgets import (
    QLabel,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..widgets import settings as st
from .selectors import Selectors

PLACEHOLDER = "Open a snapshot (Ctrl+O) or drop a file here"


def build_pages(window) -> None:
    """Lay out ``window``'s views (built before) into its central widget; sets its
    ``tabs``, ``search``, ``main_split``, ``bottom_split``, ``placeholder`` and
    ``pages``."""
    w = window
    w.tabs = QTabWidget()
    w.tabs.setDocumentMode(True)
    w.tabs.addTab(w.table, "Blocks")
    w.tabs.addTab(w.calltree, "Call tree")
    w.tabs.setTabToolTip(
        0,
        "Every block at the cursor (allocated, pending free and free), "
        "sortable, filtered by the search",
    )
    w.tabs.setTabToolTip(1, "Who holds memory: live bytes grouped by the stack that allocated them")
    # The search box lives in the toolbar; it filters the table and
    # highlights matches in the map and the timeline.
    w.search = w.table.filter
    w.table.layout().itemAt(0).layout().removeWidget(w.search)
    w.search.setPlaceholderText("search frames… (Ctrl+F)")
    w.search.setToolTip(
        "Allocations whose call stack has a frame whose file or function "
        "contains this text: highlighted in the map and the timeline, "
        "the only rows of the table (Ctrl+F)"
    )
    w.search.setMinimumWidth(180)

    w.bottom_split = QSplitter(Qt.Orientation.Horizontal)
    w.bottom_split.addWidget(w.tabs)
    w.bottom_split.addWidget(w.stack)
    w.bottom_split.setStretchFactor(0, 3)
    w.bottom_split.setStretchFactor(1, 2)
    w.main_split = QSplitter(Qt.Orientation.Vertical)
    w.main_split.addWidget(w.timeline)
    w.main_split.addWidget(w.map)
    w.main_split.addWidget(w.bottom_split)
    w.main_split.setStretchFactor(0, 2)
    w.main_split.setStretchFactor(1, 3)
    w.main_split.setStretchFactor(2, 2)
    w.main_split.setSizes([230, 330, 220])
    w.bottom_split.setSizes([820, 600])
    content = QWidget()
    lay = QVBoxLayout(content)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(2)
    lay.addWidget(w.header)
    lay.addWidget(w.main_split, 1)

    w.placeholder = _placeholder(w)
    w.pages = QStackedWidget()
    w.pages.addWidget(w.placeholder)
    w.pages.addWidget(content)
    w.setCentralWidget(w.pages)


def build_toolbar(window) -> None:
    """The toolbar: Open, the selectors (``window.selectors`` and its combos), the search."""
    w = window
    tb = w.addToolBar("Selection")
    tb.setObjectName("selectionToolbar")
    tb.setMovable(False)
    tb.addAction(w.open_action)
    tb.addSeparator()
    w.selectors = Selectors(w.vs, w)
    w.device_combo = w.selectors.device_combo
    w.pool_combo = w.selectors.pool_combo
    w.stream_combo = w.selectors.stream_combo
    w.kind_combo = w.selectors.kind_combo
    for combo in w.selectors.combos:
        tb.addWidget(combo)
    tb.addSeparator()
    tb.addWidget(w.search)


def _placeholder(window) -> QWidget:
    """The page shown while no file is open: what to open and a button to open it."""
    page = QWidget()
    pl = QVBoxLayout(page)
    pl.addStretch(1)
    text = QLabel(PLACEHOLDER)
    text.setAlignment(Qt.AlignmentFlag.AlignCenter)
    f = text.font()
    f.setPointSizeF(f.pointSizeF() * 1.6)
    text.setFont(f)
    text.setEnabled(False)
    sub = QLabel(
        "A PyTorch CUDA memory snapshot: torch.cuda.memory._dump_snapshot(), "
        "or `vramscope record script.py`.\nvramscope shows why memory ran out: "
        "free memory scattered in gaps too small for the request."
    )
    sub.setAlignment(Qt.AlignmentFlag.AlignCenter)
    sub.setEnabled(False)
    button = QPushButton("Open snapshot…")
    button.setToolTip("Open a snapshot file (Ctrl+O)")
    button.clicked.connect(window.loading.open_dialog)
    pl.addWidget(text)
    pl.addWidget(sub)
    pl.addSpacing(12)
    pl.addWidget(button, 0, Qt.AlignmentFlag.AlignCenter)
    pl.addStretch(1)
    return page


def restore_geometry(window) -> None:
    """The window's geometry, toolbar and splitters as saved on the last close."""
    s = st.settings()
    geo = s.value("window/geometry")
    if isinstance(geo, QByteArray) and not geo.isEmpty():
        window.restoreGeometry(geo)
    state = s.value("window/state")
    if isinstance(state, QByteArray) and not state.isEmpty():
        window.restoreState(state)
    for key, split in (
        ("window/mainSplit3", window.main_split),
        ("window/bottomSplit", window.bottom_split),
    ):
        v = s.value(key)
        if isinstance(v, QByteArray) and not v.isEmpty():
            split.restoreState(v)


def save_geometry(window) -> None:
    """Remember the window's geometry, toolbar and splitters (see :func:`restore_geometry`)."""
    s = st.settings()
    s.setValue("window/geometry", window.saveGeometry())
    s.setValue("window/state", window.saveState())
    s.setValue("window/mainSplit3", window.main_split.saveState())
    s.setValue("window/bottomSplit", window.bottom_split.saveState())
    s.sync()
