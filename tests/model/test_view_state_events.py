"""The ViewState's events, without Qt: their order and their coalescing.

The views (each Qt widget subscribes in its own constructor) redraw on ``moment`` and
draw the timeline on ``trace`` / ``cursor``; so one change of what is shown must emit each
once, in the order the views rely on (document, trace, cursor, then moment).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.conftest import DATA
from tests.snapshot_forms import raw_object, with_newer_fields
from vramscope.viewer.model import Selection, load_bytes
from vramscope.viewer.model.core.snapshot import HOST_DEVICE, BlockState
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.view.document import Document
from vramscope.viewer.model.view.view_state import ViewState


@pytest.fixture(scope="module")
def gpt2() -> Document:
    return Document.build(load_snapshot(DATA / "gpt2_oom.pickle"))


@pytest.fixture(scope="module")
def with_host() -> Document:
    obj, _ = with_newer_fields(raw_object(DATA / "fragmentation_oom.pickle"), host=True)
    return Document.build(load_bytes(pickle.dumps(obj, protocol=4)))  # trusted test data


def _listen(vs: ViewState) -> list[tuple]:
    seen: list[tuple] = []
    ev = vs.events
    ev.document.connect(lambda d: seen.append(("document", vs.origin)))
    ev.selection.connect(lambda s: seen.append(("selection", s)))
    ev.trace.connect(lambda dev: seen.append(("trace", dev)))
    ev.cursor.connect(lambda dev, k: seen.append(("cursor", dev, k)))
    ev.moment.connect(lambda keep: seen.append(("moment", keep)))
    return seen


def test_opening_emits_document_trace_cursor_then_one_fresh_moment(gpt2):
    vs = ViewState()
    seen = _listen(vs)
    vs.set_document(gpt2)
    n = gpt2.n_events(0)
    assert seen == [("document", "open"), ("trace", 0), ("cursor", 0, n - 1), ("moment", False)]
    seen.clear()
    vs.set_document(None)
    assert seen == [("document", "open"), ("trace", None), ("cursor", None, -1), ("moment", False)]


def test_one_cursor_move_is_one_cursor_and_one_moment_that_keeps_the_view(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    seen = _listen(vs)
    assert vs.set_cursor(10_000)
    assert seen == [("cursor", 0, 10_000), ("moment", True)]
    seen.clear()
    vs.set_document(None)
    seen.clear()
    assert not vs.set_cursor(5)  # no trace: nothing moves, nothing is drawn
    assert seen == []


def test_batch_coalesces_moments_and_keeps_the_view_only_if_all_did(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    seen = _listen(vs)
    with vs.batch():
        vs.set_cursor(100)
        vs.set_cursor(200)
        with vs.batch():  # nested: still one moment, at the outer end
            vs.set_cursor(300)
        assert [e for e in seen if e[0] == "moment"] == []
    assert seen == [("cursor", 0, 100), ("cursor", 0, 200), ("cursor", 0, 300), ("moment", True)]
    seen.clear()
    with vs.batch():
        vs.set_cursor(400)
        vs.set_selection(Selection(is_small=True))  # a new filter: the view is fitted again
    assert [e for e in seen if e[0] == "moment"] == [("moment", False)]
    assert vs.cursor_k == 400  # the same device's trace: the cursor stays


def test_a_selection_emits_selection_then_moment_and_the_trace_only_on_another_device(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    vs.set_cursor(1_000)
    seen = _listen(vs)
    assert not vs.set_selection(Selection(stream=0))
    assert seen == [("selection", Selection(stream=0)), ("moment", False)]
    seen.clear()
    vs.set_selection(Selection(stream=0))  # the same: redrawn, but no selection event
    assert seen == [("moment", False)]


def test_host_memory_and_back_each_redraw_once(with_host):
    vs = ViewState()
    vs.set_document(with_host)
    seen = _listen(vs)
    assert vs.show_host(True)
    moments = [e for e in seen if e[0] == "moment"]
    assert moments == [("moment", False)] and seen[0] == ("document", "host")
    assert vs.host_shown and vs.selection == Selection(device=HOST_DEVICE)
    seen.clear()
    assert vs.show_host(False, 0)
    assert [e for e in seen if e[0] == "moment"] == [("moment", False)]
    assert seen[0] == ("document", "host") and ("selection", Selection(device=0)) in seen
    assert seen.index(("selection", Selection(device=0))) < seen.index(("moment", False))
    assert not vs.host_shown and vs.selection == Selection(device=0) and vs.doc is with_host


def test_a_newer_document_keeps_the_view_and_carries_the_picked_address(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    blocks = gpt2.snap.blocks
    first = int(np.flatnonzero(blocks.state == BlockState.ALLOCATED)[0])
    b = vs.live_block(int(blocks.address[first]))
    assert b >= 0
    vs.select_block(b)
    carried = vs.carried()
    seen = _listen(vs)
    vs.replace_document(gpt2, vs.carry_selection(gpt2, gpt2, carried.selection), carried.addr)
    n = gpt2.n_events(0)
    assert seen == [("document", "replace"), ("trace", 0), ("cursor", 0, n - 1), ("moment", True)]
    assert vs.selected_addr == carried.addr and vs.reselect() == (b, False)


def test_stacks_mask_skips_unknown_ids(gpt2):
    m = ViewState.stacks_mask(gpt2, [0, 2, -1, 10**9])
    assert m.shape == (len(gpt2.snap.stacks),) and m.sum() == 2 and m[0] and m[2]


def test_oom_marks_follow_the_cursor(gpt2):
    vs = ViewState()
    assert vs.oom_marks().count == 0 and not vs.oom_marks().not_latest
    vs.set_document(gpt2)
    ooms = gpt2.oom_events(0)
    m = vs.oom_marks()  # gpt2 ends at its OOM
    assert m.count == len(ooms) >= 1 and m.number == len(ooms) and m.here is not None
    assert m.last_k == ooms[-1] and not m.after and not m.not_latest
    vs.set_cursor(ooms[0] - 1)
    m = vs.oom_marks()
    assert m.after and not m.before and m.number == 0 and m.here is None and m.not_latest


def test_repick_emits_the_picked_allocation_at_the_new_moment(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    vs.set_cursor(17_700)
    iv = gpt2.intervals(0)
    live = np.flatnonzero((iv.start <= 17_700) & (iv.end > 17_700) & (iv.end < gpt2.n_events(0)))
    i = int(live[np.argmax(iv.size[live])])
    b = vs.select_interval(i)
    assert b >= 0 and vs.pick_origin == "interval"
    picked = []
    vs.events.selected.connect(lambda blk, j: picked.append((vs.pick_origin, blk, j)))
    vs.repick()  # the same moment: the same block
    assert picked == [("moment-interval", b, i)]
    vs.set_cursor(int(iv.end[i]))  # freed there: no block, the allocation stays picked
    vs.repick()
    assert picked[-1] == ("moment-interval", -1, i)
    vs.select_block(-1)
    vs.repick()
    assert picked[-1] == ("moment-none", -1, -1)


def test_holders_at_the_cursor_or_the_peak(gpt2):
    vs = ViewState()
    assert vs.holders_at() is None
    vs.set_document(gpt2)
    vs.set_cursor(10_000)
    doc, mask, caption = vs.holders_at()
    assert doc is vs.view_doc and caption == "at the cursor (event 10,000)"
    assert mask.shape == (len(doc.snap.blocks),) and mask.all()  # everything selected
    vs.set_selection(Selection(is_small=True))
    _, small, _ = vs.holders_at()
    assert 0 < small.sum() < len(small)
    peak, _, caption = vs.holders_at(20_000)
    assert peak.snap is gpt2.at(0, 20_000).snap and "peak" in caption and "20,000" in caption


def test_carry_over_picks_the_same_allocation_in_a_newer_document(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    iv = gpt2.intervals(0)
    i = int(np.flatnonzero(iv.end >= gpt2.n_events(0))[-1])  # alive at the end
    b = vs.select_interval(i)
    carried = vs.carried()
    newer = Document.build(load_snapshot(DATA / "gpt2_oom.pickle"))  # another object
    seen = _listen(vs)
    picked = []
    vs.events.selected.connect(lambda blk, j: picked.append((vs.pick_origin, blk, j)))
    vs.carry_over(newer, carried)
    assert vs.doc is newer and seen[0] == ("document", "replace") and seen[-1] == ("moment", True)
    assert vs.selected_interval == i and picked == [("interval", b, i)]
    assert int(newer.snap.blocks.address[b]) == int(iv.addr[i])
