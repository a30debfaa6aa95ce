"""`vramscope diff A B` and `vramscope summary DIR` in real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import DATA, expected_for
from tests.model.test_ranks import make_rank_dir


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def counter_delta(name_a: str, name_b: str, key: str) -> int:
    a = expected_for(DATA / f"{name_a}.pickle")["memory_stats"]
    b = expected_for(DATA / f"{name_b}.pickle")["memory_stats"]
    return b[key] - a[key]


@pytest.mark.parametrize(
    "name_a,name_b", [("whatif_default", "whatif_expandable"), ("resnet50_train", "gpt2_oom")]
)
def test_diff_json_deltas_are_counter_differences(name_a, name_b):
    out = vramscope(
        "diff",
        str(DATA / f"{name_a}.pickle"),
        str(DATA / f"{name_b}.pickle"),
        "--json",
        "--top",
        "3",
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    for field, key in (
        ("allocated_bytes", "allocated_bytes.all.current"),
        ("reserved_bytes", "reserved_bytes.all.current"),
        ("active_bytes", "active_bytes.all.current"),
        ("requested_bytes", "requested_bytes.all.current"),
        ("peak_reserved_bytes", "reserved_bytes.all.peak"),
        ("peak_allocated_bytes", "allocated_bytes.all.peak"),
    ):
        assert d[f"delta_{field}"] == counter_delta(name_a, name_b, key), field
    assert d["a"]["file"].endswith(f"{name_a}.pickle")
    assert d["b"]["file"].endswith(f"{name_b}.pickle")
    assert len(d["top_stacks"]) <= 3 and d["devices"] and d["pools"]
    growth = [s["delta_bytes"] for s in d["top_stacks"]]
    assert growth == sorted(growth, reverse=True) and all(g > 0 for g in growth)
    for s in d["top_stacks"]:
        assert {"status", "delta_bytes", "bytes_a", "bytes_b", "label", "frames"} <= s.keys()
        assert s["delta_bytes"] == s["bytes_b"] - s["bytes_a"]


def test_diff_text_by_line():
    out = vramscope(
        "diff",
        str(DATA / "whatif_default.pickle"),
        str(DATA / "whatif_expandable.pickle"),
        "--by",
        "line",
        "--no-peaks",
    )
    assert out.returncode == 0, out.stderr
    assert "0 added, 0 removed, 2 changed" in out.stdout
    assert "reserved" in out.stdout and "-1.98 GiB" in out.stdout
    assert "changed  train_workloads.py:273 whatif" in out.stdout


SITES_HEADER = "live bytes at each side's peak by allocation site"


def _site_rows(lines: list[str], at: int) -> list[str]:
    """The indented rows under the sites' header at line ``at``."""
    rows = []
    for line in lines[at + 1 :]:
        if not line.startswith("  "):
            break
        rows.append(line)
    return rows


@pytest.mark.parametrize(
    "a,b",
    [
        (DATA / "whatif_default.pickle", DATA / "whatif_expandable.pickle"),
        (DATA / "truth" / "gpt2_adamw_fp32.pickle.xz", DATA / "truth" / "gpt2_leak.pickle.xz"),
    ],
    ids=["allocator setting", "leak added"],
)
def test_diff_lists_the_sites_that_differ_never_a_bare_header(a, b):
    """The aligned part's sites: only those whose bytes differ, under the header; with
    none, one line says so. ``--json`` carries the same statuses and counts."""
    got = json.loads(vramscope("diff", str(a), str(b), "--json", "--top", "50").stdout)
    sites = got["sites"]  # (--top 50: every site)
    differ = [site for site in sites if site["a_bytes"] != site["b_bytes"]]
    same = len(sites) - len(differ)
    out = vramscope("diff", str(a), str(b), "--top", "50")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith(SITES_HEADER)]
    assert len(at) == 1, out.stdout
    rows = _site_rows(lines, at[0])
    if not differ:
        assert lines[at[0]] == (
            f"{SITES_HEADER}: no site differs ({len(sites)} sites hold "
            "the same bytes on both sides)"
        )
        assert rows == []
    else:
        assert lines[at[0]] == f"{SITES_HEADER}, largest change first:"
        listed, rest = rows[: len(differ)], rows[len(differ) :]
        for row, site in zip(listed, differ):
            assert site["frame"] in row and f" {site['status']} " in row, row
            assert row.split()[0] != "0", row  # never a row of "0 B"
        assert rest == (
            [
                f"  ({same} site{'s' if same > 1 else ''} "
                f"hold{'s' if same == 1 else ''} the same bytes on both sides)"
            ]
            if same
            else []
        )
    # --json: the same rule ("unchanged" where the bytes are the same) and the counts
    for site in sites:
        assert (site["status"] == "unchanged") == (site["a_bytes"] == site["b_bytes"]), site
    counts = got["site_counts"]
    assert sum(counts.values()) == len(sites) and counts["unchanged"] == same


