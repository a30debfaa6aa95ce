"""The toolbar's selectors (device, pool, stream, segment kind) as an adapter of the
window's :class:`~...model.view.view_state.ViewState`: the user's choice becomes
``vs.set_selection`` (or ``vs.show_host``); a selection set elsewhere is shown without
the rebuilds the combo boxes' signals would start.  The main window puts the combo
boxes in its toolbar.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QComboBox

from ...model.analysis.figures import Selection
from ...model.core.snapshot import HOST_DEVICE
from ...model.view.document import Document, pool_label, stream_label
from ...model.view.view_state import ViewState


class Selectors(QObject):
    """Four combo boxes showing and setting ``view_state``'s selection; they subscribe
    to its ``document`` (new choices) and ``selection`` (shown as chosen)."""

    def __init__(self, view_state: ViewState, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.vs = view_state
        self.device_combo = QComboBox()
        self.device_combo.setToolTip("Show one device's segments")
        self.pool_combo = QComboBox()
        self.pool_combo.setToolTip(
            "Show one memory pool: (0, 0) is the ordinary pool, others "
            "are private pools (CUDA graphs, MemPool)"
        )
        self.stream_combo = QComboBox()
        self.stream_combo.setToolTip(
            "Show one stream's segments: free blocks are only reused by requests on the same stream"
        )
        self.kind_combo = QComboBox()
        self.kind_combo.setToolTip(
            "Small segments (2 MiB, for requests up to 1 MiB) and large "
            "segments are separate free lists"
        )
        self.combos = (self.device_combo, self.pool_combo, self.stream_combo, self.kind_combo)
        # combo box -> [(text, value)]: Python objects, never QVariant item data (PySide6
        # mishandles bool item data).
        self.choices: dict[QComboBox, list[tuple[str, object]]] = {}
        self._syncing = False  # True while the combo boxes are set here, not by the user
        for combo in self.combos:
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            combo.currentIndexChanged.connect(self._on_changed)
        view_state.events.document.connect(self._on_document)
        view_state.events.selection.connect(self.show_selection)  # (a no-op when chosen here)

    def _on_document(self, _doc: Document | None) -> None:
        self.fill()
        self.show_selection(self.vs.selection)  # (several devices: the OOM's, see ViewState)

    def fill(self) -> None:
        """The choices of the view state's document (enabled where there is a choice)."""
        doc = self.vs.doc
        choices: dict[QComboBox, list[tuple[str, object]]] = {
            self.device_combo: self.vs.device_choices(),  # GPUs, then pinned host memory
            self.pool_combo: [("All pools", None)],
            self.stream_combo: [("All streams", None)],
            self.kind_combo: [
                ("Small + large", None),
                ("Large segments", False),
                ("Small segments", True),
            ],
        }
        if doc is not None:
            snap = doc.snap
            used = set(snap.segments.pool.tolist())
            for i, pool in enumerate(snap.pools):
                if i in used:
                    choices[self.pool_combo].append((pool_label(pool), i))
            for s in sorted(set(snap.segments.stream.tolist())):
                choices[self.stream_combo].append((stream_label(int(s)), int(s)))
        self.choices = choices
        self._syncing = True
        try:
            for combo, items in choices.items():
                combo.clear()
                combo.addItems([text for text, _ in items])
                combo.setEnabled(doc is not None and len(items) > 1)
        finally:
            self._syncing = False

    def show_selection(self, sel: Selection) -> None:
        """The selectors showing ``sel``, without the rebuilds their signals would start;
        the view state's selection becomes what they can show (a value gone: "all")."""
        self._syncing = True
        try:
            for combo, value in zip(self.combos, (sel.device, sel.pool, sel.stream, sel.is_small)):
                combo.setCurrentIndex(max(self.combo_index(combo, value), 0))
        finally:
            self._syncing = False
        self.vs.selection = self.current()

    def current(self) -> Selection:
        """The selection the combo boxes show."""
        return Selection(
            device=self._value(self.device_combo),
            pool=self._value(self.pool_combo),
            stream=self._value(self.stream_combo),
            is_small=self._value(self.kind_combo),
        )

    def _value(self, combo: QComboBox):
        items = self.choices.get(combo, [])
        i = combo.currentIndex()
        return items[i][1] if 0 <= i < len(items) else None

    def _on_changed(self, _index: int) -> None:
        if self._syncing:
            return
        new = self.current()
        if (new.device == HOST_DEVICE) != self.vs.host_shown:  # to or from pinned host memory
            # The host document's figures never mix with a GPU's: another document.
            self.vs.show_host(new.device == HOST_DEVICE, new.device)
            return
        self.vs.set_selection(new)  # (another device's trace: the cursor at its end)

    def set_selection(self, selection: Selection) -> None:
        """Set the selectors (and so the selection) programmatically."""
        self._syncing = True
        try:
            for combo, value in zip(
                self.combos,
                (selection.device, selection.pool, selection.stream, selection.is_small),
            ):
                values = [v for _, v in self.choices.get(combo, [])]
                combo.setCurrentIndex(values.index(value) if value in values else 0)
        finally:
            self._syncing = False
        self._on_changed(0)

    def combo_index(self, combo: QComboBox, value) -> int:
        """Index of ``value`` in a selector, -1 if absent."""
        values = [v for _, v in self.choices.get(combo, [])]
        return values.index(value) if value in values else -1
