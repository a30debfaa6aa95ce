"""model.view.exactness: whether the header's figures at ViewState's moment are exact, and the
OOM banner's mark; Qt-free (the views only draw these)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.model.test_oom_exactness import cut_ring
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core.snapshot import Action
from vramscope.viewer.model.view.document import Document
from vramscope.viewer.model.view.exactness import figures_mark, oom_mark, untrusted_of
from vramscope.viewer.model.view.view_state import ViewState


@pytest.fixture(scope="module")
def cut_doc(tmp_path_factory):
    snap = load_snapshot(cut_ring(tmp_path_factory.mktemp("cut") / "cut.pickle"))
    return Document.build(snap)


def test_figures_are_marked_inside_the_estimated_stretch_only(cut_doc):
    vs = ViewState()
    vs.set_document(cut_doc)
    (u,) = untrusted_of(cut_doc)
    assert untrusted_of(cut_doc) is untrusted_of(cut_doc.at(0, 5))  # once per document
    rep = cut_doc.timeline.replay(0)
    first, last = np.flatnonzero(rep.action == Action.OOM).tolist()
    assert first <= u.last_event < last
    vs.set_cursor(first)
    mark = figures_mark(vs)
    assert mark is not None and "estimated" in mark.text and u.reason in mark.tip
    vs.set_cursor(u.last_event)  # the stretch's last event: still estimated
    assert figures_mark(vs) is not None
    vs.set_cursor(u.last_event + 1)
    assert figures_mark(vs) is None
    vs.set_cursor(last)
    assert figures_mark(vs) is None
    vs.set_cursor(0)
    assert figures_mark(vs) is not None
    vs.set_cursor(len(rep) - 1)  # the snapshot as recorded: its own segments, exact
    assert vs.view_doc is cut_doc and figures_mark(vs) is None


def test_the_oom_mark_follows_the_report(cut_doc):
    first, last = cut_doc.ooms
    assert oom_mark(last) is None
    mark = oom_mark(first)
    assert mark is not None and mark.text == f"not exact: {first.not_exact_reason}"
    assert first.not_exact_reason in mark.tip
    assert cut_doc.oom is last  # the document's OOMs are marked (Document.build)


def test_an_exact_recording_has_no_mark(loaded_snapshots):
    from tests.conftest import DATA

    doc = Document.build(loaded_snapshots(DATA / "fragmentation_oom.pickle"))
    vs = ViewState()
    vs.set_document(doc)
    for k in (0, doc.timeline.replay(0).__len__() // 2, doc.ooms[0].event_index):
        vs.set_cursor(k)
        assert figures_mark(vs) is None
    assert [oom_mark(r) for r in doc.ooms] == [None, None]
