"""advise's notes never contradict its own split: where the split says memory scales
with the batch, the note does not say nothing does.

Files whose every remedy saved nothing (the peak was reserved before the recording, or
is held by memory no change removes) once got "no remedy has its evidence ... nothing
that scales with the batch" under a split with gigabytes that scale.
"""

from __future__ import annotations

import pytest

from tests import shared_data
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.remedies.advise import advise
from vramscope.viewer.model.whatif import prepare

NO_EVIDENCE = "nothing that scales with the batch"
# Two real recordings (../shared/external) on which every remedy tried saves nothing:
# one whose peak was reserved before the recording, one where it was not.
FILES = [
    "Wedsonlin_assignment2-systems-results_medium_1024_training_memory_snapshot.pickle.xz",
    "a0kuma_ckptTry-cp_t1_rm_save_to_frame.pickle.xz",
]


@shared_data.MARK
@pytest.mark.parametrize("name", FILES)
def test_a_note_never_says_nothing_scales_under_a_split_that_scales(name):
    path = shared_data.require(shared_data.EXTERNAL / name)
    adv = advise(prepare(load_snapshot(path)))
    assert adv.split_at_peak["scales_with_batch"] > 0
    assert not adv.remedies
    assert not any(NO_EVIDENCE in n for n in adv.notes), adv.notes
    said = [n for n in adv.notes if "tried on this recording, none lowers" in n]
    assert len(said) == 1, adv.notes
    floor_note = any("reserved before the recording started" in n for n in adv.notes)
    assert ("reserved before the recording" in said[0].split("set by")[1]) == floor_note
