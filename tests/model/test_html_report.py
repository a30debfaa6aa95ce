"""The HTML report page (self-contained, escaped), which allocations leak, and the
min/max decimation of the category chart - on real recordings."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest

from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.categories import MemoryBreakdown
from vramscope.viewer.model.categories.leaks import leak_interval_mask, leaked_blocks
from vramscope.viewer.model.replay.timeline import build_timeline
from vramscope.viewer.model.reports.html_report import DeviceSection, ReportParts, build_html
from vramscope.viewer.model.view.curve_lod import decimate

DATA = Path(__file__).resolve().parents[1] / "data"
LEAK = DATA / "truth" / "gpt2_leak.pickle.xz"
BIG = DATA / "transformer_long_python_1000k.pickle.xz"
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


@pytest.fixture(scope="module")
def leak_bd():
    snap = load_snapshot(str(LEAK))
    timeline = build_timeline(snap)
    return snap, MemoryBreakdown.build(snap, timeline, 0)


def test_page_escapes_every_text_and_embeds_images():
    evil = '<script>alert("x")</script>&'
    sec = DeviceSection(
        0,
        figures=[(evil, evil)],
        verdict=evil,
        categories={"parameter": 3 << 20, "unknown": 1 << 20},
        leaks=[
            {
                "frame": evil,
                "function": evil,
                "bytes_per_iteration": 1,
                "iterations": 2,
                "live_bytes": 3,
            }
        ],
        advice={
            "verdict": evil,
            "recorded_peak_reserved_bytes": 1 << 30,
            "needed_peak_reserved_bytes": 1 << 30,
            "remedies": [
                {
                    "title": evil,
                    "change": evil,
                    "where": evil,
                    "predicted_peak_reserved_bytes": 1 << 29,
                    "saving_bytes": 1 << 29,
                    "method": "simulated",
                    "fits": True,
                    "fits_word": "yes",
                }
            ],
        },
        top_sites=[{"site": evil, "bytes": 5 << 20, "count": 7}],
        images=[(evil, PNG)],
    )
    parts = ReportParts(title=evil, path=f"/tmp/{evil}.pickle", devices=[sec], notes=[evil])
    page = build_html(parts)
    assert "<script>" not in page and evil not in page
    assert page.count("&lt;script&gt;") >= 10
    srcs = re.findall(r'src="([^"]+)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert base64.b64decode(srcs[0].split(",", 1)[1]) == PNG
    assert not re.search(r'(href|src)="(?!data:)', page)
    assert "75%" in page and "3.00 MiB" in page and "5.00 MiB" in page  # split, top site


def test_page_without_history_says_so():
    page = build_html(
        ReportParts(title="a.pickle", devices=[DeviceSection(None, advice_note="no trace")])
    )
    assert "No CUDA out-of-memory error" in page and "no trace" in page
    assert "Top allocation sites" not in page and "<img" not in page


def test_leak_mask_is_what_the_leaks_keep(leak_bd):
    snap, bd = leak_bd
    mask = leak_interval_mask(bd)
    assert mask.sum() == sum(len(lk.allocations) for lk in bd.leaks) > 0
    k = bd.n_events - 1
    iv = bd.intervals
    live = mask & (iv.start <= k) & (iv.end > k)
    assert int(iv.requested[live].sum()) == bd.leaked_bytes_at(k)
    # the blocks of the file (the state after the last event) that hold them
    at = leaked_blocks(bd, k, snap.blocks.address)
    assert at.sum() == live.sum()
    assert set(snap.blocks.address[at].tolist()) == set(iv.addr[live].tolist())


def test_no_leak_no_leaked_block():
    snap = load_snapshot(str(DATA / "fragmentation_oom.pickle"))
    bd = MemoryBreakdown.build(snap, build_timeline(snap), 0)
    assert not bd.leaks
    assert not leak_interval_mask(bd).any()
    assert not leaked_blocks(bd, bd.n_events - 1, snap.blocks.address).any()


@pytest.mark.parametrize("columns", [1, 7, 200, 1000])
def test_minmax_decimation_keeps_each_columns_min_and_max(columns):
    rng = np.random.default_rng(columns)
    y = rng.integers(0, 1000, 5003)
    lo, hi = 17, 4990
    ev, _ = decimate(None, y, lo, hi, columns, minmax=True)
    assert ev[0] == lo and ev[-1] == hi and (np.diff(ev) > 0).all()
    n = hi - lo + 1
    if n <= 2 * columns:
        assert len(ev) == n
        return
    assert len(ev) <= 2 * columns + 2
    starts = (np.arange(columns) * n) // columns
    for a, b in zip(starts, np.append(starts[1:], n)):
        inside = ev[(ev >= lo + a) & (ev < lo + b)]
        assert y[inside].max() == y[lo + a : lo + b].max()
        assert y[inside].min() == y[lo + a : lo + b].min()


def test_minmax_decimation_shows_every_iterations_peak():
    if not BIG.exists():
        pytest.skip("the long trace is not present")
    snap = load_snapshot(str(BIG))
    bd = MemoryBreakdown.build(snap, build_timeline(snap), 0)
    ev, _ = decimate(None, bd.requested, 0, bd.n_events - 1, 300, minmax=True)
    top = bd.requested[ev]
    # the peaks of the iterations (1,237 MiB each) are drawn, not three slow humps
    assert top.max() == bd.requested.max()
    assert (top >= 0.95 * bd.requested.max()).sum() >= 150


def _remedy(**kw):
    r = {
        "title": "t",
        "change": "c",
        "where": "train.py:3",
        "method": "estimated",
        "predicted_peak_reserved_bytes": 10 << 30,
        "saving_bytes": 1 << 30,
        "predicted_peak_reserved_range": [9 << 30, 11 << 30],
        "predicted_peak_is_estimate": True,
    }
    r.update(kw)
    return r


def _page(remedies, recorded=10 << 30, needed=11 << 30):
    advice = {
        "recorded_peak_reserved_bytes": recorded,
        "needed_peak_reserved_bytes": needed,
        "remedies": remedies,
    }
    return build_html(ReportParts(title="x", devices=[DeviceSection(0, advice=advice)]))


def test_the_fits_column_is_the_advices_own_word():
    """A limit inside the range: "maybe", whatever ``fits`` says (the CLI's and the panel's
    word, never decided again by the page)."""
    page = _page(
        [
            _remedy(fits=True, range_holds_limit=True, fits_word="maybe"),
            _remedy(fits=False, range_holds_limit=True, fits_word="maybe"),
        ]
    )
    assert re.findall(r'<td class="fits">([^<]*)</td>', page) == ["maybe", "maybe"]


def test_a_remedy_without_a_line_of_code_has_no_code_box():
    page = _page([_remedy(where=None, fits_word="yes"), _remedy(fits_word="no")])
    rows = re.findall(r'<td class="where">(.*?)</td>', page)
    assert rows == ["", "<code>train.py:3</code>"]


def test_the_recorded_and_the_needed_peak_each_under_its_name():
    page = _page([_remedy(fits_word="yes")])
    assert "Recorded peak reserved 10.00 GiB; needed to run through 11.00 GiB" in page
    assert "Recorded peak reserved 11.00 GiB" not in page
    assert "Recorded peak reserved 10.00 GiB;" not in _page([], needed=10 << 30)


def test_a_sites_line_number_reads_as_in_its_frame():
    """A line number is the file's line as the frame names it ('modeling_utils.py:3645'),
    never with a thousands separator like a count."""
    site = {
        "frame": "modeling_utils.py:3645 cuda",
        "filename": "modeling_utils.py",
        "line": 3645,
        "function": "cuda",
        "bytes": 5 << 20,
        "count": 1480,
    }
    page = build_html(ReportParts(title="x", devices=[DeviceSection(0, top_sites=[site])]))
    cells = re.findall(r'<td class="num">([^<]*)</td>', page)
    assert "3645" in cells and "3,645" not in page
    assert "1,480" in cells  # a count keeps its separator


def test_a_site_without_a_stack_has_no_line_number():
    """Allocations without a stack have no line (the summary gives 0): the cell is empty."""
    site = {
        "frame": "<no stack recorded>",
        "filename": "",
        "line": 0,
        "function": "",
        "bytes": 5 << 20,
        "count": 10,
    }
    page = build_html(ReportParts(title="x", devices=[DeviceSection(0, top_sites=[site])]))
    cells = re.findall(r'<td class="num">([^<]*)</td>', page)
    assert cells == ["", "5.00 MiB", "10"]


def test_advises_notes_are_on_the_page_with_or_without_remedies():
    """The notes the CLI prints under its table (why no remedy, what the answers rest
    on) are on the page too, escaped."""
    note = "23.45 GiB of the peak was reserved before the recording <started>"
    for remedies in ([], [_remedy(fits_word="yes")]):
        advice = {"recorded_peak_reserved_bytes": 1 << 30, "remedies": remedies, "notes": [note]}
        page = build_html(ReportParts(title="x", devices=[DeviceSection(0, advice=advice)]))
        assert page.count("reserved before the recording &lt;started&gt;") == 1
