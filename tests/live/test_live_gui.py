"""File ▸ Attach… and the live window, with a real event loop (pytest-qt, offscreen)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")
# Every test gets its own settings file; real user settings are never touched.
pytestmark = pytest.mark.usefixtures("isolated_qt_settings")

from vramscope.viewer.model import load_snapshot  # noqa: E402

MiB = 1 << 20


@pytest.fixture
def live_window(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.live.controller import LiveController

    application()
    made = []

    def make(target: str):
        """(the controller, its window)"""
        c = LiveController(target, stats_interval=0.1, trace_interval=0.3)
        w = c.window
        qtbot.addWidget(w)
        w.resize(1440, 900)
        w.show()
        made.append(c)
        return c, w

    yield make
    for c in made:
        c.worker.close()


def test_file_menu_has_attach_with_a_shortcut(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.main_window import MainWindow

    application()
    w = MainWindow(persist=False)
    qtbot.addWidget(w)
    a = w.attach_action
    assert a.shortcut().toString() == "Ctrl+Shift+A" and a.toolTip()
    assert a in w.menuBar().actions()[0].menu().actions()


def test_attach_dialog_lists_agents_and_attaches(qtbot, start_target):
    from vramscope.viewer._qt.live.attach_dialog import AttachDialog

    t = start_target()
    dlg = AttachDialog()
    qtbot.addWidget(dlg)
    rows = [dlg.tree.topLevelItem(i).text(0) for i in range(dlg.tree.topLevelItemCount())]
    assert rows == [str(t.pid)]
    assert dlg.tree.topLevelItem(0).text(1) == "attachable"
    assert dlg.attach_button.isEnabled()
    assert "NVML" in dlg.nvml_label.text()
    with qtbot.waitSignal(dlg.attachRequested, timeout=2000) as sig:
        dlg.attach_button.click()
    assert sig.args == [str(t.pid)]


def test_attach_dialog_with_nothing_to_attach_explains_the_opt_in(qtbot, runtime_dir):
    from vramscope.viewer._qt.live.attach_dialog import AttachDialog

    dlg = AttachDialog()
    qtbot.addWidget(dlg)
    assert dlg.tree.topLevelItemCount() == 0
    assert not dlg.attach_button.isEnabled()
    assert "--live" in dlg.hint.text() and "serve()" in dlg.hint.text()
    dlg.endpoint.setText("unix:/somewhere/agent-1.sock")
    assert dlg.attach_button.isEnabled()


def test_live_window_follows_the_process(qtbot, live_window, start_target, tmp_path):
    t = start_target()
    t.cmd(f"alloc {4 * MiB}")
    c, w = live_window(str(t.pid))
    qtbot.waitUntil(lambda: c.trace_updates >= 1 and w.vs.doc is not None, timeout=10000)
    assert c.state == "live" and "attached to pid" in c.live_status.toolTip()
    from vramscope.viewer._qt.main_window import MainWindow

    assert type(w) is MainWindow and w.live is c  # composed, not a subclass
    assert w.header.isVisible()
    n0 = w.vs.doc.n_events(0)
    t.cmd(f"alloc {6 * MiB}")
    t.cmd("step 4")
    qtbot.waitUntil(lambda: w.vs.doc.n_events(0) >= n0 + 9, timeout=10000)
    qtbot.waitUntil(lambda: c.curves.last("reserved") == 14 * MiB, timeout=10000)
    assert c.curves.count() >= 2
    assert "Reserved by PyTorch" in c.device_panel.text() and "14.00 MiB" in c.device_panel.text()
    # Pause: nothing is fetched while the process goes on.
    c.pause_action.trigger()
    qtbot.waitUntil(lambda: c.state == "paused", timeout=5000)
    before = c.stats_updates
    t.cmd("step 2")
    qtbot.wait(600)
    assert c.stats_updates <= before + 1
    c.pause_action.trigger()
    qtbot.waitUntil(lambda: c.stats_updates > before + 2, timeout=5000)
    # Save snapshot: a standard pickle that loads with the process's figures.
    out = tmp_path / "live.pickle"
    with qtbot.waitSignal(c.savedSnapshot, timeout=10000) as sig:
        c.save_snapshot(str(out))
    assert sig.args == [str(out), ""]
    assert load_snapshot(out).trace.action.size >= 13
    # The process ends: a calm line, the last picture stays.
    t.exit()
    qtbot.waitUntil(lambda: c.state == "ended", timeout=10000)
    assert "has ended" in c.live_status.toolTip()
    assert w.vs.doc is not None and not c.save_action.isEnabled()


def test_looking_back_in_time_holds_updates(qtbot, live_window, start_target):
    t = start_target()
    t.cmd("step 5")
    c, w = live_window(str(t.pid))
    qtbot.waitUntil(
        lambda: c.trace_updates >= 1 and w.vs.doc is not None and w.vs.doc.n_events(0) == 10,
        timeout=10000,
    )
    w.set_cursor(2)
    t.cmd("step 3")
    # (an update fetched before the process took its steps is held too: wait for theirs)
    qtbot.waitUntil(
        lambda: c.held and c.pending is not None and len(c.pending.trace.action) == 16,
        timeout=10000,
    )
    assert w.vs.doc.n_events(0) == 10 and w.vs.cursor_k == 2
    c.follow()
    assert not c.held and w.vs.doc.n_events(0) == 16


def test_no_gpu_device_panel_says_so(qtbot):
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.live.device_panel import DevicePanel
    from vramscope.viewer.model.live.nvml import NvmlInfo

    application()
    p = DevicePanel()
    qtbot.addWidget(p)
    p.set_nvml(NvmlInfo([], "NVML is not available (no NVIDIA driver or GPU: not found)"))
    p.set_reserved(5 * MiB)
    assert "NVML is not available" in p.text() and "5.00 MiB" in p.text()


def test_unreachable_target_is_a_status_line_not_an_error(qtbot, live_window, runtime_dir):
    c, w = live_window("unix:/nonexistent/agent-1.sock")
    qtbot.waitUntil(lambda: "no agent is listening" in c.live_status.toolTip(), timeout=5000)
    assert w.error_box is None


def test_a_process_that_ends_while_we_retry_is_shown_as_ended(qtbot, live_window, start_target):
    # The connection drops before the process is gone (a zombie until reaped): the
    # window retries, and the next try finds no process: "ended", not retrying forever.
    t = start_target()
    c, _w = live_window(str(t.pid))
    qtbot.waitUntil(lambda: c.state == "live" and c.stats_updates >= 1, timeout=10000)
    t.proc.stdin.write("exit\n")
    t.proc.stdin.flush()
    qtbot.waitUntil(lambda: c.state != "live", timeout=10000)
    t.proc.wait(timeout=20)
    qtbot.waitUntil(lambda: c.state == "ended", timeout=10000)
    assert "has ended" in c.live_status.toolTip() or "no process" in c.live_status.toolTip()


def test_live_curves_tick_at_round_binary_sizes(qtbot):
    import re

    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.live.curves import LiveCurves

    application()
    c = LiveCurves()
    qtbot.addWidget(c)
    c.resize(360, 300)
    c.show()
    GiB = 1 << 30
    for i, reserved in enumerate((1.0, 1.9, 2.8, 3.3)):  # decimal ticks gave 953.67 MiB…
        c.add(
            c.t0 + i,
            {
                "reserved_bytes.all.current": int(reserved * GiB),
                "allocated_bytes.all.current": int(reserved * GiB * 0.8),
            },
        )
    qtbot.wait(50)
    labels = c.tick_labels()
    assert len(labels) >= 3, labels
    assert all(re.fullmatch(r"0|\d+(\.5)? (KiB|MiB|GiB)", s) for s in labels), labels
    assert c.plot.getViewBox().viewRange()[1][0] == 0  # from 0, like the timeline
    # One implementation: the timeline's axis.
    from vramscope.viewer._qt.timeline import BytesYAxis

    assert isinstance(c.y_axis, BytesYAxis)
