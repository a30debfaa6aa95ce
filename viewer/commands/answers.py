"""What a command's pipeline returns, and how the command line prints it.

Each command has one ``answer(...)`` function (``advise``, ``whatif``, ``diff``) that
computes its :class:`Answer`: the JSON data, the text and the warnings.  The CLI prints
it with :func:`print_answer`; the MCP tools (``mcp_tools.py``) and the Python API
(``viewer/api/``) render the same object, so every surface says the same words.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Answer:
    """``data`` (the command's ``--json``), ``text`` (what it prints without),
    ``warnings`` (its stderr lines, without the ``vramscope: warning:``) and ``result``,
    the model's own object where a caller needs more than the words (advise's
    :class:`~..model.remedies.advise.Advice`)."""

    data: Any
    text: str
    warnings: list[str] = field(default_factory=list)
    result: Any = None


def print_answer(got: Answer, as_json: bool) -> int:
    """Print ``got`` as the command line does: the warnings on stderr, then the JSON
    (``as_json``) or the text on stdout.  Returns the exit code (0)."""
    for warning in got.warnings:
        print(f"vramscope: warning: {warning}", file=sys.stderr)
    if as_json:
        from .json_text import dumps_indented

        sys.stdout.write(dumps_indented(got.data) + "\n")
    else:
        print(got.text)
    return 0
