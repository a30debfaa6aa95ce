"""Human-readable sizes (binary units, as torch's own messages use)."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: int | float, precision: int = 2) -> str:
    """Format a byte count like ``1.74 GiB``; exact byte counts below 1 KiB.

    >>> format_bytes(8388608)
    '8.00 MiB'
    >>> format_bytes(512)
    '512 B'
    """
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value < 1024:
        return f"{sign}{int(value)} B"
    for unit in _UNITS[1:]:
        value /= 1024.0
        if value < 1024 or unit == _UNITS[-1]:
            return f"{sign}{value:.{precision}f} {unit}"
    raise AssertionError("unreachable")


def format_address(addr: int) -> str:
    """CUDA device addresses are shown in hex, like cuda-gdb and memory_viz."""
    return f"0x{int(addr):x}"


def format_count(n: int) -> str:
    return f"{int(n):,}"


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "kib": 1 << 10,
    "m": 10**6,
    "mb": 10**6,
    "mib": 1 << 20,
    "g": 10**9,
    "gb": 10**9,
    "gib": 1 << 30,
    "t": 10**12,
    "tb": 10**12,
    "tib": 1 << 40,
}


def parse_bytes(text: str) -> int:
    """``10000000000``, ``10e9``, ``10GB``, ``9.5GiB`` -> bytes; ``ValueError`` for anything
    else or a size that is not positive.  (One parser for the CLI and the GUI.)

    >>> parse_bytes("9.5GiB")
    10200547328
    """
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size in bytes: {text!r} (e.g. 10000000000 or 10GB)")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"the memory limit must be positive: {text!r}")
    return value


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 gap``, ``2 gaps``, ``1,024 segments`` (``many``: an irregular plural).

    >>> plural(1, "gap"), plural(445, "gap")
    ('1 gap', '445 gaps')
    """
    n = int(n)
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def event_of(k: int, n: int) -> str:
    """``event 421 of 596``: event ``k`` of a trace of ``n`` events, numbered from 0 as
    ``--at EVENT`` takes them (the last is ``event 595 of 596``).  Every place that shows
    the cursor's event (CLI, window, status line) says it in these words.

    >>> event_of(421, 596)
    'event 421 of 596'
    """
    return f"event {int(k):,} of {int(n):,}"


def device_name(device: int | None) -> str:
    """``device 0``, or ``pinned host memory`` for the host's own device (-1)."""
    from .snapshot import HOST_DEVICE

    return "pinned host memory" if device == HOST_DEVICE else f"device {device}"
