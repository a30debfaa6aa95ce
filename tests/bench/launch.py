"""Run one command and report its wall time and peak memory, measured fairly.

``python launch.py [--sample] OUT.json CMD...``: forks and execs CMD from this
small process, waits for it, and writes ``{"start", "seconds", "rss_mib",
"tree_rss_mib", "status"}`` to OUT.json (``start``: ``time.perf_counter()`` at
the fork, a monotonic clock shared with the benchmark process).

Why a launcher: on Linux ``ru_maxrss`` survives ``fork``/``vfork`` + ``exec``
(the kernel keeps the larger of the old and the new address space's peak), so a
command started straight from the benchmark (whose own peak is large: it
decompresses the 1M-event file) would report the benchmark's peak, not its
own.  Forked from this ~10 MiB process, the command's figure is its own.

Peak RSS is ``wait4``'s ``ru_maxrss`` (the peak of any single process of the
tree, exact); with ``--sample``, the larger of that and the peak of the memory
of the command and its children together, sampled every 10 ms from ``/proc``
(a command that parses in a forked child uses the memory of both at once): RSS
for one process, the sum of PSS for several (pages a forked child still shares
count once).  Sampling costs CPU, so the benchmark samples in runs it does not
time.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

SAMPLE_S = 0.01


def _status_kib(pid: int, field: bytes = b"VmRSS:") -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _pss_kib(pid: int) -> int:
    """Proportional set size: pages shared between processes (fork) counted once in all."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return _status_kib(pid)


def _memory_kib(pids: list[int]) -> int:
    """One process: its RSS; several: the sum of their PSS (RSS would count the pages
    a forked child shares with its parent twice)."""
    return _status_kib(pids[0]) if len(pids) == 1 else sum(_pss_kib(p) for p in pids)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            pass
    return out


def main() -> int:
    sampling = sys.argv[1] == "--sample"
    out, cmd = sys.argv[1 + sampling], sys.argv[2 + sampling :]
    start = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the benchmark's clock
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    peak = [0]
    done = threading.Event()

    def sample() -> None:  # a thread: wait4 below returns the moment the command ends
        while not done.is_set():
            peak[0] = max(peak[0], _memory_kib(_tree(pid)))
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    if sampling and os.path.exists("/proc/self/status"):
        sampler.start()
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    done.set()
    with open(out, "w") as f:
        json.dump(
            {
                "start": start,
                "seconds": seconds,
                "rss_mib": usage.ru_maxrss / 1024,
                "tree_rss_mib": max(peak[0], usage.ru_maxrss) / 1024,
                "status": os.waitstatus_to_exitcode(status),
            },
            f,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
