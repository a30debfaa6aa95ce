"""``vramscope report FILE -o OUT.html [--device N|all]`` in real subprocesses, its pages
laid out in a real headless Chromium 1400 px wide: no horizontal overflow, every
section there, the same figures as ``advise --json``; bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import browser, shared_data
from tests.conftest import DATA
from vramscope.viewer.model.core.units import format_bytes
from vramscope.viewer.model.remedies.advise import peak_text, peak_words
from vramscope.viewer.model.reports.html_report import DeviceSection, ReportParts, build_html

GPT2_OOM = DATA / "gpt2_oom.pickle"
THREE_GPUS = shared_data.EXTERNAL / "Constructor-Sun_code_location-memory_snapshot.pickle.xz"
WIDTH = 1400
# A device section with the views of the window: every part of the page.
ALL_PARTS = [
    "Figures",
    "What the memory is",
    "What would make it fit",
    "Top allocation sites",
    "Views",
]


def vramscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def report(path: Path, out: Path, *more: str) -> str:
    got = vramscope("report", str(path), "-o", str(out), *more)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == f"wrote {out}"
    return out.read_text(encoding="utf-8")


def fits_in(page: str, folder: Path) -> dict:
    """The page laid out ``WIDTH`` px wide, asserted not wider."""
    m = browser.measure(page, folder, WIDTH)
    assert m["clientWidth"] == WIDTH
    assert m["scrollWidth"] <= WIDTH and m["widest"] <= WIDTH, m
    return m


def _rows(page: str, device: int) -> list[str]:
    """The HTML of the remedies table's rows in ``device``'s section (header left out)."""
    part = page.split(f'id="device-{device}"', 1)[1].split("</section>", 1)[0]
    table = part.split('<table class="remedies">', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]


def _cells(page: str, device: int) -> list[list[str]]:
    return [
        [
            re.sub(r"<[^>]+>", "", c).replace("&#x27;", "'")
            for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)
        ]
        for r in _rows(page, device)
    ]


def test_report_of_an_oom_in_chromium_says_what_advise_says(tmp_path):
    page = report(GPT2_OOM, tmp_path / "gpt2.html")
    m = fits_in(page, tmp_path / "chromium")
    assert m["sections"] == ["device-0:" + "|".join(ALL_PARTS)]
    got = vramscope("advise", str(GPT2_OOM), "--json")
    assert got.returncode == 0, got.stderr
    adv = json.loads(got.stdout)
    words = peak_words(adv["recorded_peak_reserved_bytes"], adv["needed_peak_reserved_bytes"])
    assert words[:1].upper() + words[1:] in page
    assert f"Recorded peak reserved {format_bytes(adv['recorded_peak_reserved_bytes'])}" in page
    rows = _cells(page, 0)
    assert len(rows) == len(adv["remedies"]) > 0
    for cells, r in zip(rows, adv["remedies"]):
        rng = r["predicted_peak_reserved_range"]
        assert cells[1] == peak_text(
            r["predicted_peak_reserved_bytes"],
            tuple(rng) if rng else None,
            r["predicted_peak_is_estimate"],
        ), r["remedy"]
        assert cells[4] == r["fits_word"], r["remedy"]
    assert "maybe" in [c[4] for c in rows]  # (the limit inside an estimate's range)
    # An allocator setting changes no line of code: no empty code box in its row.
    alloc = [row for row, r in zip(_rows(page, 0), adv["remedies"]) if r["where"] is None]
    assert alloc and "<code></code>" not in page and all("<code>" not in c for c in alloc)
    browser.screenshot(tmp_path / "gpt2.html", tmp_path / "gpt2.png", WIDTH)


def test_report_names_what_cuda_graphs_hold_in_the_words_of_summary(tmp_path):
    """reduce-overhead: the report's split (at the end of the trace) is followed by the
    gradients the backward graph's replays hold in its pool, as summary --at says them."""
    from vramscope.viewer.model.categories.wording import held_words

    path = DATA / "zoo" / "cmp_ro_encoder_adamw_fp32_b8.pickle.xz"
    page = report(path, tmp_path / "graphs.html")
    got = vramscope("summary", str(path), "--json", "--at", "5015")
    held = json.loads(got.stdout)["graph_held_at"]
    assert list(held) == ["gradient"]
    text = held_words(held).replace("'", "&#x27;")
    assert f"<p>Beside it: {text} <span" in page
    fits_in(page, tmp_path / "chromium")


