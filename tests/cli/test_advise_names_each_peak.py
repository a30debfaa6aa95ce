"""`vramscope advise` names the recorded peak and the peak the run needs apart.

On a run that ran out of memory the two differ: the recording's peak reserved
(memory_stats' ``reserved_bytes.all.peak``, up to the OOM) and the simulated peak the
run needs to get through (the failed request served), from which the savings count.
Real subprocesses on gpt2_oom, whose sidecar carries the allocator's counters.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import DATA, expected_for
from vramscope.viewer.model.core.units import format_bytes

GPT2_OOM = DATA / "gpt2_oom.pickle"


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_recorded_peak_is_the_counter_and_savings_count_from_the_needed_peak():
    recorded = expected_for(GPT2_OOM)["memory_stats"]["reserved_bytes.all.peak"]
    out = vramscope("advise", str(GPT2_OOM), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["recorded_peak_reserved_bytes"] == recorded
    needed = got["needed_peak_reserved_bytes"]
    assert needed > recorded  # the request that failed, served
    assert got["remedies"]
    for r in got["remedies"]:
        assert r["saving_bytes"] == needed - r["predicted_peak_reserved_bytes"], r["remedy"]


def test_every_remedy_carries_the_one_fits_word():
    out = vramscope("advise", str(GPT2_OOM), "--json")
    assert out.returncode == 0, out.stderr
    rems = json.loads(out.stdout)["remedies"]
    for r in rems:
        want = (
            "-"
            if r["fits"] is None
            else "maybe"
            if r["range_holds_limit"]
            else "yes"
            if r["fits"]
            else "no"
        )
        assert r["fits_word"] == want, r["remedy"]
    # The recording's limit lies inside some estimate's range: "maybe", not yes/no.
    assert "maybe" in {r["fits_word"] for r in rems}


def test_text_says_each_peak_under_its_name():
    recorded = expected_for(GPT2_OOM)["memory_stats"]["reserved_bytes.all.peak"]
    out = vramscope("advise", str(GPT2_OOM))
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert f"recorded peak reserved {format_bytes(recorded)}" in first, first
    js = json.loads(vramscope("advise", str(GPT2_OOM), "--json").stdout)
    assert f"needed to run through {format_bytes(js['needed_peak_reserved_bytes'])}" in first
