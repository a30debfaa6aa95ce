"""`vramscope summary` on a file with newer torch's fields: GPU figures unchanged,
host memory reported as its own device, annotations counted, the overflow noted."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

from tests.conftest import DATA, expected_for
from tests.snapshot_forms import raw_object, with_newer_fields


def _summary(path, *args):
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "summary", str(path), *args, "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_summary_reports_newer_fields(tmp_path):
    obj, facts = with_newer_fields(raw_object(DATA / "fragmentation_oom.pickle"))
    path = tmp_path / "newer.pickle"
    path.write_bytes(pickle.dumps(obj))  # trusted test data
    out = _summary(path, "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    stats = expected_for(DATA / "fragmentation_oom.pickle")["memory_stats"]
    assert summary["reserved_bytes"] == stats["reserved_bytes.all.current"]  # host not added
    assert [d["device"] for d in summary["devices"]] == [0]
    assert summary["host_memory"] == {
        "device": -1,
        "reserved_bytes": 6 << 20,
        "allocated_bytes": 2 << 20,
        "segment_count": 2,
        "trace_events": 5,
    }
    assert summary["allocation_annotations"] == len(facts["annotated"])
    assert summary["forward_stacks"] == len(facts["forward_rows"])
    assert summary["trace_overflowed"] is True and summary["trace_max_entries"] == 100_000
    assert any("overflowed" in n for n in summary["notes"])

    text = _summary(path)
    assert text.returncode == 0, text.stderr
    assert (
        "pinned host memory (device 'host', not in the figures above): reserved 6.00 MiB"
        in text.stdout
    )
    assert f"{len(facts['annotated'])} allocation annotations" in text.stdout
    assert "note: the allocator's trace ring overflowed" in text.stdout


def test_summary_of_an_older_file_has_no_newer_facts():
    out = _summary(DATA / "side_stream_pending.pickle", "--json")
    summary = json.loads(out.stdout)
    assert summary["host_memory"] is None and summary["allocation_annotations"] == 0
    assert summary["trace_overflowed"] is None
