"""The Qt-free layout code the views use (model/view/: annotations, curve_lod, ...): no
QApplication."""

from __future__ import annotations

import numpy as np
from conftest import DATA

from tests import shared_data
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.view.annotations import pair_ranges, place_labels


def test_place_labels_keeps_the_important_and_drops_overlaps():
    rects = np.array(
        [
            [0, 0, 100, 20],  # most important
            [50, 10, 150, 30],  # overlaps the first: dropped
            [160, 0, 200, 20],  # clear
            [190, 100, 260, 120],  # past the right edge: dropped, not clipped
            [0, 25, 40, 45],  # clear (more than pad below the first)
            [101, 0, 130, 20],  # within pad of the first: dropped
        ],
        float,
    )
    keep = place_labels(rects, bounds=(0, 0, 250, 200), pad=2)
    assert keep.tolist() == [True, False, True, False, True, False]
    # fixed rects are obstacles whatever the bounds
    keep = place_labels(
        np.array([[-50, 0, 10, 10], [0, 0, 20, 10], [30, 0, 40, 10]], float),
        bounds=(0, 0, 100, 100),
        fixed=1,
    )
    assert keep.tolist() == [True, False, True]


def test_pair_ranges_of_a_real_trace():
    snap = load_snapshot(DATA / "gpt2_oom.pickle")
    ann = snap.annotations
    r = pair_ranges(ann, 0)
    assert len(r) > 0 and np.all(r.end_us >= r.start_us)
    names = {snap.strings[int(n)].split("#")[0] for n in r.name.tolist()}
    assert "Optimizer.step" in names
    starts = int(np.count_nonzero((ann.device == 0) & ann.is_start))
    assert len(r) <= starts


# --------------------------------------------------------------------------- ViewState

import pytest  # noqa: E402

from vramscope.viewer.model.analysis.figures import Selection  # noqa: E402
from vramscope.viewer.model.view.document import Document  # noqa: E402
from vramscope.viewer.model.view.view_state import ViewState  # noqa: E402

SUN = shared_data.EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"


def _doc(name):
    return Document.build(load_snapshot(DATA / name if isinstance(name, str) else name))


@pytest.fixture(scope="module")
def gpt2():
    return _doc("gpt2_oom.pickle")


def test_view_state_opens_at_the_end_and_moves_with_events(gpt2):
    vs = ViewState()
    seen = []
    vs.events.document.connect(lambda d: seen.append(("doc", d)))
    vs.events.cursor.connect(lambda dev, k: seen.append(("cursor", dev, k)))
    vs.set_document(gpt2)
    n = gpt2.n_events(0)
    assert seen == [("doc", gpt2), ("cursor", 0, n - 1)]
    assert vs.cursor_device == 0 and vs.cursor_k == n - 1
    assert vs.selection == Selection() and vs.opening_event() is None  # the OOM is the end
    assert vs.set_cursor(10_000) and seen[-1] == ("cursor", 0, 10_000)
    assert vs.view_doc.snap is gpt2.at(0, 10_000).snap
    assert vs.set_cursor(10**9) and vs.cursor_k == n - 1 and vs.at_latest()
    assert vs.oom_target(0) == gpt2.oom_events(0)[-1]
    assert "device 0" in vs.scope_text() and "the OOM" in vs.scope_text()


