"""Which trace entries are new since a client's last look (pure, no torch).

The allocator keeps a ring buffer per device; once full, the oldest entries
are overwritten.  ``_snapshot()`` returns the buffer oldest first, so an entry
cannot be identified by its index.  It is identified by its ``time_us``: a
cursor is ``(time_us of the last entry sent, how many entries with exactly
that time_us had been sent)``.  Entries are appended in time order, so the
new ones are those after the cursor's run of equal times.  If the oldest entry
still in the buffer is newer than the cursor, entries were overwritten before
anybody fetched them: the reply says ``gap``.

Torch versions without ``time_us`` get the whole buffer with ``reset``.
"""

from __future__ import annotations

from typing import Any, Sequence

Cursor = tuple[int, int]


def _time(entry: Any) -> int | None:
    t = entry.get("time_us") if isinstance(entry, dict) else None
    return t if isinstance(t, int) else None


def cursor_of(entries: Sequence[Any]) -> Cursor | None:
    """The cursor after every entry of ``entries`` (None when empty or untimed)."""
    if not entries:
        return None
    last = _time(entries[-1])
    if last is None:
        return None
    n = 0
    for e in reversed(entries):
        if _time(e) != last:
            break
        n += 1
    return (last, n)


def since(
    entries: Sequence[Any], cursor: Cursor | None, capacity: int | None = None
) -> tuple[int, bool, bool]:
    """(index of the first new entry, gap, reset) for a client at ``cursor``.

    ``gap``: entries newer than the cursor were overwritten before being sent
    (the client should start a fresh window with what follows).
    ``reset``: the client must drop what it has (no cursor, or untimed entries).
    ``capacity``: the ring's size (None: unknown).  When the oldest entry still
    has the cursor's time and the ring may have wrapped, it cannot be told how
    many entries of that time were overwritten: that is reported as a gap
    (everything is sent again) rather than guessed.
    """
    if cursor is None:
        return 0, False, True
    if not entries or _time(entries[-1]) is None:
        return 0, False, True
    t, n_sent = cursor
    first = _time(entries[0])
    if first is None:
        return 0, False, True
    if first > t:
        return 0, True, False
    # Walk back over the new entries, then over the run of entries at time t.
    i = len(entries)
    while i > 0 and (_time(entries[i - 1]) or 0) > t:
        i -= 1
    run_end = i
    while i > 0 and _time(entries[i - 1]) == t:
        i -= 1
    run = run_end - i
    if i == 0 and run and (capacity is None or len(entries) >= capacity):
        return 0, True, False  # the run may have lost its head to the wrap: ambiguous
    return (i + n_sent if run >= n_sent else run_end), False, False


def parse_cursor(value: Any) -> Cursor | None:
    """A cursor from JSON (``[time_us, n]``), or None for anything else."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(type(v) is int and 0 <= v < (1 << 63) for v in value)
    ):
        return (value[0], value[1])
    return None
