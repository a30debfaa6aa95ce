"""Whole-file reports, the text and JSON of the CLI commands.

* :mod:`.summary` - ``vramscope summary``: figures, OOM verdicts, categories, leaks;
* :mod:`.diff` - ``vramscope diff``: two snapshots compared;
* :mod:`.aligned` - two recordings of one program on one time axis (iterations and
  phases), what changed at each side's peak by category and site, and how far
  ``advise``'s prediction for the change was from the real run;
* :mod:`.aligned_axis` - that time axis: each side's events to x and back;
* :mod:`.over_time` - what the Diff window's Over-time view draws of two recordings
  (curves on the aligned axis, category splits, allocation sites per stack);
* :mod:`.ranks` - a directory of per-rank snapshots side by side;
* :mod:`.html_report` - one self-contained HTML page (the GUI's File > Export report),
  and which allocations leak (the colour views paint them as a leak).

May import: every layer below (:mod:`..categories`, :mod:`..analysis`,
:mod:`..replay`, :mod:`..io`, :mod:`..core`); never :mod:`..view`.
"""
