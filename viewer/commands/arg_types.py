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


def add_device_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--device N`` of a command on one device's what-if case (``what``: "analyse",
    "simulate"); the default is the model's one rule (``focus.default_trace_device``)."""
    p.add_argument(
        "--device",
        type=int,
        metavar="N",
        help=f"device to {what} (default: the "
        "last OOM's, else the one with the highest reserved peak)",
    )
