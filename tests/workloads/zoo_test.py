"""The zoo's plan keeps its promises, and its committed recordings carry a usable truth.

The plan (tests/workloads/zoo.py) is data: enough programs and families, every program at
three batch sizes, language models at three sequence lengths, each remedy pair on at least
three families, and a tuning/held-out split that holds every family exactly once.  The
recordings in tests/data/zoo were made on the GPU machine by zoo_one.py: their truth files
must hold what the report compares against.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import zoo  # noqa: E402
import zoo_table  # noqa: E402

DATA = HERE.parents[0] / "data" / "zoo"


def test_the_plan_has_enough_programs_families_and_sizes():
    families = {p["family"] for p in zoo.PROGRAMS}
    assert len(zoo.PROGRAMS) >= 40
    assert len(families) >= 6
    ids = [p["program"] for p in zoo.PROGRAMS]
    assert len(ids) == len(set(ids))
    names = [s["name"] for s in zoo.plan()]
    assert len(names) == len(set(names))
    for p in zoo.PROGRAMS:
        mine = [s for s in zoo.plan() if s.get("program") == p["program"] and "pair" not in s]
        assert len({s["batch"] for s in mine}) >= 3, p["program"]
        if p["input"] == zoo.LM:
            assert len({s["seq"] for s in mine}) >= 3, p["program"]


def test_every_setting_the_zoo_promises_is_in_it():
    seen = {k: {p.get(k) for p in zoo.PROGRAMS} for k in ("amp", "loop", "compile")}
    optimizers = {p.get("optimizer", "adamw") for p in zoo.PROGRAMS}
    assert {"adamw", "adamw_fused", "sgd", "sgd_momentum", "adafactor"} <= optimizers
    assert {None, "bf16", "fp16"} <= seen["amp"]
    assert {"trainer", "accelerate", "lightning"} <= seen["loop"]
    assert {"default", "reduce-overhead", "max-autotune-no-cudagraphs"} <= seen["compile"]
    assert any(p.get("dtype") == "bfloat16" for p in zoo.PROGRAMS)
    assert any(p.get("peft") for p in zoo.PROGRAMS)
    assert {p.get("attn", "sdpa") for p in zoo.PROGRAMS} >= {"sdpa", "eager"}


def test_each_remedy_pair_covers_three_families_and_names_real_programs():
    fams: dict[str, set[str]] = {}
    for remedy, pid, before, after in zoo.PAIRS:
        fams.setdefault(remedy, set()).add(zoo.program(pid)["family"])
        assert before or after, (remedy, pid)
    for remedy, f in fams.items():
        assert len(f) >= 3, (remedy, f)


def test_the_split_holds_every_family_once():
    families = {p["family"] for p in zoo.PROGRAMS}
    assert not set(zoo_table.TUNING) & set(zoo_table.HELD_OUT)
    assert set(zoo_table.TUNING) | set(zoo_table.HELD_OUT) == families


def committed() -> list[Path]:
    return sorted(DATA.glob("*.truth.json"))


def test_some_recordings_are_committed():
    assert len(committed()) >= 5
    assert {json.loads(p.read_text())["loop"] for p in committed()} >= {
        "plain",
        "trainer",
        "lightning",
    }


@pytest.mark.parametrize("path", committed(), ids=lambda p: p.name.split(".")[0])
def test_a_committed_truth_is_what_the_report_reads(path):
    t = json.loads(path.read_text())
    stem = path.name[: -len(".truth.json")]
    side = json.loads((path.parent / f"{stem}.json").read_text())
    assert (path.parent / f"{stem}.pickle.xz").is_file()
    assert t["schema"] == "vramscope-truth/1"
    assert t["family"] in zoo_table.TUNING + zoo_table.HELD_OUT
    # The real peak the report compares against is the run's own counter.
    assert t["peak_reserved_bytes"] == side["memory_stats"]["reserved_bytes.all.peak"]
    # The state the program trained with (Lightning moves it to the CPU when fit() ends:
    # the truth takes it at the end of the last step).
    assert t["parameters"]["bytes"] > 0
    assert (
        t["parameters_trainable"]["bytes"] + t["parameters_frozen"]["bytes"]
        == t["parameters"]["bytes"]
    )
    assert t["gradients"]["bytes"] == t["parameters_trainable"]["bytes"]
    if t["settings"].get("optimizer", "adamw") != "sgd":
        assert t["optimizer_state"]["bytes"] > 0
    assert t["iterations"] == t["settings"]["iters"]
