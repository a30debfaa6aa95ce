"""The remedy catalogue is a registry: every remedy advise offers comes from one spec of
it, each spec has its own id and words, and every estimate keeps the segments reserved
before the recording (the one floor rule)."""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.remedies.advise import advise
from vramscope.viewer.model.remedies.catalogue import SPECS
from vramscope.viewer.model.remedies.catalogue.spec import floored
from vramscope.viewer.model.remedies.remedy import ESTIMATED, GPU_FREED, SIMULATED
from vramscope.viewer.model.whatif import prepare


def test_each_spec_has_its_own_id_and_its_words():
    ids = [s.id for s in SPECS]
    assert len(ids) == len(set(ids)), ids
    for s in SPECS:
        assert s.title and s.change, s.id
        assert s.method in (SIMULATED, ESTIMATED, GPU_FREED), s.id


@pytest.mark.parametrize("name", ["gpt2_leak", "limit_sweep_gpt2_oom"])
def test_every_remedy_offered_is_a_spec_s(name):
    advice = advise(prepare(load_snapshot(DATA / "truth" / f"{name}.pickle.xz")))
    by_id = {s.id: s for s in SPECS}
    assert advice.remedies
    for r in advice.remedies:
        spec = by_id[r.remedy.split(":")[0]]
        # A remedy is labelled as its spec says, or estimated from the split at the OOM.
        assert r.method == spec.method or (spec.split_after_oom and r.method == ESTIMATED)


def test_an_end_computed_from_the_split_stays_above_the_floor():
    floor = 1000
    point, rng, at_floor = floored(900, 400, 1200, floor, from_split=True, point_floored=True)
    assert point == floor and rng == (floor, 1200) and at_floor
    # A simulated run's end keeps the floor's segments itself: taken as it is.
    point, rng, at_floor = floored(1100, 400, 1200, floor, from_split=False, point_floored=False)
    assert point == 1100 and rng == (400, 1200) and at_floor
    # No floor, no word of it; a range of zero width is no range.
    point, rng, at_floor = floored(900, 900, 900, 0, from_split=True, point_floored=True)
    assert point == 900 and rng is None and not at_floor
