"""ViewState names its highlight for the legends (Qt-free): search, call-tree node,
category, a panel's pick; a panel's pick wins until it is cleared."""

from __future__ import annotations

import numpy as np

from vramscope.viewer.model.view.view_state import HIGHLIGHT_SEARCH, ViewState


def test_highlight_label_follows_what_is_highlighted():
    vs = ViewState()
    seen = []
    vs.events.highlight.connect(lambda mask: seen.append((mask, vs.highlight_label())))
    assert vs.highlight_label() == ""
    search = np.array([True, False, True])
    vs.set_search_mask(search)
    assert seen[-1][1] == HIGHLIGHT_SEARCH == "search match"
    remedy = np.array([False, True, False])
    vs.set_panel_mask(remedy, "acted on by: smaller batch")
    assert seen[-1][0] is remedy and seen[-1][1] == "acted on by: smaller batch"
    vs.set_category_mask(np.array([True, True, False]), "category: activations")
    assert vs.highlight_label() == "acted on by: smaller batch"  # the panel's, until cleared
    vs.set_panel_mask(None)
    assert seen[-1][1] == "category: activations" and vs.panel_label == ""
    vs.set_category_mask(None)
    assert seen[-1][0] is search and seen[-1][1] == "search match"
    vs.set_node_mask(np.array([True, True, True]))
    assert vs.highlight_label() == "search match in call-tree node"
    vs.set_search_mask(None)
    assert vs.highlight_label() == "call-tree node"
