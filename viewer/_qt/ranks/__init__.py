"""The Ranks window: a directory of per-rank snapshots, one row per rank, outliers
flagged (``window``), what each rank's memory is side by side (``split``), opened by
File > Open directory of ranks….

May import: ``..widgets``, the model.  Never ``..main_window`` (a double-clicked rank is
a signal the window handles) nor another feature package.
"""