def test_view_state_picks_follow_the_moment(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    vs.set_cursor(17_700)
    iv = gpt2.intervals(0)
    live = np.flatnonzero((iv.start <= 17_700) & (iv.end > 17_700) & (iv.end < gpt2.n_events(0)))
    i = int(live[np.argmax(iv.size[live])])
    picked = []
    vs.events.selected.connect(lambda b, j: picked.append((b, j)))
    b = vs.select_interval(i)
    assert b >= 0 and picked == [(b, i)]
    assert int(vs.view_doc.snap.blocks.address[b]) == int(iv.addr[i])
    assert vs.interval_of_block(b) == i
    vs.set_cursor(int(iv.end[i]))  # freed: no block any more, the allocation stays picked
    assert vs.reselect() == (-1, True) and vs.selected_interval == i
    # highlight: one mask per stack, node & search combined
    hl = []
    vs.events.highlight.connect(hl.append)
    m = np.zeros(len(gpt2.snap.stacks), bool)
    m[:3] = True
    vs.set_search_mask(m)
    n = m.copy()
    n[1:] = False
    vs.set_node_mask(n)
    assert hl[0] is m and hl[-1].tolist() == (m & n).tolist()


def test_view_state_carries_picks_to_a_newer_document(gpt2):
    vs = ViewState()
    vs.set_document(gpt2)
    iv = gpt2.intervals(0)
    i = int(np.flatnonzero(iv.end >= gpt2.n_events(0))[0])  # alive at the end
    vs.select_interval(i)
    carried = vs.carried()
    newer = _doc("gpt2_oom.pickle")  # the same process, read again: other indices' objects
    sel = vs.carry_selection(gpt2, newer, Selection(device=0, stream=0))
    assert sel == Selection(device=0, stream=0)
    assert vs.carry_selection(gpt2, newer, Selection(device=7)).device is None
    vs.replace_document(newer, sel)
    assert vs.doc is newer and vs.selected_block == -1
    assert vs.find_interval(carried.interval) == i


@shared_data.needs(SUN)
def test_view_state_of_three_devices_opens_on_the_ooms_device_at_the_oom():
    doc = _doc(SUN)
    vs = ViewState()
    vs.set_document(doc)
    assert vs.selection == Selection(device=doc.oom.device) and vs.cursor_device == 1
    k = vs.opening_event()
    assert k == doc.oom_events(1)[-1] < doc.n_events(1) - 1
    assert vs.oom_shown() is None  # at the end: the OOM's request is not this layout's
    vs.set_cursor(k)
    assert vs.oom_shown() is not None and vs.oom_shown().requested_bytes == doc.oom.requested_bytes


def test_curve_decimation_keeps_every_bucket_maximum():
    """model/view/curve_lod: an envelope of a million events at 800 px keeps each pixel
    bucket's maximum (from the precomputed levels) and every point when it fits."""
    from vramscope.viewer.model.view.curve_lod import decimate, envelope_levels

    rng = np.random.default_rng(3)
    y = rng.integers(0, 1 << 30, 1_000_000).astype(np.int64)
    xs = np.arange(len(y), dtype=np.float64)
    levels = envelope_levels(y)
    assert [lv for lv, _ in levels] == [64, 4096]
    x_out, y_out = decimate(xs, y, 0, len(y) - 1, 800, levels=levels)
    assert len(y_out) < 2000 and y_out.max() == y.max()
    # each drawn value is the max of the events from its x to the next one's
    edges = np.append(x_out.astype(np.int64), len(y))
    for j in range(0, len(y_out), 97):
        assert y_out[j] == y[edges[j] : edges[j + 1]].max()
    x_small, y_small = decimate(xs, y, 1000, 1500, 800, levels=levels)
    assert np.array_equal(y_small, y[1000:1501]) and np.array_equal(x_small, xs[1000:1501])


def test_one_job_helper_reports_done_failed_and_cancelled(qtbot, qapp):
    """_qt/jobs.Job: the one worker-thread helper (loads, ranks, what-if): a result,
    a one-line error for a bug, and Cancel through the model's Progress."""
    import threading

    from vramscope.viewer._qt.widgets.jobs import Job

    job = Job(lambda j: 6 * 7)
    with qtbot.waitSignal(job.done, timeout=5000) as sig:
        job.start()
    job.wait()
    assert sig.args == [42] and job.result == 42

    def broken(j):
        raise ValueError("no such pool\nsecond line")

    job = Job(broken)
    with qtbot.waitSignal(job.failed, timeout=5000) as sig:
        job.start()
    job.wait()
    assert sig.args[0] == "unexpected error: ValueError: no such pool second line"

    started = threading.Event()

    def slow(j):
        progress = j.progress()
        started.set()
        for i in range(10_000):
            progress.update("work", i / 10_000)  # raises LoadCancelled once cancelled
            threading.Event().wait(0.001)
        return "finished"

    job = Job(slow)
    with qtbot.waitSignal(job.cancelled, timeout=5000):
        job.start()
        started.wait(5)
        job.cancel()
    job.wait()
    assert job.result is None


def test_live_source_extends_a_real_trace_exactly():
    """model/live/doc_source: a ring that grows (prefixes of gpt2_oom's trace, each with
    the segments of its instant) is extended update by update, never replayed whole,
    and ends exactly where the full build of the file does."""
    import dataclasses

    from vramscope.viewer.model.live.doc_source import LiveDocumentSource

    snap = load_snapshot(DATA / "gpt2_oom.pickle")
    full = Document.build(snap)
    rep = full.timeline.replay(0)
    n = full.n_events(0)
    trace_fields = [f.name for f in dataclasses.fields(snap.trace)]
    source = LiveDocumentSource()
    for k in (4000, 9000, 15000, 21000, n - 1):
        at = full.at(0, k).snap
        rows = int(rep.rows[k]) + 1
        part = dataclasses.replace(
            at, trace=type(snap.trace)(**{f: getattr(snap.trace, f)[:rows] for f in trace_fields})
        )
        doc = source.apply(part, dropped_total=0)
        assert doc.n_events(0) == k + 1
    assert source.builds == 1 and source.extends == 4 and source.fallbacks == 0
    live = doc.timeline.replay(0)
    assert live.inconsistencies == rep.inconsistencies == 0
    for curve in ("reserved", "allocated", "active", "requested"):
        assert np.array_equal(
            np.asarray(doc.curves(0)[curve][:n]), np.asarray(full.curves(0)[curve][:n])
        ), curve
    assert len(doc.intervals(0)) == len(full.intervals(0))
    a, b = doc.at(0, 12_345).snap.blocks, full.at(0, 12_345).snap.blocks
    assert sorted(zip(a.address.tolist(), a.size.tolist(), a.state.tolist())) == sorted(
        zip(b.address.tolist(), b.size.tolist(), b.state.tolist())
    )
