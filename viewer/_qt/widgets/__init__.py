"""Building blocks the features share: :class:`~.jobs.Job` (model work off the GUI
thread) and :class:`~.job_panel.JobPanel` (a window running one), the snapshot
:class:`~.loader.LoadThread`, the stack panel, the lazy tree, the link of a panel to
the main window, the theme and category colours, settings, plotting helpers, PNG
writing, QAction construction, the tree widget tables are made of (:mod:`.tables`) and
panels stacked in one call (:mod:`.layouts`).

May import: the model (and ``vramscope.viewer.startup`` for the preloaded file); never
a feature package (main_window, timeline, segment_map, categories, diagnosis, whatif,
compare, ranks, live): they import this one.
"""
