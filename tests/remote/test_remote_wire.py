"""``ssh://`` files without moving the whole file, through the real sshd on 127.0.0.1.

Every connection goes through a counting relay (``wire_helpers.relay_main``, an ssh
ProxyCommand), so the tests assert the bytes that really crossed the link.  A host
without a compressor or without vramscope is a remote PATH holding only what the test
links into it (``wire_helpers.path_main``), never a mocked ssh.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from wire_helpers import bytes_moved, proxy_config, remote_bin, ssh_with_path

from vramscope.viewer.model import Selection, load_snapshot, memory_stats
from vramscope.viewer.model.io import remote
from vramscope.viewer.model.io.remote import load_remote

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
GPT2 = DATA / "gpt2_oom.pickle"
VRAMSCOPE = Path(sys.executable).with_name("vramscope")
#: A file name the remote shell must not split or interpret.
AWKWARD = "it's a $(big) run.pickle"


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """An uncompressed pickle of ~14 MB (150k events tiled from gpt2_oom), in a
    directory whose name has a space and a quote."""
    d = tmp_path_factory.mktemp("wire") / 'my "runs"'
    d.mkdir()
    out = d / AWKWARD
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/bench/tile_trace.py"),
            str(GPT2),
            str(out),
            "--events",
            "150000",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    return out


@pytest.fixture
def wire(ssh_env, tmp_path, monkeypatch):
    """Connections through the counting relay; ``wire.moved()``: bytes towards ssh since
    the last call."""
    counts = tmp_path / "counts"
    config = proxy_config(ssh_env.ssh_config, tmp_path / "proxy_config", 0, counts)
    monkeypatch.setenv("VRAMSCOPE_SSH_CONFIG", str(config))
    monkeypatch.delenv("VRAMSCOPE_REMOTE_COMPRESS", raising=False)
    monkeypatch.delenv("VRAMSCOPE_REMOTE_RUN", raising=False)

    class Wire:
        seen = 0

        def moved(self) -> int:
            now = bytes_moved(counts)
            got, self.seen = now - self.seen, now
            return got

    return Wire()


def _same_figures(a, b) -> None:
    assert a.source_format == b.source_format
    for device in b.devices:
        assert memory_stats(a, Selection(device=device)) == memory_stats(
            b, Selection(device=device)
        )
    assert (a.trace.addr == b.trace.addr).all()


def test_an_uncompressed_pickle_crosses_the_wire_compressed(ssh_env, wire, big, monkeypatch):
    url = f"{ssh_env.host_url}{big}"
    size = big.stat().st_size
    seen: list[tuple[int, int, int]] = []
    snap = load_remote(url, use_cache=False, on_bytes=lambda *a: seen.append(a))
    moved = wire.moved()
    local = load_snapshot(big, use_cache=False)
    _same_figures(snap, local)
    assert moved <= size / 10, f"{moved} bytes moved for a {size}-byte file"
    done, total, on_wire = seen[-1]
    assert (done, total) == (size, size)  # the file's bytes, all of them
    assert on_wire <= moved  # and what crossed the wire for them, as the progress says
    print(f"\n{size} bytes opened with {moved} bytes on the wire ({100 * moved / size:.1f}%)")
    # The same open with compression refused: the counting relay sees the whole file.
    monkeypatch.setenv("VRAMSCOPE_REMOTE_COMPRESS", "none")
    load_remote(url, use_cache=False, on_bytes=lambda *a: seen.append(a))
    assert wire.moved() >= size and seen[-1][2] >= size


def test_a_compressed_file_travels_as_it_is(ssh_env, wire, tmp_path):
    packed = tmp_path / "a b's.pickle.gz"
    packed.write_bytes(gzip.compress(GPT2.read_bytes(), 6))
    snap = load_remote(f"{ssh_env.host_url}{packed}", use_cache=False)
    moved = wire.moved()
    _same_figures(snap, load_snapshot(packed, use_cache=False))
    assert snap.source_format == "pickle+gzip"
    # Not compressed again: its own bytes, and the ssh session's few KiB around them.
    assert packed.stat().st_size <= moved <= packed.stat().st_size + (64 << 10)


def test_a_host_without_a_compressor_sends_the_file_as_it_is(ssh_env, wire, tmp_path, monkeypatch):
    bare = remote_bin(tmp_path / "bin")  # sh, stat, head, cat...: no gzip, xz or zstd
    monkeypatch.setenv("VRAMSCOPE_SSH", ssh_with_path(bare))
    size = GPT2.stat().st_size
    snap = load_remote(f"{ssh_env.host_url}{GPT2}", use_cache=False)
    assert wire.moved() >= size
    _same_figures(snap, load_snapshot(GPT2, use_cache=False))
    # zstd alone there: chosen only if this side has a Python zstd module to decode it.
    monkeypatch.setenv("VRAMSCOPE_SSH", ssh_with_path(remote_bin(tmp_path / "zs", "zstd")))
    snap = load_remote(f"{ssh_env.host_url}{GPT2}", use_cache=False)
    if remote._zstd_decompressor() is None:
        assert "zstd" not in remote.local_codecs() and wire.moved() >= size
    else:
        assert wire.moved() <= size / 4
    _same_figures(snap, load_snapshot(GPT2, use_cache=False))
    # gzip alone there: chosen.
    monkeypatch.setenv("VRAMSCOPE_SSH", ssh_with_path(remote_bin(tmp_path / "gz", "gzip")))
    snap = load_remote(f"{ssh_env.host_url}{GPT2}", use_cache=False)
    assert wire.moved() <= size / 4
    _same_figures(snap, load_snapshot(GPT2, use_cache=False))


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "VRAMSCOPE_NO_CACHE": "1", **env}
    return subprocess.run(
        [str(VRAMSCOPE), *args], capture_output=True, text=True, timeout=300, env=full
    )


def test_summary_advise_and_whatif_run_on_the_host(ssh_env, wire, big, tmp_path, monkeypatch):
    there = remote_bin(tmp_path / "bin", "xz", vramscope=str(VRAMSCOPE))
    monkeypatch.setenv("VRAMSCOPE_SSH", ssh_with_path(there))
    url = f"{ssh_env.host_url}{big}"
    text = _cli("summary", url)
    moved = wire.moved()
    assert text.returncode == 0, text.stderr
    assert moved <= 64 << 10, f"{moved} bytes moved: the file was read over the wire"
    as_json = _cli("summary", url, "--json")
    assert wire.moved() <= 64 << 10
    streamed = _cli("summary", url, "--json", VRAMSCOPE_REMOTE_RUN="0")
    assert wire.moved() > 64 << 10
    assert json.loads(as_json.stdout) == json.loads(streamed.stdout)
    assert as_json.stdout == streamed.stdout
    # The text is the local summary's, the address in place of the file's name.
    local = _cli("summary", str(big))
    assert text.stdout == local.stdout.replace(str(big), url, 1)
    small = f"{ssh_env.host_url}{GPT2}"
    for args in (
        ["advise", "--json", "--no-cache"],
        ["advise", "--no-cache"],
        ["whatif", "--conf", "max_split_size_mb:64", "--json", "--no-cache"],
    ):
        got = _cli(args[0], small, *args[1:])
        assert got.returncode == 0, got.stderr
        assert wire.moved() <= 64 << 10, args
        want = _cli(args[0], small, *args[1:], VRAMSCOPE_REMOTE_RUN="0")
        assert wire.moved() > 64 << 10  # (streamed)
        assert got.stdout == want.stdout, args
    # A refusal there is worded as here, with the address.
    bad = _cli("summary", url, "--device", "7")
    assert bad.returncode == 2 and bad.stderr.startswith("vramscope: error:")
    assert wire.moved() <= 64 << 10, bad.stderr
    assert bad.stderr == _cli("summary", url, "--device", "7", VRAMSCOPE_REMOTE_RUN="0").stderr
    missing = _cli("summary", f"{ssh_env.host_url}/no/such dir/x.pickle")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert f"{ssh_env.host_url}/no/such dir/x.pickle" in missing.stderr


def test_another_vramscope_version_there_is_not_asked(ssh_env, wire, tmp_path, monkeypatch):
    """A remote vramscope of another version could answer otherwise: the file is read
    here instead (streamed compressed)."""
    old = tmp_path / "old-vramscope"
    old.write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && echo 'vramscope 0.0.1' && exit 0\n"
        'echo \'{"file": "wrong", "reserved_bytes": 1}\'\n'
    )
    old.chmod(0o755)
    monkeypatch.setenv(
        "VRAMSCOPE_SSH", ssh_with_path(remote_bin(tmp_path / "bin", "xz", vramscope=str(old)))
    )
    url = f"{ssh_env.host_url}{GPT2}"
    got = _cli("summary", url, "--json")
    assert got.returncode == 0, got.stderr
    assert wire.moved() > 64 << 10  # streamed
    assert json.loads(got.stdout) == json.loads(
        _cli("summary", url, "--json", VRAMSCOPE_REMOTE_RUN="0").stdout
    )
    # No vramscope at all there: the same.
    monkeypatch.setenv("VRAMSCOPE_SSH", ssh_with_path(remote_bin(tmp_path / "b2", "xz")))
    assert _cli("summary", url, "--json").stdout == got.stdout


def test_the_stream_script_quotes_the_path():
    rp = remote.parse_url("ssh://h/~/a b/it's $(x).pickle")
    script = remote.stream_script(rp, ["xz", "gzip"])
    assert script.startswith("p=~/'a b/it'\"'\"'s $(x).pickle'\n")
    assert "zstd" not in script and '"$p"' in script
    assert shutil.which("sh")
