"""The memory limit a recording ran under is never inferred above what its OOM allows.

At an OOM the allocator records the device's free memory (``cudaMemGetInfo``), taken
after it released every cached segment it could and retried.  So the limit it could
have had is at most the reserved total at that instant plus that free memory.  The
reserved total is read from the replayed layout at the OOM (:mod:`..analysis.oom`),
not from the inference.  Every file with an OOM in tests/data and ../shared is
walked; ../shared missing fails (the walk must not pass on nothing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import shared_data
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.analysis.oom import oom_reports
from vramscope.viewer.model.core.snapshot import Action
from vramscope.viewer.model.remedies.advise import advise
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.whatif import prepare

ROOT = Path(__file__).resolve().parents[2]
SHARED = shared_data.SHARED
DIRS = [ROOT / "tests" / "data", SHARED / "snapshots", SHARED / "external"]


def _files() -> list[Path]:
    out = []
    for d in DIRS:
        out += [
            p
            for p in sorted(d.rglob("*"))
            if p.is_file() and (".pickle" in p.name or p.name.endswith((".json.xz", ".pkl.xz")))
        ]
    return out


def _with_oom() -> list[Path]:
    found = []
    for p in _files():
        snap = load_snapshot(p)
        if np.any(snap.trace.action == Action.OOM):
            found.append(p)
    return found


FILES = _with_oom()


@shared_data.MARK
def test_the_walk_has_the_shared_files():
    if not SHARED.is_dir():
        shared_data.missing(f"{SHARED} (the walk below would cover only tests/data)")
    names = {p.name for p in FILES}
    assert "Constructor-Sun_code_location-memory_snapshot.pickle.xz" in names
    assert "gpt2_oom.pickle" in names and len(FILES) >= 10


def _allowed(snap) -> dict[int, int]:
    """device -> the most any limit allowed the allocator at its OOMs (reserved after
    the release + the device's free), from the replayed layout at each OOM."""
    out: dict[int, int] = {}
    for r in oom_reports(snap, build_timeline(snap)):
        if r.device_free_bytes >= 0:
            cap = r.reserved_bytes + r.device_free_bytes
            out[r.device] = min(out.get(r.device, cap), cap)
    return out


@pytest.mark.parametrize(
    "path",
    [shared_data.param(p) if SHARED in p.parents else p for p in FILES],
    ids=lambda p: p.name.split(".")[0][:40],
)
def test_the_inferred_limit_is_never_above_what_the_oom_allows(path):
    snap = load_snapshot(path)
    allowed = _allowed(snap)
    assert allowed, "every file here has an OOM that recorded the device's free memory"
    for device, cap in allowed.items():
        case = prepare(snap, device)
        if case.limit_source in ("sidecar", "given"):
            continue  # the program's own limit (set_per_process_memory_fraction), not inferred
        assert case.limit is not None and case.limit <= cap, (device, case.limit, cap)
        assert case.bounds.upper is not None and case.bounds.upper <= cap


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0][:40])
def test_no_batch_at_or_above_the_oom_ing_one_is_said_to_fit(path):
    snap = load_snapshot(path)
    for device, cap in _allowed(snap).items():
        case = prepare(snap, device)
        a = advise(case)
        if a.largest_scale_that_fits is not None:
            assert a.largest_scale_that_fits < 1, (device, a.largest_scale_that_fits)
        for r in a.remedies:
            if r.batch_scale is not None and r.fits:
                assert r.batch_scale < 1 and r.predicted_peak_reserved_bytes <= cap, r.title
        n = a.near_limit.next if a.near_limit is not None else None
        if n is not None and (n.fits or n.may_fit):
            assert n.scale < 1, (device, float(n.scale), n.peak, cap)
            assert n.peak <= cap or not n.fits, (device, float(n.scale), n.peak, cap)
