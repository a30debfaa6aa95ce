"""The views subscribe to the window's ViewState (each in its constructor): one
change of what is shown redraws each view once, in a real window."""

from __future__ import annotations

from conftest import DATA

from vramscope.viewer.model.analysis.figures import Selection


def _count(window, monkeypatch) -> dict[str, int]:
    """Count the drawing calls of each view (the real methods still run)."""
    calls: dict[str, int] = {}
    for name, obj, meth in (
        ("header", window.header, "set_stats"),
        ("map", window.map, "set_document"),
        ("table", window.table, "set_rows"),
        ("stack", window.stack, "set_document"),
        ("timeline", window.timeline, "set_cursor"),
        ("timeline_doc", window.timeline, "set_document"),
    ):
        real = getattr(obj, meth)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*a, **k)

        monkeypatch.setattr(obj, meth, counted)
    return calls


def test_one_cursor_move_redraws_each_view_once(loaded, monkeypatch):
    window = loaded(DATA / "gpt2_oom.pickle")
    shown = []
    window.momentShown.connect(lambda: shown.append(window.vs.cursor_k))
    calls = _count(window, monkeypatch)
    window.set_cursor(10_000)
    assert calls == {"header": 1, "map": 1, "table": 1, "stack": 1, "timeline": 1}
    assert shown == [10_000]


def test_a_new_filter_redraws_each_view_once_and_keeps_the_trace(loaded, monkeypatch):
    window = loaded(DATA / "gpt2_oom.pickle")
    window.set_cursor(10_000)
    calls = _count(window, monkeypatch)
    window.set_selection(Selection(is_small=True))
    assert calls == {"header": 1, "map": 1, "table": 1, "stack": 1}
    assert window.vs.cursor_k == 10_000 and window.kind_combo.currentText() == "Small segments"
