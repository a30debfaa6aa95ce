"""The main window's menus are its table of entries, and a view-state field has one name.

The menu bar is walked as built and compared with ``menus.MENUS`` entry by entry
(text, shortcut, tooltip, separators, submenus, checkable groups, the window attribute
that keeps each action), so that the table is the one place a menu is declared.  The
window has no attribute named like a field of its :class:`ViewState`: the field is read
and written as ``window.vs.<field>`` only.
"""

from __future__ import annotations

from PySide6.QtGui import QKeySequence

from vramscope.viewer._qt.main_window.menus import MENUS, WINDOW_ACTIONS, Item, Submenu
from vramscope.viewer.model.view.view_state import ViewState


def _keys(action) -> list[str]:
    return [k.toString() for k in action.shortcuts() if not k.isEmpty()]


def _table_keys(item: Item) -> list[str]:
    """The table's key as this platform binds it (a standard key may bind none)."""
    key = QKeySequence() if item.key is None else QKeySequence(item.key)
    return [] if key.isEmpty() else [key.toString()]


def test_menu_bar_is_the_table_of_entries(window):
    tops = [a for a in window.menuBar().actions() if a.menu() is not None]
    assert [a.text() for a in tops[: len(MENUS)]] == [title for title, _ in MENUS]
    for top, (title, entries) in zip(tops, MENUS, strict=False):
        built = top.menu().actions()
        # (the categories wiring appends its own entries to View after the table's)
        assert len(built) >= len(entries), title
        for action, entry in zip(built, entries, strict=False):
            where = f"{title} › {action.text()}"
            if entry is None:
                assert action.isSeparator(), where
            elif isinstance(entry, Submenu):
                assert action.menu() is getattr(window, entry.attr), where
                assert action.text() == entry.text, where
            else:
                assert not action.isSeparator() and action.menu() is None, where
                assert action.text() == entry.text, where
                assert _keys(action) == _table_keys(entry), where
                assert action.toolTip() == entry.tip, where
                assert action.isCheckable() == (entry.group is not None), where
                assert (action.actionGroup() is not None) == (entry.group is not None), where
                if entry.attr is not None:
                    assert getattr(window, entry.attr) is action, where
    outside = {a.text(): a for a in window.actions()}
    for item in WINDOW_ACTIONS:
        assert _keys(outside[item.text]) == _table_keys(item)
        assert getattr(window, item.attr) is outside[item.text]


def test_separators_are_declared_not_placed_by_index(window):
    """The Timeline menu's groups are where the table puts its separators."""
    _, entries = next(m for m in MENUS if m[0] == "&Timeline")
    top = next(a for a in window.menuBar().actions() if a.text() == "&Timeline")
    groups, current = [], []
    for action in top.menu().actions():
        if action.isSeparator():
            groups.append(current)
            current = []
        else:
            current.append(action.text())
    groups.append(current)
    declared, current = [], []
    for entry in entries:
        if entry is None:
            declared.append(current)
            current = []
        else:
            current.append(entry.text)
    declared.append(current)
    assert groups == declared and len(groups) > 1


def test_a_view_state_field_has_one_name(window):
    fields = [name for name in vars(ViewState()) if not name.startswith("_")]
    assert "cursor_k" in fields and "doc" in fields
    second = [name for name in fields if hasattr(window, name)]
    assert second == [], f"the window names these ViewState fields again: {second}"
