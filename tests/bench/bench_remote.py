"""``make bench``'s remote rows: ``summary ssh://...`` over a slow link, three ways.

A real sshd on 127.0.0.1 (``tests/remote/sshd_helpers.py``) and a ProxyCommand relay
that limits the link to ``--rate`` bytes/s and counts what crossed it
(``tests/remote/wire_helpers.py``).  In the same run: the file streamed raw (what
``cat`` did before), streamed compressed (a host without vramscope), and the command
run on the host (vramscope there): seconds, bytes on the wire, and the speed-up of
each against raw.

    python tests/bench/bench_remote.py FILE [--rate BYTES_PER_S]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "remote"))

from sshd_helpers import Sshd, sshd_binary  # noqa: E402
from wire_helpers import bytes_moved, proxy_config, remote_bin, ssh_with_path  # noqa: E402

#: 100 Mbit/s, the link of the report.
DEFAULT_RATE = 12_500_000


def remote_rows(path: Path, rate: int = DEFAULT_RATE) -> list[dict] | None:
    """Seconds and bytes moved for ``summary ssh://...path`` raw, compressed and run
    there; None when no sshd is installed."""
    if sshd_binary() is None or not shutil.which("ssh"):
        return None
    vramscope = Path(sys.executable).with_name("vramscope")
    d = Path(tempfile.mkdtemp(prefix="vs-bench-sshd-", dir="/tmp"))
    server = Sshd(d).start()
    try:
        counts = d / "counts"
        config = proxy_config(server.ssh_config, d / "slow_config", rate, counts)
        there = remote_bin(
            d / "bin",
            *[c for c in ("zstd", "xz", "gzip") if shutil.which(c)],
            vramscope=str(vramscope),
        )
        base = {
            **os.environ,
            "VRAMSCOPE_SSH_CONFIG": str(config),
            "VRAMSCOPE_NO_CACHE": "1",
            "VRAMSCOPE_SSH": ssh_with_path(there),
        }
        ways = [
            (
                "streamed raw (before)",
                {"VRAMSCOPE_REMOTE_RUN": "0", "VRAMSCOPE_REMOTE_COMPRESS": "none"},
            ),
            ("streamed compressed", {"VRAMSCOPE_REMOTE_RUN": "0"}),
            ("run on the host", {}),
        ]
        url = f"{server.host_url}{path.resolve()}"
        rows = []
        for name, extra in ways:
            before = bytes_moved(counts)
            t0 = time.perf_counter()
            r = subprocess.run(
                [str(vramscope), "summary", url],
                env={**base, **extra},
                capture_output=True,
                text=True,
            )
            seconds = time.perf_counter() - t0
            if r.returncode != 0:
                raise SystemExit(f"summary {url} ({name}) failed: {r.stderr.strip()}")
            rows.append(
                {
                    "file": path.name,
                    "way": name,
                    "seconds": seconds,
                    "wire_bytes": bytes_moved(counts) - before,
                    "file_bytes": path.stat().st_size,
                    "rate": rate,
                }
            )
        return rows
    finally:
        server.stop()
        shutil.rmtree(d, ignore_errors=True)


def report(rows: list[dict]) -> None:
    if not rows:
        return
    print(
        f"\nsummary ssh://... over a {rows[0]['rate'] * 8 / 1e6:.0f} Mbit/s link "
        "(throttling ProxyCommand to the test sshd), same run:"
    )
    print(f"{'file':<34}{'way':<24}{'seconds':>9}{'on the wire':>14}{'of file':>9}{'speed-up':>10}")
    raw = {r["file"]: r["seconds"] for r in rows if r["way"].startswith("streamed raw")}
    for r in rows:
        mib = r["wire_bytes"] / (1 << 20)
        share = r["wire_bytes"] / r["file_bytes"]
        print(
            f"{r['file']:<34}{r['way']:<24}{r['seconds']:>8.2f}s{mib:>10.2f} MiB"
            f"{share:>8.1%}{raw[r['file']] / r['seconds']:>9.1f}x"
        )
    print(
        "targets: run on the host >= 5x faster than streamed raw; streamed compressed "
        "moves <= 10% of the file"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--rate", type=int, default=DEFAULT_RATE, help="link bytes/s")
    args = p.parse_args()
    rows: list[dict] = []
    for f in args.files:
        got = remote_rows(Path(f), args.rate)
        if got is None:
            print("no sshd installed: remote rows skipped")
            return 0
        rows += got
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
