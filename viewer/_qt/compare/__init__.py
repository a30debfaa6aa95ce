"""The Diff window: two snapshots side by side (``diff_window``), opened by File >
Compare with…: what grew between their end states, and both recordings on one aligned
time axis (``over_time``: the pane; ``over_time_chart``: its chart; ``aligned_axis``:
the axis and the curves' decimation, Qt-free; ``common``: colours and sorting shared).

May import: ``..widgets``, ``..timeline``, ``..segment_map``, the model.  Never
``..main_window`` nor another feature package.
"""
