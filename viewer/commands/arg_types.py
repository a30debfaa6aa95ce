"""argparse value types shared by the commands.  Stdlib only: ``summary`` imports this
on its cached path, which never loads numpy or the model."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return value
