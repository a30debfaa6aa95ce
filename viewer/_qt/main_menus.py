"""The main window's menus, toolbar and status bar: which actions exist, their
shortcuts and tooltips (one place to read them), wired to the window's slots."""

from __future__ import annotations

from PySide6.QtGui import QActionGroup, QKeySequence
from PySide6.QtWidgets import QComboBox, QLabel, QProgressBar, QPushButton, QToolButton

from ..model.view.map_layout import SORT_ADDRESS, SORT_FREE, SORT_SIZE


def build_actions(w) -> None:  # w: the MainWindow
    mb = w.menuBar()
    m = mb.addMenu("&File")
    w.open_action = w._action("&Open…", w.open_dialog, QKeySequence.StandardKey.Open,
                                    "Open a memory snapshot")
    m.addAction(w.open_action)
    w.recent_menu = m.addMenu("Open &Recent")
    w.recent_menu.aboutToShow.connect(w._fill_recent_menu)
    w._fill_recent_menu()
    # Compare snapshots and ranks (issue 9): separate windows over the model.
    w._aux_windows: list = []
    w.compare_action = w._action("&Compare with…", w.compare_dialog, tip=(
        "Compare this snapshot (A) with another (B): what grew, by allocation stack"))
    w.ranks_action = w._action("Open &directory of ranks…", w.open_ranks_dialog, tip=(
        "One row per rank of a torchrun capture directory, outlier ranks flagged"))
    m.addAction(w.compare_action)
    m.addAction(w.ranks_action)
    # File > Attach... (live attach, issue 6) and Tools > What-if... (issue 8): the
    # actions are here from the start, their modules (~10 ms of imports, the live
    # client and the simulator) load when first used, not with every window.
    w.attach_action = w._action(
        "&Attach to running process…", w._open_attach, "Ctrl+Shift+A",
        "Watch a running PyTorch process's GPU memory live, or save a snapshot from it")
    m.addAction(w.attach_action)
    w.documentChanged.connect(lambda doc: w.compare_action.setEnabled(doc is not None))
    m.addSeparator()
    w.export_png_action = w._action("Export segment map as &PNG…", w.export_png_dialog,
                                          tip="Save the segment map as a PNG image")
    w.export_svg_action = w._action("Export segment map as &SVG…", w.export_svg_dialog,
                                          tip="Save the segment map as an SVG drawing")
    m.addAction(w.export_png_action)
    m.addAction(w.export_svg_action)
    m.addSeparator()
    m.addAction(w._action("&Quit", w._quit, QKeySequence.StandardKey.Quit, "Quit vramscope"))

    e = mb.addMenu("&Edit")
    w.copy_stack_action = w._action("&Copy stack", w.stack.copy, QKeySequence.StandardKey.Copy,
                                          "Copy the selected block's stack as text")
    e.addAction(w.copy_stack_action)
    w.copy_map_action = w._action("Copy segment &map image", w.map.copy_image,
                                        "Ctrl+Shift+C", "Copy the segment map to the clipboard")
    e.addAction(w.copy_map_action)
    e.addAction(w._action("&Search frames", w._focus_filter, QKeySequence.StandardKey.Find,
                             "Highlight and filter the allocations by stack text"))

    v = mb.addMenu("&View")
    w.fit_action = w._action("&Fit segment map", w.map.fit, "Ctrl+0",
                                   "Show every segment")
    v.addAction(w.fit_action)
    w.home_action = w._action("&Readable rows", w.map.home, "Ctrl+9",
                                    "Rows tall enough to read, from the top")
    v.addAction(w.home_action)
    v.addAction(w._action("Zoom &in", lambda: w._zoom(0.5), QKeySequence.StandardKey.ZoomIn,
                             "Zoom the segment map in"))
    v.addAction(w._action("Zoom &out", lambda: w._zoom(2.0), QKeySequence.StandardKey.ZoomOut,
                             "Zoom the segment map out"))
    v.addSeparator()
    group = QActionGroup(w)
    w.sort_address_action = w._action("Rows by &address", lambda: w.map.set_sort(SORT_ADDRESS),
                                            "Ctrl+1", "Segments in address order")
    w.sort_size_action = w._action("Rows by &size", lambda: w.map.set_sort(SORT_SIZE),
                                         "Ctrl+2", "Largest segments first")
    w.sort_free_action = w._action("Rows by largest &free gap", lambda: w.map.set_sort(SORT_FREE),
                                         "Ctrl+3", "Segments with the largest free gaps first")
    for a in (w.sort_address_action, w.sort_size_action, w.sort_free_action):
        a.setCheckable(True)
        group.addAction(a)
        v.addAction(a)
    w.sort_address_action.setChecked(True)
    w.map.sortChanged.connect(w._on_sort_changed)

    t = mb.addMenu("&Timeline")
    w.peak_action = w._action("Jump to peak &allocated", lambda: w.jump_to_peak("allocated"),
                              "Ctrl+Shift+P", "Move the cursor to the peak of allocated memory")
    w.peak_reserved_action = w._action("Jump to peak &reserved",
                                             lambda: w.jump_to_peak("reserved"), None,
                                             "Move the cursor to the peak of reserved memory")
    w.oom_action = w._action("Jump to &OOM", w.jump_to_oom, "Ctrl+J",
                                   "Move the cursor to the last out-of-memory event")
    w.prev_oom_action = w._action("&Previous OOM", lambda: w.jump_to_oom(-1), "Ctrl+[",
                                        "The OOM before the cursor")
    w.next_oom_action = w._action("&Next OOM", lambda: w.jump_to_oom(+1), "Ctrl+]",
                                        "The OOM after the cursor")
    w.latest_action = w._action("&Latest (as recorded)", w.go_latest, "Ctrl+End",
                                      "Back to the snapshot as recorded (the end of the trace)")
    w.step_back_action = w._action("Step &back", lambda: w.step_cursor(-1), "Alt+Left",
                                         "One event back (in the timeline: Left; Shift: 100)")
    w.step_fwd_action = w._action("Step &forward", lambda: w.step_cursor(+1), "Alt+Right",
                                        "One event forward (in the timeline: Right; Shift: 100)")
    w.xaxis_action = w._action("Toggle x axis: &time / events", w.timeline.toggle_mode,
                                     "Ctrl+T", "Show the timeline against time or event index")
    w.timeline_actions = (w.peak_action, w.peak_reserved_action, w.oom_action,
                             w.prev_oom_action, w.next_oom_action, w.latest_action,
                             w.step_back_action, w.step_fwd_action, w.xaxis_action)
    for i, a in enumerate(w.timeline_actions):
        if i in (3, 6, 8):
            t.addSeparator()
        t.addAction(a)

    w.whatif_action = w._action(
        "&What-if: other allocator settings…", w._open_whatif, "Ctrl+Shift+W",
        "Replay this trace through a model of the caching allocator under other "
        "PYTORCH_CUDA_ALLOC_CONF settings: peak memory, fragmentation, OOMs")
    w.whatif_action.setEnabled(False)
    w.documentChanged.connect(lambda doc: w.whatif_action.setEnabled(doc is not None))
    w.diagnosis_action = w._action(
        "&Diagnosis: what would make it fit…", w._open_diagnosis, "Ctrl+Shift+D",
        "Rank the changes that would make this run fit (smaller batch, allocator "
        "settings, freeing what is kept, checkpointing, ...) by predicted peak memory")
    w.diagnosis_action.setEnabled(False)
    w.documentChanged.connect(lambda doc: w.diagnosis_action.setEnabled(doc is not None))
    tools = mb.addMenu("T&ools")
    tools.addAction(w.whatif_action)
    tools.addAction(w.diagnosis_action)
    h = mb.addMenu("&Help")
    h.addAction(w._action("&About vramscope", w.about, tip="Versions and license"))

    w.cancel_action = w._action("Cancel loading", w._cancel_clicked, "Esc", "Cancel the load")
    w.cancel_action.setEnabled(False)
    w.addAction(w.cancel_action)


