"""The Qt-free layout code the views use (model/annotations.py, ...): no QApplication."""

from __future__ import annotations

import numpy as np

from vramscope.viewer.model.annotations import pair_ranges, place_labels
from vramscope.viewer.model.load import load_snapshot

from conftest import DATA  # noqa: E402


def test_place_labels_keeps_the_important_and_drops_overlaps():
    rects = np.array([
        [0, 0, 100, 20],     # most important
        [50, 10, 150, 30],   # overlaps the first: dropped
        [160, 0, 200, 20],   # clear
        [190, 100, 260, 120],  # past the right edge: dropped, not clipped
        [0, 25, 40, 45],     # clear (more than pad below the first)
        [101, 0, 130, 20],   # within pad of the first: dropped
    ], float)
    keep = place_labels(rects, bounds=(0, 0, 250, 200), pad=2)
    assert keep.tolist() == [True, False, True, False, True, False]
    # fixed rects are obstacles whatever the bounds
    keep = place_labels(np.array([[-50, 0, 10, 10], [0, 0, 20, 10], [30, 0, 40, 10]], float),
                        bounds=(0, 0, 100, 100), fixed=1)
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
