"""The command line and the window say the same thing in the same words: the cursor's
event (0-based, of N events), a what-if run that ran out of memory, how much of the
split at the peak is a guess.  Real windows and panels (offscreen), real CLI processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.gui.conftest import DATA, FRAG

GPT2 = DATA / "gpt2_oom.pickle"


def cli(*args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", *map(os.fspath, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_cursors_event_is_said_alike_by_the_cli_header_and_timeline(loaded):
    window = loaded(FRAG)
    dev = window.vs.cursor_device
    n = window.vs.doc.n_events(dev)
    k = n // 3
    window.set_cursor(k)
    words = f"event {k:,} of {n:,}"  # 0-based, as --at takes it
    text = cli("summary", FRAG, "--at", str(k), "--device", str(dev))
    assert f"after {words} on device {dev}:" in text.splitlines()[1], text
    assert f"after {words}" in window.header.scope.text(), window.header.scope.text()
    assert window.timeline.cursor_text().startswith(words), window.timeline.cursor_text()


def test_a_setting_that_runs_out_of_memory_says_so_in_the_panel_as_in_the_cli(qtbot):
    """The What-if panel's "vs recorded" of a row that stopped at an OOM is the CLI's
    "out of memory", never a percentage of a peak cut short (it read "+0.0%")."""
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.whatif.panel import COL_OOM, COL_VS, WhatIfPanel
    from vramscope.viewer.model import load_snapshot

    conf = "expandable_segments:True"
    application()
    panel = WhatIfPanel(load_snapshot(FRAG))
    qtbot.addWidget(panel)
    panel.show()
    panel.set_checked([conf])
    with qtbot.waitSignal(panel.finished, timeout=120000):
        panel.run_button.click()
    rows = {
        panel.table.item(r, 0).text(): (
            panel.table.item(r, COL_VS).text(),
            panel.table.item(r, COL_OOM).text(),
        )
        for r in range(panel.table.rowCount())
    }
    stopped = {name: vs for name, (vs, oom) in rows.items() if oom != "-"}
    assert stopped, rows  # (the recorded run of this file ends in an OOM)
    assert set(stopped.values()) == {"out of memory"}, rows
    table = cli("whatif", FRAG, "--conf", conf)
    line = next(ln for ln in table.splitlines() if ln.startswith(conf))
    assert "out of memory" in line and rows[conf][0] == "out of memory"


def test_the_summary_says_how_much_of_the_split_is_a_guess_as_the_window_does(loaded):
    from vramscope.viewer._qt.app import settle_categories
    from vramscope.viewer.model.core.units import format_bytes

    s = json.loads(cli("summary", GPT2, "--json"))
    guessed = s["categories_guessed_bytes_at_peak"]
    assert guessed > 0  # gpt2_oom: most of its activations are placed by a guess
    line = next(ln for ln in cli("summary", GPT2).splitlines() if ln.startswith("at the peak:"))
    total = format_bytes(sum(s["categories_at_peak"].values()))
    said = f"{total} ({format_bytes(guessed)} guessed) = "
    assert line.startswith(f"at the peak: {said}"), line
    window = loaded(GPT2)
    settle_categories(window, 120)
    window.set_cursor(s["peak_requested_event"])
    shown = window.categories_wiring.header_split.text.text()
    assert shown.startswith(said), shown
