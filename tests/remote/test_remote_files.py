"""``ssh://host/path`` snapshots, read through a real sshd on 127.0.0.1.

The server (``sshd_helpers.Sshd``) has throwaway keys and listens on loopback only;
the code under test runs the OpenSSH client with ``-F`` (``VRAMSCOPE_SSH_CONFIG``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sshd_helpers import sshd_binary

from vramscope.viewer.model import LoadCancelled, Selection, load_snapshot, memory_stats
from vramscope.viewer.model.core.progress import Progress
from vramscope.viewer.model.io import cache, remote
from vramscope.viewer.model.io.remote import RemoteError, load_remote, parse_url

DATA = Path(__file__).resolve().parents[1] / "data"
GPT2 = DATA / "gpt2_oom.pickle"
RAN: list[str] = []  # which tests reached a real sshd (test_the_sshd_tests_ran checks)


def test_sshd_is_there():
    """Under CI the server is required (``make test`` installs openssh-server)."""
    if not os.environ.get("CI"):
        pytest.skip("CI is not set: without sshd the ssh:// tests are skipped")
    assert sshd_binary() is not None, "install openssh-server: the ssh:// tests need sshd"
    assert shutil.which("ssh") and shutil.which("ssh-keygen")


# --------------------------------------------------------------------------- addresses
def test_addresses_parse_and_quote():
    rp = parse_url("ssh://alice@gpu-7:2222/data/my run/snap's.pickle")
    assert (rp.host.user, rp.host.host, rp.host.port) == ("alice", "gpu-7", 2222)
    assert rp.path == "/data/my run/snap's.pickle"
    assert rp.quoted() == "'/data/my run/snap'\"'\"'s.pickle'"
    assert rp.url() == "ssh://alice@gpu-7:2222/data/my run/snap's.pickle"
    home = parse_url("ssh://gpu/~/runs/$(rm -rf x).pickle")
    assert home.path == "~/runs/$(rm -rf x).pickle"
    assert home.quoted() == "~/'runs/$(rm -rf x).pickle'"
    assert home.url() == "ssh://gpu/~/runs/$(rm -rf x).pickle"
    v6 = parse_url("ssh://[::1]:22/x")
    assert (v6.host.host, v6.host.port) == ("::1", 22)
    cmd = rp.host.command("true")
    assert cmd[-3:] == ["--", "gpu-7", "true"] and "BatchMode=yes" in cmd
    assert ["-p", "2222"] == cmd[cmd.index("-p") : cmd.index("-p") + 2]
    for bad in (
        "ssh://-oProxyCommand=x/p",
        "ssh://host:99999/p",
        "ssh://host",
        "ssh://ho st/p",
        "ssh://[::1/p",
    ):
        with pytest.raises(RemoteError) as err:
            parse_url(bad)
        assert "\n" not in str(err.value)


def test_ssh_command_line_and_config_from_the_environment(monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_SSH", "/opt/ssh -i '/keys/my key'")
    monkeypatch.setenv("VRAMSCOPE_SSH_CONFIG", "/tmp/cfg")
    cmd = remote.parse_host("ssh://bob@h").command("ls")
    assert cmd[:3] == ["/opt/ssh", "-i", "/keys/my key"]
    assert cmd[cmd.index("-F") + 1] == "/tmp/cfg" and cmd[cmd.index("-l") + 1] == "bob"


def test_sidecar_path_follows_the_local_rule():
    assert remote.sidecar_path("/r/a.pickle") == "/r/a.json"
    assert remote.sidecar_path("/r/a.pickle.xz") == "/r/a.json"
    assert remote.sidecar_path("~/a.pkl") == "~/a.json"


# --------------------------------------------------------------------------- a real sshd
def test_remote_snapshot_opens_with_the_local_figures(ssh_env):
    RAN.append("open")
    url = f"{ssh_env.host_url}{GPT2}"
    seen: list[tuple[int, int, int]] = []
    stages: list[str] = []
    t0 = time.monotonic()
    snap = remote.load_remote(
        url,
        lambda stage, f: stages.append(stage),
        use_cache=False,
        on_bytes=lambda done, total, wire: seen.append((done, total, wire)),
    )
    elapsed = time.monotonic() - t0
    local = load_snapshot(GPT2, use_cache=False)
    assert snap.path == url
    assert seen[-1][:2] == (GPT2.stat().st_size, GPT2.stat().st_size)
    assert 0 < seen[-1][2] < GPT2.stat().st_size  # compressed on the wire
    assert "read" in stages
    for device in local.devices:
        assert memory_stats(snap, Selection(device=device)) == memory_stats(
            local, Selection(device=device)
        )
    assert len(snap.trace.action) == len(local.trace.action)
    assert (snap.trace.addr == local.trace.addr).all()
    assert snap.sidecar == local.sidecar is not None  # the capture's JSON beside it, too
    print(f"\nremote open of {GPT2.name} ({GPT2.stat().st_size >> 10} KiB): {elapsed:.2f} s")


def test_remote_snapshot_is_cached_by_host_path_size_and_mtime(ssh_env, tmp_path):
    RAN.append("cache")
    copy = tmp_path / "copy.pickle"
    shutil.copyfile(GPT2, copy)
    url = f"{ssh_env.host_url}{copy}"
    rp = parse_url(url)
    key = remote.cache_key(rp, remote.stat(rp)[0])
    assert not cache.entry_path(key).exists()
    first = load_remote(url)
    assert cache.entry_path(key).exists()
    streamed: list[int] = []
    again = load_remote(url, on_bytes=lambda done, total, wire: streamed.append(done))
    assert not streamed  # from the cache: no bytes crossed the wire
    assert memory_stats(again) == memory_stats(first)
    os.utime(copy, (1, 1))  # another mtime: another key, streamed again
    load_remote(url, on_bytes=lambda done, total, wire: streamed.append(done))
    assert streamed


def _ssh_children() -> list[int]:
    me = str(os.getpid())
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (d / "comm").read_text().strip()
        except OSError:
            continue
        if fields[1] == me and comm == "ssh":
            found.append(int(d.name))
    return found


def _processes_with(text: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def test_cancel_mid_stream_kills_ssh_and_leaves_no_process(ssh_env, tmp_path, monkeypatch):
    RAN.append("cancel")
    # The file's zeros would shrink to nothing on the wire: sent raw, they take a while.
    monkeypatch.setenv("VRAMSCOPE_REMOTE_COMPRESS", "none")
    big = tmp_path / "big-to-cancel.pickle"
    with open(big, "wb") as f:
        f.truncate(256 << 20)  # sparse: far more than ssh's window, never all in flight
    url = f"{ssh_env.host_url}{big}"
    progress = Progress()
    got: list[int] = []

    def on_bytes(done: int, total: int, wire: int) -> None:
        got.append(done)
        if len(got) == 3:
            threading.Timer(0.05, progress.cancel).start()  # as the GUI's Cancel would

    with pytest.raises(LoadCancelled):
        load_remote(url, progress, use_cache=False, on_bytes=on_bytes)
    assert 0 < got[-1] < big.stat().st_size  # really in the middle
    assert _ssh_children() == []  # ssh killed and reaped
    deadline = time.monotonic() + 10  # the remote cat ends once sshd closes the channel
    while _processes_with(str(big)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(str(big)) == []


def test_failures_are_one_line(ssh_env, monkeypatch, tmp_path):
    RAN.append("errors")
    base = ssh_env.host_url
    cases = {
        f"{base}/no/such/snapshot.pickle": "no such file",
        f"{base}{tmp_path}": "directory",
        f"ssh://{ssh_env.user}@127.0.0.1:1/x.pickle": "Connection refused",
    }
    locked = tmp_path / "locked.pickle"
    locked.write_bytes(b"x")
    for url, words in cases.items():
        with pytest.raises(RemoteError) as err:
            load_remote(url)
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    # A key the server does not know: never a password prompt, one line saying what to do.
    monkeypatch.setenv("VRAMSCOPE_SSH_CONFIG", str(ssh_env.ssh_config_other))
    with pytest.raises(RemoteError) as err:
        load_remote(f"{base}{GPT2}")
    msg = str(err.value)
    assert "permission denied" in msg.lower() and "password" in msg and "ssh-agent" in msg
    assert "\n" not in msg
    # An unknown host key: not accepted silently.
    unknown = tmp_path / "unknown_config"
    unknown.write_text(
        ssh_env.ssh_config.read_text().replace(
            str(ssh_env.dir / "known_hosts"), str(tmp_path / "empty_known_hosts")
        )
    )
    monkeypatch.setenv("VRAMSCOPE_SSH_CONFIG", str(unknown))
    with pytest.raises(RemoteError) as err:
        load_remote(f"{base}{GPT2}")
    assert "host key is not known" in str(err.value)


def test_no_ssh_client_is_one_line(monkeypatch):
    monkeypatch.setenv("VRAMSCOPE_SSH", "/nonexistent/ssh")
    with pytest.raises(RemoteError) as err:
        load_remote("ssh://h/x.pickle")
    assert "OpenSSH client" in str(err.value)


def test_screenshot_of_a_remote_argument_asks_for_a_local_file(ssh_env, tmp_path):
    """``vramscope ssh://host/path --screenshot`` says it needs a local file (one line)."""
    RAN.append("gui-cli")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramscope.viewer.cli",
            f"{ssh_env.host_url}{GPT2}",
            "--screenshot",
            str(tmp_path / "x.png"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "local file" in r.stderr


def test_open_remote_in_the_window(ssh_env, qtbot, isolated_qt_settings, monkeypatch):
    RAN.append("gui")
    from vramscope.viewer._qt.app import application
    from vramscope.viewer._qt.live import remote_open
    from vramscope.viewer._qt.main_window import MainWindow
    from vramscope.viewer._qt.widgets import settings as st

    application()
    remote_open.install()
    w = MainWindow()
    qtbot.addWidget(w)
    assert w.open_remote_action.shortcut().toString() == "Ctrl+Shift+O"
    w.open_remote_action.trigger()
    dlg = w.findChild(remote_open.RemoteOpenDialog)
    assert dlg is not None
    dlg.combo.setEditText("not-an-address")
    dlg.choose()
    assert dlg.isVisible() and "expected ssh://" in dlg.error.text()
    url = f"{ssh_env.host_url}{GPT2}"
    dlg.combo.setEditText(url)
    monkeypatch.setenv("VRAMSCOPE_NO_CACHE", "1")  # streamed, whatever ran before
    shown: list[str] = []
    w.statusBar().messageChanged.connect(shown.append)
    with qtbot.waitSignal(w.loadFinished, timeout=60000) as sig:
        dlg.choose()
    assert sig.args == ["loaded"], w.last_error
    # The status line counts the file's bytes and, compressed, what crossed the wire.
    reading = [m for m in shown if m.startswith(f"Reading {url}: ")]
    assert reading and "on the wire)" in reading[-1], shown
    print(f"\nstatus line: {reading[-1]}")
    local = load_snapshot(GPT2)
    assert w.vs.doc.snap.path == url
    assert memory_stats(w.vs.doc.snap) == memory_stats(local)
    assert remote_open.recent_urls() == [url]
    assert not [f for f in st.recent_files() if "ssh:" in f]  # not among local files
    # Cancel in the window: the load ends "cancelled", ssh is gone.
    big = ssh_env.dir.parent / f"{ssh_env.dir.name}-big.pickle"
    with open(big, "wb") as f:
        f.truncate(256 << 20)
    monkeypatch.setenv("VRAMSCOPE_REMOTE_COMPRESS", "none")  # zeros: raw takes a while
    try:
        t = remote_open.open_remote(w, f"{ssh_env.host_url}{big}")
        qtbot.waitUntil(lambda: w.progress.value() > 0, timeout=30000)
        with qtbot.waitSignal(w.loadFinished, timeout=30000) as sig:
            w.cancel_action.trigger()
        assert sig.args == ["cancelled"]
        t.wait(10000)
        assert _ssh_children() == []
    finally:
        big.unlink()
    w.close()


def test_the_cli_reads_a_remote_file_as_the_local_one(ssh_env):
    """summary, advise, whatif and diff take an ssh:// address where they take a file
    (what viewer/README.md, "Remote hosts over SSH", says)."""
    import json
    import subprocess
    import sys

    RAN.append("cli")
    url = f"{ssh_env.host_url}{GPT2}"
    env = {**os.environ, "VRAMSCOPE_NO_CACHE": "1"}

    def run(*args):
        out = subprocess.run(
            [sys.executable, "-m", "vramscope.viewer", *args, "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    remote_, local_ = run("summary", url), run("summary", str(GPT2))
    for key in ("reserved_bytes", "allocated_bytes", "peak_reserved_bytes", "oom"):
        assert remote_[key] == local_[key], key
    assert run("diff", url, str(GPT2))["delta_reserved_bytes"] == 0
    for command in ("whatif", "advise"):  # (the same answer but for the file's name)
        remote_ = json.dumps(run(command, url), sort_keys=True).replace(url, str(GPT2))
        assert remote_ == json.dumps(run(command, str(GPT2)), sort_keys=True), command


def test_the_python_api_opens_a_remote_file_as_the_cli(ssh_env):
    """``vramscope.open("ssh://...")``: the recording streamed through ssh, answering what
    ``vramscope summary ssh://... --json`` answers."""
    import json

    import vramscope

    RAN.append("api")
    url = f"{ssh_env.host_url}{GPT2}"
    env = {**os.environ, "VRAMSCOPE_NO_CACHE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "vramscope.viewer", "summary", url, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    rec = vramscope.open(url)
    assert isinstance(rec, vramscope.Recording) and rec.path == url
    assert rec.summary().to_dict() == json.loads(out.stdout)


def test_the_sshd_tests_ran():
    """Counts the tests above that reached a real server: a silent skip shows here."""
    if sshd_binary() is None and not os.environ.get("CI"):
        pytest.skip("sshd is not installed")
    expected = {"open", "cache", "cancel", "errors", "gui-cli", "gui", "cli", "api"}
    assert expected <= set(RAN), f"ssh:// tests that did not run: {expected - set(RAN)}"