def build_toolbar(w) -> None:  # w: the MainWindow
    tb = w.addToolBar("Selection")
    tb.setObjectName("selectionToolbar")
    tb.setMovable(False)
    tb.addAction(w.open_action)
    tb.addSeparator()
    w.device_combo = QComboBox()
    w.device_combo.setToolTip("Show one device's segments")
    w.pool_combo = QComboBox()
    w.pool_combo.setToolTip("Show one memory pool: (0, 0) is the ordinary pool, others are "
                               "private pools (CUDA graphs, MemPool)")
    w.stream_combo = QComboBox()
    w.stream_combo.setToolTip("Show one stream's segments: free blocks are only reused by "
                                 "requests on the same stream")
    w.kind_combo = QComboBox()
    w.kind_combo.setToolTip("Small segments (2 MiB, for requests up to 1 MiB) and large "
                               "segments are separate free lists")
    for combo in (w.device_combo, w.pool_combo, w.stream_combo, w.kind_combo):
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        combo.currentIndexChanged.connect(w._on_selector_changed)
        tb.addWidget(combo)
    tb.addSeparator()
    tb.addWidget(w.search)


def build_status(w) -> None:  # w: the MainWindow
    sb = w.statusBar()
    w.progress = QProgressBar()
    w.progress.setRange(0, 1000)
    w.progress.setMaximumWidth(260)
    w.progress.setTextVisible(True)
    w.progress.setToolTip("Loading: reading bytes, parsing, building columns")
    w.cancel_button = QPushButton("Cancel")
    w.cancel_button.setToolTip("Stop loading (Esc)")
    w.cancel_button.clicked.connect(w._cancel_clicked)
    w.file_label = QLabel()
    w.file_label.setToolTip("The open snapshot")
    w.format_label = QLabel()
    w.format_label.setToolTip("File format as detected from its content")
    w.settings_label = QLabel()
    w.warnings_button = QToolButton()
    w.warnings_button.setAutoRaise(True)
    w.warnings_button.clicked.connect(w.show_warnings)
    for widget in (w.progress, w.cancel_button, w.file_label, w.format_label,
                   w.settings_label, w.warnings_button):
        sb.addPermanentWidget(widget)
    w.progress.hide()
    w.cancel_button.hide()
