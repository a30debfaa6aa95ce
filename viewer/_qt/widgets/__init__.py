"""Building blocks the features share: :class:`~.jobs.Job` (model work off the GUI
thread) and :class:`~.job_panel.JobPanel` (a window running one), the snapshot
:class:`~.loader.LoadThread`, the stack panel (:mod:`.stack_panel`), the lazy tree
(:mod:`.lazy_tree`), the link of a panel to the main window (:mod:`.window_link`), the
theme and category colours (:mod:`.theme`, :mod:`.category_colors`), settings, plotting
helpers, PNG writing (:mod:`.png`), QAction construction (:mod:`.actions`), the tree
widget tables are made of (:mod:`.tables`) and panels stacked in one call
(:mod:`.layouts`), and pyqtgraph imported without building every Qt type
(:mod:`.qt_import`), with shiboken6's embedded Python compiled once and kept
(:mod:`.embedded_code`).

May import: the model (and ``vramscope.viewer.startup`` for the preloaded file); never
a feature package (main_window, timeline, segment_map, categories, diagnosis, whatif,
compare, ranks, live): they import this one.
"""
