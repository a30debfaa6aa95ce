"""alloc_details: what the GUI shows of newer torch's fields, computed without Qt.

Files: real bundled snapshots re-written with every field torch 2.12+ adds
(tests/snapshot_forms.with_newer_fields), loaded through the public path.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.conftest import DATA
from tests.snapshot_forms import ANNOTATION_TEXT, FX_FRAME, raw_object, with_newer_fields
from vramscope.viewer.model import load_bytes
from vramscope.viewer.model.analysis.alloc_details import (
    ANNOTATIONS_HEADING,
    FORWARD_HEADING,
    OVERWRITTEN_TEXT,
    allocation_details,
    annotation_markers,
    detail_lines,
    integrity_stretches,
    interval_rows,
    tooltip_lines,
)
from vramscope.viewer.model.replay import integrity
from vramscope.viewer.model.replay.timeline import build_timeline


@pytest.fixture(scope="module")
def newer():
    obj, facts = with_newer_fields(raw_object(DATA / "fragmentation_oom.pickle"))
    snap = load_bytes(pickle.dumps(obj, protocol=4))  # trusted test data
    return snap, facts, build_timeline(snap)


def _interval_of_row(tl, row):
    rep = tl.replay(0)
    iv = tl.intervals(0)
    k = int(np.searchsorted(rep.rows, row))
    assert rep.rows[k] == row
    return rep, iv, int(np.flatnonzero(iv.event == k)[0])


def test_forward_stack_fx_and_annotation_of_an_allocation(newer):
    snap, facts, tl = newer
    row = facts["forward_rows"][0]
    rep, iv, i = _interval_of_row(tl, row)
    d = allocation_details(snap, rep.rows, int(iv.event[i]), int(iv.end[i]))
    assert d.row == row
    lines = detail_lines(snap, d)
    texts = [ln.text for ln in lines]
    assert texts[0] == FORWARD_HEADING
    frames = [ln for ln in lines if ln.kind == "frame"]
    # forward_frames are written outermost first; shown innermost first
    assert [ln.text for ln in frames] == ["model.py:42 forward", "train.py:10 <module>"]
    assert ANNOTATIONS_HEADING in texts and ANNOTATION_TEXT in texts
    assert any(t.startswith("User metadata: step ") for t in texts)
    tips = tooltip_lines(snap, d)
    assert tips[0].startswith("User metadata: step ")
    assert any(ANNOTATION_TEXT in t for t in tips)
    assert not any(t.startswith("Compile context") for t in tips)  # "N/A" is no context


def test_fx_frame_lines(newer):
    snap, _facts, _tl = newer
    from vramscope.viewer.model.analysis.alloc_details import fx_lines

    fids = [f for f in range(len(snap.frames)) if snap.frames.fx_of(f)]
    assert fids
    lines = fx_lines(snap, fids[0])
    assert lines[0].text == (
        f"FX: node={FX_FRAME['fx_node_name']}, op={FX_FRAME['fx_node_op']}, "
        f"target={FX_FRAME['fx_node_target']}"
    )
    assert any("y = self.fc(x)" in ln.text for ln in lines if ln.kind == "source")
    assert (
        fx_lines(snap, next(f for f in range(len(snap.frames)) if not snap.frames.fx_of(f))) == []
    )


def test_no_details_for_ordinary_allocation(newer):
    snap, facts, tl = newer
    rep, iv = tl.replay(0), tl.intervals(0)
    plain = set(facts["forward_rows"])
    i = next(
        j for j in range(len(iv)) if iv.event[j] >= 0 and int(rep.rows[iv.event[j]]) not in plain
    )
    d = allocation_details(snap, rep.rows, int(iv.event[i]), int(iv.end[i]))
    assert detail_lines(snap, d) == [] and tooltip_lines(snap, d) == []
    assert interval_rows(rep.rows, -1, 5) is None


def test_annotation_markers_sit_after_their_allocation(newer):
    snap, facts, tl = newer
    rep = tl.replay(0)
    m = annotation_markers(snap, 0, rep.rows)
    annotated = [r for d, _a, r in facts["annotated"] if d == 0]
    assert len(m) == len(annotated) > 0
    # recorded right after its alloc event k: between events k and k + 1
    ks = np.searchsorted(rep.rows, annotated)
    assert m.position.tolist() == (ks + 1).tolist()
    assert np.allclose(m.x_events(), ks + 0.5)
    assert all(t == ANNOTATION_TEXT for t in m.text)
    assert m.nearest(float(ks[0]) + 0.6, m.x_events(), 0.5) == 0
    assert m.nearest(-100.0, m.x_events(), 0.5) == -1


def test_integrity_stretches(newer):
    snap, _facts, tl = newer
    s = integrity_stretches(snap, integrity.check(tl), 0)
    assert s[0].kind == "overwritten" and s[0].text.startswith(OVERWRITTEN_TEXT)
    fake = integrity.Untrusted(0, 3, 9, "inconsistent", "lost events")
    other = integrity.Untrusted(1, 0, 1, "inconsistent", "elsewhere")
    got = integrity_stretches(snap, [fake, other], 0)
    assert [(x.first, x.last, x.text) for x in got[1:]] == [(3, 9, fake.line())]


def test_hidden_fx_frames_get_their_own_section(newer):
    snap, facts, _tl = newer
    from vramscope.viewer.model.analysis.alloc_details import FX_HEADING, hidden_fx_lines

    row = facts["forward_rows"][0]
    stack = int(snap.trace.stack[row])
    fids = snap.stacks.frame_ids(stack).tolist()
    fx = [f for f in fids if snap.frames.fx_of(f)]
    assert fx
    lines = hidden_fx_lines(snap, stack, set())
    assert lines[0].text == FX_HEADING and lines[1].frame_id == fx[0]
    assert hidden_fx_lines(snap, stack, set(fids)) == []  # shown frames carry their own


def test_compile_context_is_shown_and_na_is_not():
    obj, facts = with_newer_fields(raw_object(DATA / "fragmentation_oom.pickle"))
    marked = 0
    for e in obj["device_traces"][0]:
        if e["action"] == "alloc" and str(e.get("user_metadata", "")).startswith("step"):
            e["compile_context"] = "torch.compile frame 0/1" if marked % 2 == 0 else "N/A"
            marked += 1
    snap = load_bytes(pickle.dumps(obj, protocol=4))  # trusted test data
    tl = build_timeline(snap)
    rep, iv = tl.replay(0), tl.intervals(0)
    got = []
    for row in facts["forward_rows"][:2]:
        k = int(np.searchsorted(rep.rows, row))
        i = int(np.flatnonzero(iv.event == k)[0])
        d = allocation_details(snap, rep.rows, int(iv.event[i]), int(iv.end[i]))
        got.append(
            (
                [ln.text for ln in detail_lines(snap, d) if ln.kind == "context"],
                [t for t in tooltip_lines(snap, d) if t.startswith("Compile context")],
            )
        )
    assert got[0] == (
        ["Compile context: torch.compile frame 0/1"],
        ["Compile context: torch.compile frame 0/1"],
    )
    assert got[1] == ([], [])  # torch's "N/A": no context recorded
