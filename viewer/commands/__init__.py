"""One module per ``vramscope`` subcommand, each with ``main(argv) -> int``.

A command's pipeline is one function, ``answer(...)`` (``advise``, ``whatif``, ``diff``;
``summary.summarize_loaded``), that returns an :class:`~.answers.Answer` (data, text,
warnings); ``main`` prints it (:func:`~.answers.print_answer`), ``mcp_tools`` and the
Python API render the same.  Beside the commands: ``answers``, ``arg_types`` and
``device_choice`` (what they share), ``mcp``/``mcp_tools`` (the MCP server),
``result_cache``, ``background`` (cache writes in a detached child after the answer),
``json_text`` (``--json``'s indented text, fast), ``tty_progress``, ``remote_run``,
``whatif_batch``, ``whatif_seq``, ``whatif_pair``; ``record`` (the capture runner),
``report`` (the HTML report, headless) and ``selftest`` (``vramscope --self-test``).

May import: the model (its public names), :mod:`vramscope.viewer.startup`,
:mod:`vramscope.viewer.early` and :mod:`vramscope.viewer.live_protocol`; the Qt views
only lazily, inside the commands that open a window (``gui``, ``attach``'s window, the
self-test), so a command-line tool never loads Qt.
"""