def test_diff_text_names_the_ooms_of_each_side():
    """Regression: the text diff never mentioned OOMs."""
    out = vramscope(
        "diff",
        str(DATA / "resnet50_train.pickle"),
        str(DATA / "fragmentation_oom.pickle"),
        "--no-peaks",
    )
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("OOMs"))
    assert row.split()[-3:] == ["0", "2", "+2"], row
    assert "A's" not in out.stdout  # A ran without an OOM
    assert (
        "B's last OOM: 8.00 MiB requested on device 0: fragmentation: 1.74 GiB is free "
        "inside 178 segments of the large pool"
    ) in out.stdout


def test_diff_bad_input_exit_2_one_line(tmp_path):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"not a snapshot at all")
    out = vramscope("diff", str(DATA / "capacity_oom.pickle"), str(bad))
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vramscope: error: {bad}")
    usage = vramscope("diff", str(DATA / "capacity_oom.pickle"))
    assert usage.returncode == 2 and "usage: vramscope diff" in usage.stderr


def test_summary_directory_json_one_entry_per_rank(tmp_path):
    d = make_rank_dir(tmp_path / "run")
    out = vramscope("summary", str(d), "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert [r["rank"] for r in s["ranks"]] == [0, 1, 2, 3]
    assert s["outlier_ranks"] == [3] and s["world_size"] == 4
    oom = expected_for(DATA / "fragmentation_oom.pickle")["memory_stats"]
    r3 = s["ranks"][3]
    assert r3["outlier"] and r3["oom"] and r3["reason"] == "oom"
    assert r3["reserved_bytes"] == oom["reserved_bytes.all.current"]
    assert r3["peak_allocated_bytes"] == oom["allocated_bytes.all.peak"]
    assert r3["file"].endswith("_rank3_cuda1_oom_20250301-142501-318.pickle")
    assert not any(r["outlier"] for r in s["ranks"][:3])
    assert s["skipped"] == ["baseline.pickle"]
    text = vramscope("summary", str(d))
    assert text.returncode == 0 and "   3 *" in text.stdout and "no outlier" not in text.stdout


def test_summary_of_a_real_torchrun_directory():
    """Recorded with `torchrun --nproc-per-node 2 -m vramscope.capture` on 2 x H200."""
    import json as _json
    import subprocess as _sp
    import sys as _sys

    from tests.conftest import DATA as _DATA

    out = _sp.run(
        [_sys.executable, "-m", "vramscope.viewer", "summary", str(_DATA / "ddp_2ranks"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    summary = _json.loads(out.stdout)
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert summary["world_size"] == 2 and summary["outlier_ranks"] == [0, 1]
    by_rank = {r["rank"]: r for r in summary["ranks"]}
    assert by_rank[0]["oom"] and not by_rank[1]["oom"]
    assert by_rank[1]["reserved_bytes"] - by_rank[0]["reserved_bytes"] > (1 << 30)
