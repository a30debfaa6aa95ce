"""What the model shares with a parse started before it was imported (stdlib only).

A command may start parsing a big file on a thread before numpy and the model
are imported (:mod:`vramscope.viewer.startup.parse_ahead`); the model must not
import that start-up code (it sits above the model), so the two meet here:

- the start-up code :func:`offer` s its pending parse for a file, and
  :func:`vramscope.viewer.model.io.load.load_snapshot` :func:`claim` s it (once);
  anything with ``answer(update, path)`` and ``discard()`` will do;
- both parse big files the same way: :data:`MIN_BYTES`, :func:`parse_threads`,
  :func:`map_file`, :data:`SECTION_MIN_EVENTS`;
- both note when a start-up stage ended (:func:`stamp`).

Stdlib only: the start-up code imports it before numpy (:mod:`vramscope.viewer.early`).
"""

from __future__ import annotations

import os

MIN_BYTES = 4 << 20  # below this the parse is shorter than starting a thread
THREADS_ENV = "VRAMSCOPE_PARSE_THREADS"
MAX_THREADS = 32
SECTION_MIN_EVENTS = 65536  # shorter device traces: one thread (tests lower it)
_pending: dict[str, object] = {}


def offer(path: str | os.PathLike, parse: object) -> None:
    """Hand the parse already under way for ``path`` to the next load of that file."""
    _pending[os.path.abspath(os.fspath(path))] = parse


def pending(path: str | os.PathLike) -> bool:
    """True when a parse of ``path`` waits to be claimed."""
    return os.path.abspath(os.fspath(path)) in _pending


def claim(path: str | os.PathLike):
    """The parse offered for ``path``, handed to the caller (once), or None."""
    if not _pending:
        return None
    return _pending.pop(os.path.abspath(os.fspath(path)), None)


def stamp(stage: str) -> None:
    """Note when a start-up stage ended (``time.perf_counter``, the clock the benchmark's
    launcher shares) in the file ``VRAMSCOPE_STAGE_LOG`` names, if set: the per-stage
    breakdown of ``make bench`` for whole processes.  Costs nothing when unset."""
    log = os.environ.get("VRAMSCOPE_STAGE_LOG")
    if log:
        import time

        try:
            with open(log, "a", encoding="ascii") as f:
                f.write(f"{stage} {time.perf_counter():.6f}\n")
        except OSError:
            pass


def parse_threads(beside_work: bool = False) -> int:
    """How many threads the compiled parser may use: the cores this process may run
    on (at most :data:`MAX_THREADS`), or ``VRAMSCOPE_PARSE_THREADS``.  ``beside_work``:
    the parse runs ahead while this process's main thread works (imports the model,
    builds a window): from 4 cores on, one is left to it, which it would otherwise
    share with a parse thread (on a 16-core host the model's import took 0.49 s beside
    16 parse threads, 0.3 s alone, and the parsed columns waited for it)."""
    forced = os.environ.get(THREADS_ENV, "")
    if forced.isdigit() and int(forced) > 0:
        return min(int(forced), 256)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if beside_work and cores >= 4:
        cores -= 1
    return max(1, min(cores, MAX_THREADS))


def map_file(f):
    """A read-only map of the open file ``f`` for a parse on several threads, or None
    where it cannot be mapped.  Its pages are not touched here: the parser's threads
    map the stretches they read in large steps, in parallel, and unmap them behind
    them (``parse(..., file_mapped=True)``), so the file never counts whole in this
    process's memory."""
    import mmap

    try:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, OverflowError):
        return None
