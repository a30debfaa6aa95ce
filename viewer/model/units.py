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


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 gap``, ``2 gaps``, ``1,024 segments`` (``many``: an irregular plural).

    >>> plural(1, "gap"), plural(445, "gap")
    ('1 gap', '445 gaps')
    """
    n = int(n)
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
