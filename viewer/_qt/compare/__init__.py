"""The Diff window: two snapshots side by side, what grew between them
(``diff_window``), opened by File > Compare with….

May import: ``..widgets``, ``..segment_map``, the model.  Never ``..main_window`` nor
another feature package.
"""
