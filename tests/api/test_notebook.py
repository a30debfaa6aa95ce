"""The example notebook runs through a real Jupyter kernel (nbclient): ``%load_ext
vramscope``, a ``%%vramscope`` cell (on a machine without CUDA: its one line, and the
cell runs), a recording and its answers displayed.  The recording's HTML is then laid
out in a real headless Chromium: every section of the report, no horizontal overflow,
nothing fetched from the network; screenshots on a light and a dark page."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests import browser

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "viewer" / "examples" / "vramscope_in_jupyter.ipynb"
SECTIONS = [
    "Memory over time",
    "Figures",
    "What the memory is",
    "What would make it fit",
    "Top allocation sites",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The example notebook, run in a kernel in a copy of its working folder's view:
    the kernel's cwd is the repository root (the notebook opens tests/data), its
    snapshots go to a temporary folder."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    out = tmp_path_factory.mktemp("nb")
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = cell.source.replace("--out snapshots/notebook", f"--out {out}")
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    return nb, out


def outputs(cell) -> tuple[str, str, list[str]]:
    """(stdout and stderr, the plain text of its results, its HTML outputs)."""
    stream = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    plain = "".join(
        o["data"].get("text/plain", "")
        for o in cell.outputs
        if o.output_type in ("execute_result", "display_data")
    )
    htmls = [
        o["data"]["text/html"]
        for o in cell.outputs
        if o.output_type in ("execute_result", "display_data") and "text/html" in o["data"]
    ]
    return stream, plain, htmls


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def test_no_cell_fails(executed):
    nb, _ = executed
    for cell in code_cells(nb):
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source


def test_the_magic_without_cuda_says_so_in_one_line_and_runs_the_cell(executed):
    nb, out = executed
    magic = next(c for c in code_cells(nb) if c.source.startswith("%%vramscope"))
    stream, plain, _ = outputs(magic)
    lines = [line for line in stream.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("vramscope: CUDA is not available"), lines
    assert plain == "True"  # the cell ran: its last line's value is shown
    assert not any(out.iterdir())  # nothing recorded


def test_answers_display_as_the_report_and_print_as_the_cli(executed):
    import vramscope

    nb, _ = executed
    cells = code_cells(nb)
    # The notebook's path, as it spelled it (the kernel ran in the repository root).
    os.chdir(ROOT)
    rec = vramscope.open("tests/data/gpt2_oom.pickle")
    summary = next(c for c in cells if c.source.startswith("summary = rec.summary()"))
    stream, plain, htmls = outputs(summary)
    assert stream.strip() == rec.summary().oom_verdict
    assert plain == str(rec.summary())  # IPython's plain text is the CLI's text
    assert len(htmls) == 1 and '<p class="verdict">' in htmls[0]
    advice = next(c for c in cells if c.source.strip() == "advice")
    _, plain, htmls = outputs(advice)
    assert plain == str(rec.advise())
    assert "What would make it fit" in htmls[0]
    whatif = next(c for c in cells if c.source.startswith("rec.whatif"))
    assert outputs(whatif)[2], "whatif shows as HTML too"


def recording_html(nb) -> str:
    cell = next(c for c in code_cells(nb) if c.source.startswith("rec = vramscope.open("))
    _, _, htmls = outputs(cell)
    assert len(htmls) == 1
    return htmls[0]


def test_the_recording_is_self_contained(executed):
    nb, _ = executed
    html = recording_html(nb)
    assert "<script" not in html.lower()
    assert not re.search(
        r"""(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//""", html, re.I
    )
    assert html.startswith('<div class="vramscope-report">')


@pytest.mark.parametrize("width", [1000, 700])
def test_the_recording_lays_out_in_chromium_with_every_section(executed, tmp_path, width):
    nb, _ = executed
    fragment = recording_html(nb)
    page = f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{fragment}</body></html>"
    got = browser.measure(page, tmp_path / "measure", width=width)
    assert got["sections"] == ["device-0:" + "|".join(SECTIONS)]
    assert got["scrollWidth"] <= got["clientWidth"], got
    assert got["widest"] <= got["clientWidth"], got
    light = tmp_path / "light.html"
    light.write_text(page, encoding="utf-8")
    dark = tmp_path / "dark.html"
    dark.write_text(
        page.replace("<body>", '<body style="background:#111;color:#ddd">'), encoding="utf-8"
    )
    shots = Path(os.environ.get("VRAMSCOPE_SHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    for name, src in (("light", light), ("dark", dark)):
        png = browser.screenshot(
            src, shots / f"notebook_{name}_{width}.png", width=width, height=2600
        )
        assert png.stat().st_size > 10_000