@shared_data.MARK
def test_report_of_three_gpus_has_a_section_each_in_chromium(tmp_path):
    path = shared_data.require(THREE_GPUS)
    page = report(path, tmp_path / "all.html")
    m = fits_in(page, tmp_path / "chromium")
    ids = [s.split(":")[0] for s in m["sections"]]
    got = vramscope("advise", str(path), "--json")
    oom_device = json.loads(got.stdout)["device"]
    assert ids[0] == f"device-{oom_device}" and sorted(ids) == ["device-0", "device-1", "device-2"]
    assert m["sections"][0] == f"device-{oom_device}:" + "|".join(ALL_PARTS)
    for s in m["sections"][1:]:  # the other devices: everything but the window's views
        assert s.split(":")[1] == "|".join(ALL_PARTS[:-1]), s
    one = report(path, tmp_path / "one.html", "--device", "0")
    assert [s.split(":")[0] for s in fits_in(one, tmp_path / "c1")["sections"]] == ["device-0"]
    assert "this report covers device 0 (not 1, 2)" in one
    browser.screenshot(tmp_path / "all.html", tmp_path / "all.png", WIDTH)


def test_long_paths_wrap_at_1400_px(tmp_path):
    """A Where path, a leak's line and a site of 600 characters without a space."""
    long = "/very/deep/" + "x" * 600 + "/train.py:12"
    sec = DeviceSection(
        0,
        figures=[("Reserved", "1.00 GiB")],
        leaks=[
            {
                "frame": long,
                "function": "f",
                "bytes_per_iteration": 1,
                "iterations": 2,
                "live_bytes": 3,
            }
        ],
        advice={
            "recorded_peak_reserved_bytes": 1 << 30,
            "needed_peak_reserved_bytes": 1 << 30,
            "remedies": [
                {
                    "title": "t",
                    "change": "c",
                    "where": long,
                    "method": "simulated",
                    "predicted_peak_reserved_bytes": 1 << 29,
                    "saving_bytes": 1 << 29,
                    "fits_word": "yes",
                }
            ],
        },
        top_sites=[
            {"frame": long, "filename": long, "function": "f", "bytes": 5 << 20, "count": 7}
        ],
    )
    page = build_html(ReportParts(title=long, path=long, devices=[sec]))
    fits_in(page, tmp_path / "chromium")


@pytest.mark.parametrize(
    "args, says",
    [
        (["/no/such/file.pickle"], "no such file"),
        ([str(DATA)], "a directory"),
        ([str(GPT2_OOM), "--device", "one"], "--device one: a device number"),
        ([str(GPT2_OOM), "--device", "7"], "no device 7 in this snapshot"),
        ([str(GPT2_OOM), "--timeout", "0"], "--timeout 0"),
        (["ssh://host/x.pickle"], "needs a local file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    out = tmp_path / "r.html"
    got = vramscope("report", *args, "-o", str(out))
    assert got.returncode == 2, got
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in got.stderr, got.stderr
    # The prefix every command uses for its one line.
    assert lines[0].startswith("vramscope: error: "), lines[0]
    assert not out.exists()


def test_an_output_in_no_folder_is_one_line_and_exit_2(tmp_path):
    got = vramscope("report", str(GPT2_OOM), "-o", str(tmp_path / "none" / "r.html"))
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "no folder" in got.stderr


@pytest.mark.parametrize(
    "content, says", [(b"", "the file is empty"), (b"garbage\n", "not a memory snapshot")]
)
def test_a_file_that_is_no_snapshot_is_one_line_and_exit_2(content, says, tmp_path):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(content)
    out = tmp_path / "r.html"
    got = vramscope("report", str(bad), "-o", str(out))
    assert got.returncode == 2, got
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], got.stderr
    assert not out.exists()
