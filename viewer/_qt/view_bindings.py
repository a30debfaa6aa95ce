"""The views subscribe to the window's :class:`~..model.view_state.ViewState`: one place
per widget where its slots are connected to the model's events; the slots only draw.

napari's ``_qt`` adapters are the example: the model decides what is shown and emits
(``document``, ``trace``, ``cursor``, ``moment``, ``highlight``; see the order in
``model/view_state.py``), each adapter reads the state and draws its widget.  The
connection order below is the drawing order (header before the map, the map before the
table, …), kept from the hand-ordered calls this replaced, so what users see is the same.
"""

from __future__ import annotations

from ..model.analysis.figures import memory_stats
from .calltree_panel import AT_CURSOR, AT_PEAK
from .segment_map import SORT_ADDRESS, SORT_FREE


def bind_views(w) -> None:
    """Connect the views of MainWindow ``w`` to ``w.vs`` (called once, when built)."""
    ev = w.vs.events
    for connect in (_window, _selectors, _header, _stack, _calltree, _timeline, _map_table,
                    _picks):
        connect(w, ev)
    ev.highlight.connect(lambda mask: _draw_highlight(w, mask))


def _window(w, ev) -> None:
    def on_document(doc) -> None:
        if w.vs.origin == "host":
            return
        w.pages.setCurrentIndex(0 if doc is None else 1)
        for a in (w.export_png_action, w.export_svg_action, w.copy_map_action, w.fit_action):
            a.setEnabled(doc is not None)

    ev.document.connect(on_document)


def _selectors(w, ev) -> None:
    def on_document(_doc) -> None:
        w._fill_selectors()
        w._show_selectors(w.vs.selection)  # (several devices: the OOM's, see ViewState)

    ev.document.connect(on_document)
    ev.selection.connect(w._show_selectors)  # (a no-op when the user chose it)


def _header(w, ev) -> None:
    vs = w.vs

    def on_document(doc) -> None:
        w.header.set_document(None if vs.host_shown else doc)

    def on_moment(_keep: bool) -> None:
        doc = vs.view_doc
        if doc is None:
            w.header.set_stats(None)
            return
        w.header.set_stats(memory_stats(doc.snap, vs.selection))
        w.header.set_scope(vs.scope_text())

    ev.document.connect(on_document)
    ev.moment.connect(on_moment)


def _stack(w, ev) -> None:
    def on_document(doc) -> None:
        w.stack.set_document(doc, keep=w.vs.origin == "replace")

    ev.document.connect(on_document)


def _calltree(w, ev) -> None:
    def on_document(doc) -> None:
        if w.vs.origin != "open":
            return  # (a newer picture keeps the moment the user chose)
        # Who holds memory: at the OOM (the cursor starts there) when there is one,
        # otherwise at the peak of allocated memory.
        w.calltree.set_moment(AT_CURSOR if doc is None or doc.oom is not None
                              or doc.timeline is None else AT_PEAK)

    ev.document.connect(on_document)


def _timeline(w, ev) -> None:
    vs = w.vs
    drawn = {"filter": None}

    def on_trace(dev) -> None:
        sel = vs.selection
        w.timeline.set_document(vs.doc, dev, sel.stream, sel.pool)
        drawn["filter"] = (sel.stream, sel.pool)
        for a in w.timeline_actions:
            a.setEnabled(dev is not None)
        _oom_controls(w)

    def on_cursor(dev, k) -> None:
        if dev is not None:  # the timeline kept its old cursor otherwise
            w.timeline.set_cursor(k)
        _oom_controls(w)

    def on_selection(sel) -> None:
        if drawn["filter"] != (sel.stream, sel.pool):
            w.timeline.set_filter(sel.stream, sel.pool)
            drawn["filter"] = (sel.stream, sel.pool)

    ev.trace.connect(on_trace)
    ev.cursor.connect(on_cursor)
    ev.selection.connect(on_selection)


