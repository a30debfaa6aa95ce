"""Tiny evented objects: a model object emits change events, views subscribe.

napari's ``EventedModel`` idea without its dependencies: the model stays Qt-free (a Qt
adapter connects a widget's slot to an :class:`EventEmitter`), and a test can listen
to the same events without a QApplication.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable


class EventEmitter:
    """Callbacks called in connection order with the emitted values."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._slots: list[Callable[..., Any]] = []

    def connect(self, slot: Callable[..., Any]) -> Callable[..., Any]:
        """Call ``slot(*values)`` on every :meth:`emit` (returns ``slot``: usable as a
        decorator)."""
        if slot not in self._slots:
            self._slots.append(slot)
        return slot

    def disconnect(self, slot: Callable[..., Any] | None = None) -> None:
        """Forget ``slot`` (every slot when None); a slot never connected is ignored."""
        if slot is None:
            self._slots.clear()
        elif slot in self._slots:
            self._slots.remove(slot)

    def emit(self, *values: Any) -> None:
        for slot in list(self._slots):
            slot(*values)

    def __len__(self) -> int:
        return len(self._slots)


class EmitterGroup:
    """Named emitters: ``events.cursor.connect(...)``."""

    def __init__(self, *names: str) -> None:
        for n in names:
            setattr(self, n, EventEmitter(n))

    if TYPE_CHECKING:  # the emitters are attributes named at run time

        def __getattr__(self, name: str) -> EventEmitter: ...
