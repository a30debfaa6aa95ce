"""The Diff window: two snapshots side by side (``diff_window``), opened by File >
Compare with…: what grew between their end states, and both recordings on one aligned
time axis (``over_time``: the pane; ``over_time_chart``: its chart; ``common``: colours
and sorting shared), and the run at another batch size or sequence length predicted from
the pair (``two_sizes``).  What they draw is computed in the model
(:mod:`vramscope.viewer.model.reports.over_time`, ``.aligned_axis``; the curves'
decimation :func:`vramscope.viewer.model.view.curve_lod.decimate`).

May import: ``..widgets``, ``..timeline``, ``..segment_map``, the model.  Never
``..main_window`` nor another feature package.
"""
