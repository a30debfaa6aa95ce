"""Which device a view answers for when the user did not say (analysis.focus), on real
snapshots from the world (../shared/external, read in place; tests/shared_data.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from vramscope.viewer.model.analysis import focus
from vramscope.viewer.model.analysis.figures import Selection, memory_stats
from vramscope.viewer.model.analysis.oom import oom_reports
from vramscope.viewer.model.io.load import load_snapshot
from vramscope.viewer.model.replay.timeline import build_timeline

pytestmark = shared_data.MARK
EXTERNAL = shared_data.EXTERNAL
THREE_GPUS_OOM = EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"
TWO_GPUS_NO_TRACE = EXTERNAL / "albi2_thesis-text-to-SQL-dump_snapshot.dbc4621.pickle.xz"
ONE_GPU = EXTERNAL / "MercuryB1_SQAttn-cuda_memory_snapshot.pickle.xz"
SEGMENTS_ONLY_DEVICE_1 = EXTERNAL / "Muduard_LayoutEditing-memory_snapshot.pkl.xz"


def load(path: Path):
    return load_snapshot(str(shared_data.require(path)), use_cache=False)


def test_an_oom_on_the_second_of_three_gpus_is_the_default():
    snap = load(THREE_GPUS_OOM)
    reports = oom_reports(snap)
    assert reports and len(focus.devices_of(snap)) == 3
    oom_device = reports[-1].device
    assert oom_device != min(focus.devices_of(snap))  # not what "the first device" gives
    assert focus.default_device(snap) == oom_device
    assert focus.default_trace_device(snap) == oom_device
    assert focus.why_default(snap, oom_device) == "the last OOM's"
    assert focus.device_phrase(snap, oom_device, True) == f"device {oom_device} (the last OOM's)"
    assert focus.device_phrase(snap, oom_device, False) == f"device {oom_device}"
    assert focus.chosen_by(snap, oom_device, False) == "last_oom"
    assert focus.chosen_by(snap, 0, True) == "given"


def test_the_reserved_peaks_equal_the_replayed_ones():
    """The peaks found from the columns (no replay) are the replay's reserved peaks."""
    snap = load(THREE_GPUS_OOM)
    timeline = build_timeline(snap, keyframes=False)
    got = focus.peak_reserved_by_device(snap)
    for device in timeline.devices:
        value, _k = timeline.replay(device).peak("reserved")
        assert got[device] == value


def test_without_an_oom_the_higher_peak_is_the_default():
    """Two GPUs, no trace: each device's peak is what it reserves at the end."""
    snap = load(TWO_GPUS_NO_TRACE)
    devices = focus.devices_of(snap)
    assert len(devices) == 2 and focus.last_oom_device(snap) is None
    reserved = {d: memory_stats(snap, Selection(device=d)).reserved_bytes for d in devices}
    assert len(set(reserved.values())) == 2  # a real choice
    best = max(reserved, key=lambda d: reserved[d])
    assert focus.peak_reserved_by_device(snap) == reserved
    assert focus.default_device(snap) == best
    assert focus.why_default(snap, best) == "the highest reserved peak"
    assert focus.chosen_by(snap, best, False) == "highest_peak"
    assert focus.default_trace_device(snap) is None  # no trace events anywhere


def test_one_device_is_the_only_choice():
    snap = load(ONE_GPU)
    (device,) = focus.devices_of(snap)
    assert focus.default_device(snap) == focus.default_trace_device(snap) == device
    assert focus.device_phrase(snap, device, True) == f"device {device}"
    assert focus.chosen_by(snap, device, False) == "only"


def test_a_segments_only_file_answers_for_its_own_device():
    """A snapshot of device 1 alone (no trace): the default is that device, not 0."""
    snap = load(SEGMENTS_ONLY_DEVICE_1)
    assert not len(snap.trace)
    devices = sorted(np.unique(snap.segments.device).tolist())
    assert focus.devices_of(snap) == devices and len(devices) == 1
    assert focus.default_device(snap) == devices[0]
    assert focus.default_trace_device(snap) is None


def test_the_window_opens_on_the_device_the_cli_answers_for():
    """Document.trace_device (what the GUI shows first) is the focus rule, not a copy."""
    from vramscope.viewer.model.view.document import Document

    data = Path(__file__).resolve().parents[1] / "data"
    external = shared_data.external_files()
    if not external:
        shared_data.missing(str(EXTERNAL))
    ran = 0
    for path in sorted(data.glob("**/*.pickle*")) + external:
        snap = load_snapshot(path)
        if len(set(snap.trace.device.tolist())) < 2:
            continue
        ran += 1
        assert Document.build(snap).trace_device(None) == focus.default_trace_device(snap), path
    assert ran >= 1


def test_the_trace_device_range_follows_its_column():
    snap = load(THREE_GPUS_OOM)
    trace = snap.trace
    assert trace.device_range() == (int(trace.device.min()), int(trace.device.max()))
    assert trace.single_device() is None
    assert focus.trace_devices(snap) == sorted(set(trace.device.tolist()))
    # A new column (a live update, a slice): the answer is the new column's, not a memory.
    trace.device = np.full(len(trace.device), 2, np.int32)
    assert trace.device_range() == (2, 2) and trace.single_device() == 2
    assert focus.trace_devices(snap) == [2]
    trace.device = trace.device[:0]
    assert trace.device_range() is None and trace.single_device() is None
    assert focus.trace_devices(snap) == []


def test_one_device_is_chosen_without_walking_the_peaks(monkeypatch):
    snap = load(ONE_GPU)
    (only,) = focus.devices_of(snap)
    monkeypatch.setattr(focus, "peak_reserved_by_device", lambda s: pytest.fail("walked"))
    assert focus.default_trace_device(snap) == only