def _map_table(w, ev) -> None:
    """The segment map, the table and the stack panel at the cursor; then the picks,
    the OOM banner and the call tree (all of one moment: one ``moment`` event)."""
    vs = w.vs
    pending = {"sort": None}

    def on_document(doc) -> None:
        # After an OOM, the segments with the largest free gaps come first.
        pending["sort"] = (None if doc is None or vs.origin == "replace"
                           else SORT_ADDRESS if vs.origin == "host"
                           else SORT_FREE if doc.oom else SORT_ADDRESS)

    def on_moment(keep_view: bool) -> None:
        sort, pending["sort"] = pending["sort"], None
        doc = vs.view_doc
        if doc is None:
            w.map.set_document(None)
            w.table.set_rows(None, [])
            w.calltree.set_blocks(None, None)
            return
        # The OOM ruler belongs to the OOM's moment: drawn only while the map shows it.
        w.map.set_document(doc, vs.selection, sort=sort, fit=not keep_view, oom=vs.oom_shown())
        w.table.set_rows(doc, doc.blocks_in(vs.selection))
        w.stack.set_document(doc, keep=keep_view)
        vs.repick()  # the picked allocation at this moment (drawn by _picks)
        _banner(w)
        w._calltree_dirty = True
        w.refresh_calltree()
        w.momentShown.emit()

    ev.document.connect(on_document)
    ev.moment.connect(on_moment)


def _picks(w, ev) -> None:
    """The picked block / allocation in the map, the table, the timeline and the stack
    panel (``selected``; the view it was picked in shows it already)."""
    vs = w.vs

    def on_selected(b: int, i: int) -> None:
        origin = vs.pick_origin
        if origin == "interval":
            w.timeline.set_selected_interval(i)
            iv = vs.doc.intervals(vs.cursor_device)
            facts = w.timeline.interval_tooltip(i) + (
                "<br><i>live at the cursor: outlined in the map</i>" if vs.interval_live(i)
                else "<br><i>not live at the cursor</i>")
            w.stack.show_stack(int(iv.stack[i]), facts, vs.interval_details(i))
        if origin in ("interval", "moment-interval"):
            w.map.select_block(b, ensure_visible=b >= 0)
            if b >= 0:
                w.table.select_block(b)
            return
        if origin == "moment-none":
            w.map.select_block(-1, ensure_visible=False)
            w.table.select_block(-1)
            if w.stack.custom is None:
                w.stack.show_block(-1)
            return
        if origin != "moment":
            w.timeline.set_selected_interval(vs.interval_of_block(b))
        if origin != "map":
            w.map.select_block(b, ensure_visible=True)
        if origin != "table":
            w.table.select_block(b)
        w.stack.show_block(b, vs.interval_details(vs.interval_of_block(b)))

    ev.selected.connect(on_selected)


def _oom_controls(w) -> None:
    """The timeline's OOM / Latest buttons and the OOM actions, for the cursor."""
    m = w.vs.oom_marks()
    tl = w.timeline
    tl.oom_button.setEnabled(m.count > 0)
    tl.oom_button.setText(f"OOM ({m.count})" if m.count > 1 else "OOM")
    tl.prev_oom_button.setVisible(m.count > 1)
    tl.next_oom_button.setVisible(m.count > 1)
    tl.prev_oom_button.setEnabled(m.before)
    tl.next_oom_button.setEnabled(m.after)
    w.oom_action.setEnabled(m.count > 0)
    w.prev_oom_action.setEnabled(m.before)
    w.next_oom_action.setEnabled(m.after)
    tl.latest_button.setEnabled(m.not_latest)


def _banner(w) -> None:
    """The header's OOM banner for the moment (kept as it is without an OOM)."""
    doc = w.vs.doc
    if doc is None or doc.oom is None or w.vs.cursor_device is None:
        return
    m = w.vs.oom_marks()
    w.header.set_moment(doc, m.here, m.number, m.count, m.last_k)


def _draw_highlight(w, mask) -> None:
    """(``highlight``) the views draw the highlighted allocations, their legends name
    what they are."""
    label = w.vs.highlight_label()
    w.map.set_highlight(mask, label)
    w.timeline.set_highlight(mask, label)
