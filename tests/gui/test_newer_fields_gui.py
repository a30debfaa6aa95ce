"""What newer torch writes, shown where a user looks for it.

The file is a real bundled snapshot re-written with every field torch 2.12+ adds
(tests/snapshot_forms.with_newer_fields), opened through the real loader thread.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.gui.conftest import DATA
from tests.snapshot_forms import ANNOTATION_TEXT, FX_FRAME, raw_object, with_newer_fields
from vramscope.viewer.model.analysis.alloc_details import FORWARD_HEADING, OVERWRITTEN_TEXT
from vramscope.viewer.model.core.snapshot import HOST_DEVICE

SOURCE = DATA / "fragmentation_oom.pickle"


@pytest.fixture(scope="module")
def newer_file(tmp_path_factory):
    obj, facts = with_newer_fields(raw_object(SOURCE))
    path = tmp_path_factory.mktemp("newer") / "newer_fields.pickle"
    path.write_bytes(pickle.dumps(obj, protocol=4))  # trusted test data
    return path, facts


def _interval_of_row(window, row):
    doc, dev = window.vs.doc, window.vs.cursor_device
    rep = doc.timeline.replay(dev)
    k = int(np.searchsorted(rep.rows, row))
    assert rep.rows[k] == row
    iv = doc.intervals(dev)
    return int(np.flatnonzero(iv.event == k)[0])


def test_forward_stack_of_an_allocation_in_the_stack_panel(loaded, newer_file):
    path, facts = newer_file
    window = loaded(path)
    i = _interval_of_row(window, facts["forward_rows"][0])
    window.select_interval(i)
    panel = window.stack
    texts = [panel.frames.item(r).text() for r in range(panel.frames.count())]
    # the allocation stack first, then the forward pass, FX node and model code
    n = len(panel.frame_texts())
    assert texts[:n] == panel.frame_texts()
    assert FORWARD_HEADING in texts[n:]
    start = texts.index(FORWARD_HEADING)
    assert texts[start + 1].strip() == "model.py:42 forward"
    assert texts[start + 2].strip() == "train.py:10 <module>"
    fx = (
        f"FX: node={FX_FRAME['fx_node_name']}, op={FX_FRAME['fx_node_op']}, "
        f"target={FX_FRAME['fx_node_target']}"
    )
    assert fx in [t.strip() for t in texts]  # under the FX-generated allocation frame
    assert any("y = self.fc(x)" in t for t in texts)  # fx_original_trace
    assert ANNOTATION_TEXT in [t.strip() for t in texts]
    assert any(t.strip().startswith("User metadata: step ") for t in texts)
    assert "model.py" in panel.text() and ANNOTATION_TEXT in panel.text()
    # a forward frame previews like a frame: its row maps to that frame
    row = start + 1
    assert panel.row_frames[row] is not None and panel.row_frames[row].line == 42
    # the tooltip of the allocation says it too
    tip = window.timeline.interval_tooltip(i)
    assert "User metadata: step " in tip and ANNOTATION_TEXT in tip


def test_ordinary_allocation_has_no_forward_section(loaded, newer_file):
    path, facts = newer_file
    window = loaded(path)
    doc, dev = window.vs.doc, window.vs.cursor_device
    rep, iv = doc.timeline.replay(dev), doc.intervals(dev)
    plain = set(facts["forward_rows"])
    i = next(
        j
        for j in range(len(iv))
        if iv.event[j] >= 0 and int(rep.rows[iv.event[j]]) not in plain and iv.stack[j] >= 0
    )
    window.select_interval(i)
    assert window.stack.detail_texts() == []
    assert "User metadata" not in window.timeline.interval_tooltip(i)


def test_block_tooltip_and_stack_of_a_live_annotated_block(loaded, newer_file):
    path, facts = newer_file
    window = loaded(path)
    doc, dev = window.vs.doc, window.vs.cursor_device
    iv = doc.intervals(dev)
    rows = doc.timeline.replay(dev).rows
    ids = [_interval_of_row(window, r) for r in facts["forward_rows"]]
    live = [i for i in ids if iv.end[i] > window.vs.cursor_k >= iv.start[i]]
    if not live:  # move the cursor onto one
        window.set_cursor(int(iv.start[ids[0]]))
        live = [ids[0]]
    i = live[0]
    b = window.vs.live_block(int(iv.addr[i]))
    assert b >= 0
    window.select_block(b)
    assert FORWARD_HEADING in window.stack.detail_texts()
    assert "User metadata: step " in window.map.block_tooltip(b)
    assert int(rows[iv.event[i]]) in facts["forward_rows"]


def test_annotation_markers_on_the_timeline(loaded, newer_file):
    path, facts = newer_file
    window = loaded(path)
    tl = window.timeline
    rep = window.vs.doc.timeline.replay(tl.device)
    annotated = [r for d, _a, r in facts["annotated"] if d == tl.device]
    assert tl.marker_count() == len(annotated) > 0
    ks = np.searchsorted(rep.rows, annotated)  # each right after its alloc event
    assert np.allclose(tl.notes_item.marker_x, ks + 0.5)
    # one item draws them all, not one per marker
    items = tl.plot.getPlotItem().items
    assert sum(1 for it in items if it is tl.notes_item) == 1 and len(items) < 20
    assert "annotation" in tl.legend.text()
    # hovering a marker at the top says the annotation
    x = float(tl.notes_item.marker_x[0])
    assert ANNOTATION_TEXT in tl.note_tooltip(x, 2)
    assert (
        tl.note_tooltip(x, 200) == ""
        or "overwritten" in tl.note_tooltip(x, 200)
        or "not exact" in tl.note_tooltip(x, 200)
        or "estimated" in tl.note_tooltip(x, 200)
    )
    # the time axis places them at the time of the event after them
    if tl.has_time:
        tl.set_mode("time")
        assert np.allclose(tl.notes_item.marker_x, tl.tx[np.minimum(ks + 1, tl.n - 1)])


def test_overflowed_ring_is_said_and_its_edge_marked(loaded, newer_file):
    path, _facts = newer_file
    window = loaded(path)
    note = window.header.integrity_text()
    assert "trace ring overflowed" in note and "100,000 entries" in note
    assert window.header.integrity.isVisible()
    tl = window.timeline
    assert tl.notes_item.edge_x is not None
    x0 = float(tl.x_of(0))
    assert tl.note_tooltip(x0 - 0.5, 200).startswith(OVERWRITTEN_TEXT)


def test_no_notes_on_an_ordinary_file(loaded):
    window = loaded(SOURCE)
    assert window.header.integrity_text() == ""
    assert window.timeline.marker_count() == 0 and window.timeline.notes_item.edge_x is None
    assert "annotation" not in window.timeline.legend.text()
    assert "not exact" not in window.timeline.legend.text()
    assert window.timeline.notes_item.stretches == []


def test_untrusted_stretch_is_hatched_with_its_reason(loaded, tmp_path):
    """A recording that lost an alloc event: the stretch the replay cannot apply is
    drawn with integrity.check's line as its tooltip."""
    from vramscope.viewer.model.replay import integrity

    obj = raw_object(SOURCE)
    trace = obj["device_traces"][0]
    allocs = [i for i, e in enumerate(trace) if e["action"] == "alloc"]
    del trace[allocs[len(allocs) // 2]]
    path = tmp_path / "lost_alloc.pickle"
    path.write_bytes(pickle.dumps(obj, protocol=4))  # trusted test data
    window = loaded(path)
    tl = window.timeline
    found = [u for u in integrity.check(window.vs.doc.timeline) if u.device == tl.device]
    assert found and found[-1].kind == "inconsistent"
    u = found[-1]
    spans = [s for s in tl.notes_item.stretches if s[2] == "inconsistent"]
    assert spans == [(u.first_event - 0.5, u.last_event + 0.5, "inconsistent")]
    mid = (u.first_event + u.last_event) / 2
    assert tl.note_tooltip(mid, 200) == u.line()
    assert tl.note_tooltip(u.first_event - 5, 200) != u.line()
    assert window.header.integrity_text() == ""  # the ring did not overflow
    assert "not exact" in tl.legend.text()


def test_real_recording_shows_forward_stack_of_backward_allocation(loaded):
    """tests/data/newer_fields.pickle: torch 2.11 on an H100 wrote forward_frames for
    allocations made in backward, and user_metadata: the panel shows both."""
    window = loaded(DATA / "newer_fields.pickle")
    snap, dev = window.vs.doc.snap, window.vs.cursor_device
    rep, iv = window.vs.doc.timeline.replay(dev), window.vs.doc.intervals(dev)
    fwd = np.flatnonzero(snap.trace.forward_stack >= 0)
    assert len(fwd)
    k = int(np.searchsorted(rep.rows, fwd[0]))
    i = int(np.flatnonzero(iv.event == k)[0])
    window.select_interval(i)
    texts = window.stack.detail_texts()
    assert texts[0] == FORWARD_HEADING
    shown = [ln.frame_id for ln in window.stack.detail_lines if ln.kind == "frame"]
    assert (
        shown[: len(snap.event_forward_frames(int(fwd[0])))]
        == snap.event_forward_frames(int(fwd[0])).tolist()
    )
    um = snap.trace.user_metadata[fwd[0]]
    if um >= 0:
        assert f"User metadata: {snap.string(int(um))}" in texts


def test_pinned_host_memory_is_its_own_device(loaded, newer_file):
    from vramscope.viewer.model import Selection, memory_stats

    path, _facts = newer_file
    window = loaded(path)
    snap = window.vs.doc.snap
    combo = window.device_combo
    i = window.combo_index(combo, HOST_DEVICE)
    assert i >= 0 and combo.itemText(i) == "host (pinned)"
    assert i == combo.count() - 1  # after the GPUs
    gpu_reserved = window.header.stats.reserved_bytes
    assert gpu_reserved == memory_stats(snap, window.vs.selection).reserved_bytes
    combo.setCurrentIndex(i)  # as the user picks it
    assert window.vs.host_shown and window.vs.selection.device == HOST_DEVICE
    host = snap.host
    stats = window.header.stats
    assert stats.reserved_bytes == host.reserved_bytes
    assert stats.allocated_bytes == host.allocated_bytes
    assert "pinned host memory" in window.header.scope.text()
    assert window.header.oom_text() == ""  # the GPU's OOM is not the host's
    # the map, table and timeline show the host's segments and events only
    assert set(window.vs.view_doc.snap.segments.device.tolist()) == {HOST_DEVICE}
    assert window.vs.cursor_device == HOST_DEVICE
    assert window.timeline.n == len(host.trace)
    # and no GPU figure ever includes them: back to device 0, the same figures as before
    combo.setCurrentIndex(window.combo_index(combo, 0))
    assert not window.vs.host_shown and window.vs.selection.device == 0
    assert (
        window.header.stats.reserved_bytes == memory_stats(snap, Selection(device=0)).reserved_bytes
    )
    assert "pinned host memory" not in window.header.scope.text()
    all_gpus = window.combo_index(combo, None)
    combo.setCurrentIndex(all_gpus)
    assert window.header.stats.reserved_bytes == memory_stats(snap, Selection()).reserved_bytes
    assert window.header.oom_text()  # the GPU's OOM banner is back


def test_no_host_entry_without_host_memory(loaded):
    window = loaded(SOURCE)
    assert window.combo_index(window.device_combo, HOST_DEVICE) == -1


def test_host_timeline_axis_names_pinned_memory(loaded, newer_file):
    path, _facts = newer_file
    window = loaded(path)
    window.device_combo.setCurrentIndex(window.combo_index(window.device_combo, HOST_DEVICE))
    label = window.timeline.plot.getPlotItem().getAxis("bottom").labelText
    assert "pinned host memory" in label and "device -1" not in label
