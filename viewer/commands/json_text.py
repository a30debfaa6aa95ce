"""``json.dumps(obj, indent=1)``, the same text, several times faster on big answers.

The standard library encodes indented JSON in pure Python (its C encoder serves only
``indent=None``): a summary of a 10M-event recording (its thousands of iterations) took
about as long to print as to classify.  Here every container whose items are all scalars
(most of an answer: the iterations, the sites, the figures) goes through the C encoder
with its separators set to the indented ones; only containers that hold containers are
walked in Python.  ``tests/cli/test_json_text.py`` compares the two on random nested
values and on real summaries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

_SCALARS = (str, int, float, bool, type(None))
_C_ENCODERS: dict[int, json.JSONEncoder] = {}


def dumps_indented(obj: Any) -> str:
    """``json.dumps(obj, indent=1)``, byte for byte (keys in insertion order, ASCII
    escapes, NaN/Infinity as the standard library writes them)."""
    parts: list[str] = []
    _encode(obj, 0, parts)
    return "".join(parts)


def _flat_encoder(depth: int) -> json.JSONEncoder:
    """A C-backed encoder that writes a container of scalars at ``depth`` as
    ``indent=1`` would: each item on its own line, one space deeper than the bracket."""
    enc = _C_ENCODERS.get(depth)
    if enc is None:
        enc = _C_ENCODERS[depth] = json.JSONEncoder(separators=(",\n" + " " * (depth + 1), ": "))
    return enc


def _encode(obj: Any, depth: int, parts: list[str]) -> None:
    items: Iterable[Any]
    if isinstance(obj, dict):
        items = obj.values()
        opener, closer = "{", "}"
    elif isinstance(obj, (list, tuple)):
        items = obj
        opener, closer = "[", "]"
    else:  # a scalar (or what json.dumps would refuse or convert: it decides)
        parts.append(json.dumps(obj))
        return
    if not obj:
        parts.append(opener + closer)
        return
    inner = "\n" + " " * (depth + 1)
    if all(isinstance(v, _SCALARS) for v in items):
        flat = _flat_encoder(depth).encode(obj)  # "{a,<inner>b}": the brackets get the lines
        parts.append(opener + inner + flat[1:-1] + "\n" + " " * depth + closer)
        return
    if opener == "[" and _flat_records(obj):
        parts.append(_records(obj, depth))
        return
    parts.append(opener)
    if isinstance(obj, dict):
        first = True
        for key, value in obj.items():
            parts.append(inner if first else "," + inner)
            first = False
            # the key as json.dumps writes it (non-str keys converted, or refused, alike)
            parts.append(json.dumps({key: None})[1:-7] + ": ")
            _encode(value, depth + 1, parts)
    else:
        for i, value in enumerate(obj):
            parts.append(inner if i == 0 else "," + inner)
            _encode(value, depth + 1, parts)
    parts.append("\n" + " " * depth + closer)


def _flat_records(items: list | tuple) -> bool:
    """Whether every item is a non-empty dict of scalars (a table's rows: the iterations)."""
    return all(
        isinstance(row, dict) and row and all(isinstance(v, _SCALARS) for v in row.values())
        for row in items
    )


def _records(rows: list | tuple, depth: int) -> str:
    """A list of non-empty flat dicts at ``depth``, in one C encoding: written with the
    rows' item separator everywhere, then each row boundary (``},<sep>{``: a bracket
    never appears raw next to a newline inside a string, where newlines are escaped)
    given the list's lines."""
    row_sep = ",\n" + " " * (depth + 2)
    text = _flat_encoder(depth + 1).encode(rows)  # [{a,<row_sep>b},<row_sep>{...}]
    outer, inner = "\n" + " " * (depth + 1), "\n" + " " * (depth + 2)
    body = text[2:-2].replace("}" + row_sep + "{", outer + "}," + outer + "{" + inner)
    return "[" + outer + "{" + inner + body + outer + "}" + "\n" + " " * depth + "]"
