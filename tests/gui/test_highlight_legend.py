"""The legends name what is highlighted (real file, real event loop, offscreen): a
search's matches are a "search match", the allocations a Diagnosis remedy acts on are
"acted on by: <remedy>"; clearing the remedy gives the search's name back."""

from __future__ import annotations

import os

from tests.gui.conftest import DATA

GPT2_LIMIT_OOM = DATA / "truth" / "limit_sweep_gpt2_oom.pickle.xz"


def test_legend_says_what_the_highlight_is(make_window, qtbot, load):
    from vramscope.viewer._qt.diagnosis.panel import open_panel
    from vramscope.viewer._qt.widgets import theme

    w = make_window()
    assert load(w, GPT2_LIMIT_OOM) == "loaded"
    legends = (w.map.legend, w.timeline.legend)
    qtbot.keyClicks(w.search, "forward")
    qtbot.waitUntil(lambda: w.vs.search_mask is not None, timeout=5000)
    assert w.vs.search_mask.any()
    for legend in legends:
        assert theme.SEARCH_LABEL in legend.text().replace("&nbsp;", " ")
    panel = open_panel(w)
    qtbot.waitUntil(lambda: panel.advice is not None and panel.thread is None, timeout=120000)
    row = next(
        r for r, rem in enumerate(panel.advice.remedies) if len(rem.acts_on_events(panel.case))
    )
    panel.table.selectRow(row)
    rem = panel.advice.remedies[row]
    assert w.timeline.stack_mask is not None and w.timeline.stack_mask.any()
    for legend in legends:
        text = legend.text().replace("&amp;", "&")
        name = f"acted on by: {rem.title}"  # (cut where long: the legends have little room)
        assert (
            name
            if len(name) <= theme.LEGEND_CHARS
            else name[: theme.LEGEND_CHARS - 1].rstrip() + "…"
        ) in text
        assert theme.SEARCH_LABEL not in text
    if os.environ.get("VRAMSCOPE_SHOTS"):
        w.grab().save(os.path.join(os.environ["VRAMSCOPE_SHOTS"], "remedy_legend.png"))
    # Cleared: the search's highlight and name are back.
    panel.table.clearSelection()
    for legend in legends:
        text = legend.text().replace("&nbsp;", " ")
        assert theme.SEARCH_LABEL in text and "acted on by" not in text
    if os.environ.get("VRAMSCOPE_SHOTS"):
        w.grab().save(os.path.join(os.environ["VRAMSCOPE_SHOTS"], "search_legend.png"))
    panel.close()


def test_segment_map_legend_items_break_between_not_inside(make_window, qtbot, load):
    """Coloured by category the map's legend takes two lines at 1440 px: it breaks between
    its items, never inside one ("largest free / gaps")."""
    w = make_window()
    assert load(w, GPT2_LIMIT_OOM) == "loaded"
    w.categories_wiring.color_action.setChecked(True)
    qtbot.waitUntil(
        lambda: "optimizer state" in w.map.legend.text().replace("&nbsp;", " "), timeout=60000
    )
    items = w.map.legend.text().split("&nbsp;&nbsp; ")
    assert len(items) >= 6, items
    for item in items:
        assert item.startswith('<span style="white-space:nowrap">') and item.endswith("</span>"), (
            item
        )
