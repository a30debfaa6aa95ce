"""The Ranks window: a directory of per-rank snapshots, one row per rank, outliers
flagged (``window``), opened by File > Open directory of ranks….

May import: ``..widgets``, the model.  Never ``..main_window`` (a double-clicked rank is
a signal the window handles) nor another feature package.
"""
