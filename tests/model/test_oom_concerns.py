"""Whether an OOM concerns a selection: one decision in the model (the segment map
draws the failed request only beside the memory it was about)."""

from __future__ import annotations

from tests.conftest import DATA
from vramscope.viewer.model import Selection, last_oom, load_snapshot


def test_an_oom_concerns_only_selections_that_hold_its_pool():
    snap = load_snapshot(DATA / "fragmentation_oom.pickle")
    oom = last_oom(snap)
    assert oom is not None
    small = oom.pool_kind == "small"
    assert oom.concerns(Selection())
    assert oom.concerns(
        Selection(device=oom.device, stream=oom.stream, is_small=small, pool=oom.pool)
    )
    assert not oom.concerns(Selection(device=oom.device + 1))
    assert not oom.concerns(Selection(stream=oom.stream + 1))
    assert not oom.concerns(Selection(is_small=not small))
    other_pool = (oom.pool or 0) + 1
    assert not oom.concerns(Selection(pool=other_pool))
