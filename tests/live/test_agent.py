"""The real agent in a subprocess (fake allocator only) and the viewer's real client."""

from __future__ import annotations

import os
import signal
import stat

import pytest

from vramscope.viewer import live_protocol as proto
from vramscope.viewer.model import Selection, load_snapshot, memory_stats
from vramscope.viewer.model.live.client import AttachError, LiveClient
from vramscope.viewer.model.live.session import DISCONNECTED, ENDED, LIVE, LiveSession

MiB = 1 << 20


def _counters(stats: dict) -> dict:
    return {
        k: stats[k]
        for k in (
            "reserved_bytes.all.current",
            "allocated_bytes.all.current",
            "active_bytes.all.current",
            "requested_bytes.all.current",
        )
    }


def _figures(f) -> dict:
    return {
        "reserved_bytes.all.current": f.reserved_bytes,
        "allocated_bytes.all.current": f.allocated_bytes,
        "active_bytes.all.current": f.active_bytes,
        "requested_bytes.all.current": f.requested_bytes,
    }


def test_hello_stats_and_snapshot_round_trip(start_target, tmp_path):
    t = start_target()
    t.cmd(f"alloc {3 * MiB}")
    t.cmd(f"alloc {5 * MiB}")
    t.cmd("free")
    s = LiveSession(str(t.pid))
    hello = s.connect()
    assert hello["pid"] == t.pid and hello["cuda"] and hello["owns_recording"]
    assert hello["recording"]["max_entries"] == 1000
    upd = s.poll_stats()
    truth = _counters(t.stats())
    # The figures computed from the segments equal the allocator's counters of that instant.
    assert _figures(upd.figures) == truth == _counters(upd.stats[0])
    assert upd.fast_path and upd.consistent
    path, _snap, _header = s.save_snapshot(tmp_path / "grab.pickle")
    loaded = load_snapshot(path)
    assert _figures(memory_stats(loaded, Selection(device=0))) == truth
    assert len(loaded.trace.action) == 3  # alloc, alloc, free_completed
    s.close()


def test_traces_are_incremental_never_resent(start_target):
    t = start_target()
    s = LiveSession(str(t.pid))
    s.connect()
    assert s.poll_trace().added == 0
    t.cmd("step 5")  # 10 events
    first = s.poll_trace()
    assert first.added == 10
    t.cmd("step 3")
    second = s.poll_trace()
    assert second.added == 6 and not second.gap
    assert len(second.snap.trace.action) == 16  # appended to the columns
    assert s.poll_trace().added == 0  # nothing new: nothing sent
    # The window replays: the timeline ends at the segments sent with it.
    from vramscope.viewer.model.view.document import Document

    doc = Document.build(second.snap)
    assert doc.timeline is not None and doc.n_events(0) == 16


def test_a_wrapped_ring_buffer_is_a_gap_and_a_fresh_window(start_target):
    t = start_target(env={"FAKE_MAX_ENTRIES": "20"})
    s = LiveSession(str(t.pid))
    s.connect()
    t.cmd("step 4")
    assert s.poll_trace().added == 8
    t.cmd("step 30")  # 60 events through a ring of 20
    upd = s.poll_trace()
    assert upd.gap and upd.added == 20
    assert len(upd.snap.trace.action) == 20  # the window restarts after the gap


def test_options_report_and_change_recording(start_target):
    t = start_target()
    s = LiveSession(str(t.pid))
    s.connect()
    assert s.options()["recording"]["max_entries"] == 1000
    changed = s.options(max_entries=50, context="alloc")
    assert changed["recording"]["max_entries"] == 50
    assert changed["recording"]["context"] == "alloc"
    with pytest.raises(AttachError, match="bad recording option"):
        s.options(stacks="everything")
    assert s.options()["recording"]["max_entries"] == 50  # still answering


