"""The Qt-free state behind the categories in the window: colour mode,
category filter, the iteration x phase spans and the ViewState's category highlight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.categories import CATEGORY_NAMES, MemoryBreakdown
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.view.category_view import CategoryView, phase_spans
from vramscope.viewer.model.view.view_state import ViewState

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def bd() -> MemoryBreakdown:
    snap = load_snapshot(DATA / "truth" / "gpt2_adamw_bf16.pickle.xz", use_cache=False)
    return MemoryBreakdown.build(snap, build_timeline(snap, keyframes=False), 0)


def test_phase_spans_follow_the_per_event_phases(bd):
    spans = phase_spans(bd)
    assert len(spans) == 3 * len(bd.iterations) == 18
    ph = bd.phases.phase
    for s in spans:
        code = ["other", "forward", "backward", "optimizer"].index(s.phase)
        assert ph[s.start] == code and ph[s.end] == code
        assert bd.phases.iteration[s.start] == s.iteration == bd.phases.iteration[s.end]
    # Every forward/backward/optimizer event of an iteration lies inside its span.
    it = bd.phases.iteration
    for s in spans:
        code = ["other", "forward", "backward", "optimizer"].index(s.phase)
        ev = np.flatnonzero((it == s.iteration) & (ph == code))
        assert ev.min() == s.start and ev.max() == s.end
    assert phase_spans(None) == []


def test_colour_mode_and_filter_emit_once_and_keep_blocks(bd):
    cv = CategoryView()
    seen = []
    cv.events.color_mode.connect(lambda m: seen.append(("mode", m)))
    cv.events.category_filter.connect(lambda f: seen.append(("filter", f)))
    cv.set_color_mode("category")
    assert not cv.by_category  # nothing to colour by yet
    cv.set_breakdown(bd)
    assert cv.by_category and len(cv.spans) == 18
    cv.set_color_mode("category")  # unchanged: no event
    with pytest.raises(ValueError):
        cv.set_color_mode("rainbow")
    cv.set_category_filter(["parameter"])
    cv.set_category_filter(list(CATEGORY_NAMES))  # all of them: no filter
    assert seen == [("mode", "category"), ("filter", frozenset({0})), ("filter", None)]
    k = int(np.argmax(bd.requested))
    live = bd.live(k)
    addrs = bd.intervals.addr[live]
    cv.set_category_filter([CATEGORY_NAMES.index("optimizer_state")])
    keep = cv.keep_blocks(k, addrs)
    want = bd.category[live] == CATEGORY_NAMES.index("optimizer_state")
    assert (keep == want).all() and keep.any()


def test_view_state_category_mask_wins_and_clears_with_the_document(bd):
    vs = ViewState()
    got = []
    vs.events.highlight.connect(got.append)
    search = np.zeros(len(bd.snap.stacks), bool)
    search[:3] = True
    vs.set_search_mask(search)
    cv = CategoryView()
    cv.set_breakdown(bd)
    mask = cv.leak_stack_mask(0, len(bd.snap.stacks))
    assert mask is None  # a healthy run: no leak to highlight
    mask = cv.category_stack_mask(CATEGORY_NAMES.index("parameter"), len(bd.snap.stacks))
    vs.set_category_mask(mask)
    assert vs.highlight_mask() is mask and got[-1] is mask
    vs.set_category_mask(None)
    assert (vs.highlight_mask() == search).all()
    vs.set_category_mask(mask)
    vs.set_document(None)
    assert vs.category_mask is None
