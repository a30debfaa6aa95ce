"""Whole-file reports, the text and JSON of the CLI commands.

* :mod:`.summary` - ``vramscope summary``: figures, OOM verdicts, categories, leaks;
* :mod:`.diff` - ``vramscope diff``: two snapshots compared;
* :mod:`.ranks` - a directory of per-rank snapshots side by side.

May import: every layer below (:mod:`..categories`, :mod:`..analysis`,
:mod:`..replay`, :mod:`..io`, :mod:`..core`); never :mod:`..view`.
"""
