"""The toolbar's selectors (device, pool, stream, segment kind) as an adapter of the
window's :class:`~..model.view_state.ViewState`: the user's choice becomes
``vs.set_selection`` (or ``vs.show_host``); a selection set elsewhere is shown without
the rebuilds the combo boxes' signals would start.  Mixed into ``MainWindow``, which
builds the combo boxes (``main_menus.build_toolbar``) and composes the views.
"""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox

from ..model.analysis.figures import Selection
from ..model.view.document import pool_label, stream_label
from ..model.core.snapshot import HOST_DEVICE


class SelectorsMixin:
    """The selectors' half of ``MainWindow`` (``self.vs``, ``self.device_combo``, …)."""

    _syncing = False
    _choices: dict  # combo box -> [(text, value)], set by _fill_selectors

    def _fill_selectors(self) -> None:
        """Fill the selectors; the value of each entry lives in ``self._choices``
        (Python objects, never QVariant: PySide6 mishandles bool item data)."""
        doc = self.doc
        choices: dict[QComboBox, list[tuple[str, object]]] = {
            self.device_combo: self.vs.device_choices(),  # GPUs, then pinned host memory
            self.pool_combo: [("All pools", None)],
            self.stream_combo: [("All streams", None)],
            self.kind_combo: [("Small + large", None), ("Large segments", False),
                              ("Small segments", True)],
        }
        if doc is not None:
            snap = doc.snap
            used = set(snap.segments.pool.tolist())
            for i, pool in enumerate(snap.pools):
                if i in used:
                    choices[self.pool_combo].append((pool_label(pool), i))
            for s in sorted(set(snap.segments.stream.tolist())):
                choices[self.stream_combo].append((stream_label(int(s)), int(s)))
        self._choices = choices
        self._syncing = True
        try:
            for combo, items in choices.items():
                combo.clear()
                combo.addItems([text for text, _ in items])
                combo.setEnabled(doc is not None and len(items) > 1)
        finally:
            self._syncing = False

    def _show_selectors(self, sel: Selection) -> None:
        """The selectors showing ``sel``, without the rebuilds their signals would start;
        the selection is what they can show (a value gone becomes "all")."""
        self._syncing = True
        try:
            for combo, value in ((self.device_combo, sel.device), (self.pool_combo, sel.pool),
                                 (self.stream_combo, sel.stream), (self.kind_combo, sel.is_small)):
                combo.setCurrentIndex(max(self.combo_index(combo, value), 0))
        finally:
            self._syncing = False
        self.selection = Selection(device=self._value(self.device_combo),
                                   pool=self._value(self.pool_combo),
                                   stream=self._value(self.stream_combo),
                                   is_small=self._value(self.kind_combo))

    def _value(self, combo: QComboBox):
        items = self._choices.get(combo, [])
        i = combo.currentIndex()
        return items[i][1] if 0 <= i < len(items) else None

    def _on_selector_changed(self, _index: int) -> None:
        if self._syncing:
            return
        new = Selection(
            device=self._value(self.device_combo),
            pool=self._value(self.pool_combo),
            stream=self._value(self.stream_combo),
            is_small=self._value(self.kind_combo),
        )
        if (new.device == HOST_DEVICE) != self.vs.host_shown:  # to or from pinned host memory
            self.show_host(new.device == HOST_DEVICE, new.device)
            return
        self.vs.set_selection(new)  # (another device's trace: the cursor at its end)

    def show_host(self, on: bool, device: int | None = None) -> None:
        """Show the file's pinned host memory as its own document (``on``), or the file's
        GPUs again (``device``: the one to select).  The host document's figures never
        mix with a GPU's: it is another document, not a filter of this one."""
        self.vs.show_host(on, device)

    def set_selection(self, selection: Selection) -> None:
        """Set the selectors (and so the selection) programmatically."""
        self._syncing = True
        try:
            for combo, value in ((self.device_combo, selection.device),
                                 (self.pool_combo, selection.pool),
                                 (self.stream_combo, selection.stream),
                                 (self.kind_combo, selection.is_small)):
                values = [v for _, v in self._choices.get(combo, [])]
                combo.setCurrentIndex(values.index(value) if value in values else 0)
        finally:
            self._syncing = False
        self._on_selector_changed(0)

    def combo_index(self, combo: QComboBox, value) -> int:
        """Index of ``value`` in a selector, -1 if absent."""
        values = [v for _, v in self._choices.get(combo, [])]
        return values.index(value) if value in values else -1