def test_the_governor_spaces_expensive_requests(start_target):
    t = start_target(env={"FAKE_BUDGET": "0.000001"})
    s = LiveSession(str(t.pid))
    s.connect()
    t.cmd("step 2")
    assert not s.poll_trace().throttled  # the first one measures the cost
    later = s.poll_trace()
    assert later.throttled and later.retry_after_s > 0
    a, b = s.poll_stats(), s.poll_stats()
    assert not a.throttled and b.throttled  # the last figures again, no new work


def test_viewer_disconnect_and_target_exit(start_target):
    t = start_target()
    c = LiveClient(t.endpoint)
    c.connect()
    c.sock.close()  # a viewer killed mid-session
    s = LiveSession(str(t.pid))
    s.connect()  # the agent serves the next one
    assert s.poll_stats() is not None
    assert t.exit() == 0
    with pytest.raises(AttachError):
        s.poll_stats()
    assert s.state == ENDED and "ended" in s.status
    assert not s.reconnect() and s.state == ENDED
    assert proto.find_entry(t.pid) is None  # the entry went with the process


def test_agent_stopping_is_a_disconnect_then_a_reconnect(start_target):
    t = start_target()
    s = LiveSession(str(t.pid))
    s.connect()
    os.kill(t.pid, signal.SIGSTOP)  # the process hangs: the connection stays, no answer
    try:
        s.client.sock.settimeout(0.5)
        s.client.sock.shutdown(2)
        with pytest.raises(AttachError):
            s.poll_stats()
        assert s.state == DISCONNECTED
    finally:
        os.kill(t.pid, signal.SIGCONT)
    assert s.reconnect() and s.state == LIVE
    assert s.poll_stats() is not None


def test_socket_and_registry_are_private(start_target, runtime_dir):
    t = start_target()
    sock = runtime_dir / f"agent-{t.pid}.sock"
    reg = runtime_dir / f"agent-{t.pid}.json"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(reg.stat().st_mode) == 0o600
    assert stat.S_IMODE(runtime_dir.stat().st_mode) == 0o700
    entry = proto.find_entry(t.pid, runtime_dir)
    assert entry["endpoint"] == f"unix:{sock}" and "token" not in entry
    assert entry["argv"][0].endswith("fake_target.py")


def test_stale_entries_of_killed_agents_are_cleaned(start_target, runtime_dir):
    t = start_target()
    os.kill(t.pid, signal.SIGKILL)
    t.proc.wait()
    assert (runtime_dir / f"agent-{t.pid}.json").exists()  # nobody could clean up
    assert proto.read_registry(runtime_dir) == []
    assert not (runtime_dir / f"agent-{t.pid}.json").exists()
    assert not (runtime_dir / f"agent-{t.pid}.sock").exists()


def test_tcp_fallback_needs_the_token(start_target, runtime_dir):
    t = start_target("--tcp")
    assert t.endpoint.startswith("tcp:127.0.0.1:")
    entry = proto.find_entry(t.pid, runtime_dir)
    assert len(entry["token"]) == 64
    with pytest.raises(AttachError, match="token"):
        LiveClient(t.endpoint).connect()
    with pytest.raises(AttachError, match="token"):
        LiveClient(t.endpoint, "0" * 64).connect()
    s = LiveSession(str(t.pid))  # through the registry: with the token
    assert s.connect()["pid"] == t.pid
    assert s.poll_stats() is not None
    assert "rejected a client (bad or missing token)" in (t.exit() or t.stderr())


def test_serve_before_cuda_answers_not_ready(start_target):
    # The fake starts initialised; a target without CUDA yet must not start it.
    t = start_target(env={"FAKE_UNINITIALISED": "1"})
    s = LiveSession(str(t.pid))
    assert s.connect()["cuda"] is False
    assert s.poll_stats() is None and "not initialised CUDA yet" in s.status
    t.cmd(f"alloc {MiB}")  # the script's first CUDA call
    assert s.poll_stats().figures.reserved_bytes == MiB
