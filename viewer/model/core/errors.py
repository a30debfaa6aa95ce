"""Errors and warnings raised while reading snapshots.

Every message is one line that a user can act on; the CLI prints it as is and
the GUI shows it in a dialog.  Nothing here ever carries a traceback.
"""

from __future__ import annotations

from collections import Counter


class SnapshotError(Exception):
    """The file cannot be opened as a memory snapshot.  ``str(err)`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class UnsafeSnapshotError(SnapshotError):
    """The pickle asks to import or call code: refused without executing anything."""


class LoadCancelled(Exception):
    """The user cancelled a load; whatever was built so far is dropped."""


class WarningLog:
    """Collects what was skipped while reading, counted per kind.

    Hostile or damaged files can hold millions of bad entries, so warnings are
    aggregated: each distinct message is kept once with its count.
    """

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    def add(self, message: str, count: int = 1) -> None:
        self._counts[message] += count

    def messages(self) -> list[str]:
        out = []
        for message, count in self._counts.items():
            out.append(message if count == 1 else f"{message} (x{count})")
        return out

    def __len__(self) -> int:
        return len(self._counts)
