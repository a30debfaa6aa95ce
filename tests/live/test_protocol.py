"""The wire format, the trace cursor and the runtime directory, without processes."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from vramscope.capture.live import traces
from vramscope.viewer import live_protocol as proto


def _pair():
    a, b = socket.socketpair()
    return a, b


def test_round_trip_of_header_and_payload():
    a, b = _pair()
    with a, b:
        proto.send(a, {"op": "stats", "id": 7}, b"\x80\x04payload", kind=proto.KIND_RESPONSE)
        header, payload = proto.recv(b, max_payload=100, expect_kind=proto.KIND_RESPONSE)
    assert header == {"op": "stats", "id": 7} and payload == b"\x80\x04payload"


@pytest.mark.parametrize(
    "frame, message",
    [
        (b"GET / HTTP/1.1\r\n\r\n", "bad magic"),
        (proto.FRAME.pack(proto.MAGIC, 99, 0, 0, 2, 0) + b"{}", "version 99"),
        (
            proto.FRAME.pack(proto.MAGIC, proto.PROTOCOL_VERSION, 0, 0, 1 << 30, 0),
            "header too large",
        ),
        (
            proto.FRAME.pack(proto.MAGIC, proto.PROTOCOL_VERSION, 0, 0, 2, 1 << 31),
            "payload too large",
        ),
        (
            proto.FRAME.pack(proto.MAGIC, proto.PROTOCOL_VERSION, 0, 0, 3, 0) + b"[1]",
            "not a JSON object",
        ),
        (
            proto.FRAME.pack(proto.MAGIC, proto.PROTOCOL_VERSION, 0, 0, 3, 0) + b"\xff\xfe{",
            "not valid JSON",
        ),
        (
            proto.FRAME.pack(proto.MAGIC, proto.PROTOCOL_VERSION, 1, 0, 2, 0) + b"{}",
            "unexpected message kind",
        ),
    ],
)
def test_malformed_messages_are_refused_in_one_line(frame, message):
    a, b = _pair()
    with a, b:
        a.sendall(frame)
        with pytest.raises(proto.ProtocolError, match=message) as info:
            proto.recv(b, max_payload=0, expect_kind=proto.KIND_REQUEST, deadline_s=1)
    assert "\n" not in str(info.value)


def test_oversized_length_is_refused_before_reading_it():
    a, b = _pair()
    with a, b:
        # Only the frame header is sent: refusing must not wait for 1 GiB.
        a.sendall(proto.FRAME.pack(proto.MAGIC, proto.PROTOCOL_VERSION, 0, 0, 2, 1 << 30))
        with pytest.raises(proto.ProtocolError, match="payload too large"):
            proto.recv(b, max_payload=0, expect_kind=proto.KIND_REQUEST, deadline_s=30)


def test_a_slow_message_hits_the_deadline():
    a, b = _pair()
    with a, b:
        a.sendall(proto.MAGIC[:3])  # and then nothing more
        with pytest.raises(proto.ProtocolError, match="too slow"):
            proto.recv(b, max_payload=0, expect_kind=proto.KIND_REQUEST, deadline_s=0.3)


def test_clean_close_between_messages_is_peer_closed():
    a, b = _pair()
    a.close()
    with b, pytest.raises(proto.PeerClosed):
        proto.recv(b, max_payload=0, expect_kind=proto.KIND_REQUEST)


def test_close_in_the_middle_is_a_protocol_error():
    a, b = _pair()
    a.sendall(proto.FRAME.pack(proto.MAGIC, proto.PROTOCOL_VERSION, 0, 0, 10, 0) + b"{")
    a.close()
    with b, pytest.raises(proto.ProtocolError, match="middle"):
        proto.recv(b, max_payload=0, expect_kind=proto.KIND_REQUEST)


@pytest.mark.parametrize(
    "text, ok",
    [
        ("unix:/run/user/1/vramscope/agent-1.sock", True),
        ("tcp:127.0.0.1:5000", True),
        ("tcp:0.0.0.0:5000", False),
        ("tcp:10.1.2.3:5000", False),
        ("tcp:example.com:80", False),
        ("http://127.0.0.1:80", False),
        ("tcp:127.0.0.1:x", False),
    ],
)
def test_only_local_endpoints_are_accepted(text, ok):
    if ok:
        proto.parse_endpoint(text)
    else:
        with pytest.raises(ValueError):
            proto.parse_endpoint(text)


def test_runtime_dir_is_private_and_others_are_refused(tmp_path, monkeypatch):
    d = tmp_path / "rt"
    monkeypatch.setenv(proto.ENV_RUNTIME_DIR, str(d))
    got = proto.runtime_dir()
    assert got == d and (d.stat().st_mode & 0o777) == 0o700
    os.chmod(d, 0o755)  # someone opened it up: refuse rather than expose sockets
    with pytest.raises(ValueError, match="accessible to other users"):
        proto.runtime_dir()
    os.chmod(d, 0o700)
    link = tmp_path / "link"
    link.symlink_to(d)
    monkeypatch.setenv(proto.ENV_RUNTIME_DIR, str(link))
    with pytest.raises(ValueError, match="not a plain directory"):
        proto.runtime_dir()


def test_registry_listing_skips_garbage_and_removes_dead_entries(tmp_path):
    d = tmp_path / "rt"
    d.mkdir(mode=0o700)
    (d / "agent-1.json").write_text("{not json")
    (d / "agent-2.json").write_text("[1, 2]")
    dead = 2**22 + 12345  # beyond pid_max: certainly not running
    (d / f"agent-{dead}.json").write_text(f'{{"pid": {dead}, "endpoint": "unix:/x"}}')
    (d / f"agent-{dead}.sock").write_text("")
    me = f'{{"pid": {os.getpid()}, "endpoint": "unix:/y", "start_time": 1}}'
    (d / f"agent-{os.getpid()}.json").write_text(me)
    found = proto.read_registry(d)
    assert [e["pid"] for e in found] == [os.getpid()]
    assert not (d / f"agent-{dead}.json").exists() and not (d / f"agent-{dead}.sock").exists()


def _entries(times):
    return [{"action": "alloc", "time_us": t} for t in times]


def test_trace_cursor_sends_each_entry_once():
    buf = _entries([1, 2, 2, 3])
    start, gap, reset = traces.since(buf, None)
    assert (start, gap, reset) == (0, False, True)
    cur = traces.cursor_of(buf)
    assert cur == (3, 1)
    buf += _entries([3, 3, 4])  # two more at time 3, then 4
    start, gap, reset = traces.since(buf, cur)
    assert buf[start:] == _entries([3, 3, 4]) and not gap and not reset
    assert traces.since(buf, traces.cursor_of(buf))[0] == len(buf)  # nothing new


def test_trace_cursor_in_a_wrapped_ring_buffer():
    cur = traces.cursor_of(_entries([5, 6, 6]))
    # Two more entries arrived; the ring (5) still holds the cursor's own entries.
    ring = _entries([5, 6, 6, 7, 8])
    start, gap, reset = traces.since(ring, cur, capacity=5)
    assert ring[start:] == _entries([7, 8]) and not gap
    # The oldest entry has the cursor's time in a full ring: how many of that time
    # were lost cannot be known, so it is a gap (never a guess).
    ring = _entries([6, 6, 7])
    assert traces.since(ring, cur, capacity=3) == (0, True, False)
    assert traces.since(ring, cur, capacity=10)[0] == 2  # not full: nothing was lost
    # Everything the client had was overwritten, and more: a gap.
    start, gap, reset = traces.since(_entries([9, 10]), cur)
    assert start == 0 and gap and not reset


def test_untimed_entries_are_resent_whole():
    buf = [{"action": "alloc"}, {"action": "free_completed"}]
    assert traces.cursor_of(buf) is None
    assert traces.since(buf, (5, 1)) == (0, False, True)


@pytest.mark.parametrize("value", [None, [1], [1, 2, 3], ["a", 1], [-1, 0], [True, 1], {"t": 1}])
def test_bad_cursors_from_clients_mean_no_cursor(value):
    assert traces.parse_cursor(value) is None


def test_frame_header_is_sixteen_bytes():
    assert proto.FRAME.size == 16 == struct.calcsize(">4sBBHII")
