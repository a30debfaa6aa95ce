"""Independent pieces of model work on every core: one forked process pool.

:func:`pmap` runs ``fn(item)`` for each item and returns the results in the
items' order, the same values ``[fn(x) for x in items]`` gives (what-if
settings, advise's allocator settings, the draws of a batch estimate's range,
the files of a rank directory).

How: a :class:`concurrent.futures.ProcessPoolExecutor` whose workers are
*forked* (Linux) after the function and the items are put in a module-level
table, so a worker finds them in the memory it shares copy-on-write with the
parent - the prepared case's numpy columns are never pickled, and ``fn`` may
be a closure.  Only an item's index goes to a worker and only its result comes
back (pickled: keep results compact where that is possible).

Serial (in this process, exactly the loop above) when the pool would cost more
than it saves or cannot run: one item, one CPU (``os.sched_getaffinity``), a
small piece of work (``work`` below :data:`MIN_PARALLEL_WORK`: a simulation of
fewer than ~200k requests takes less than a pool's start), no ``fork``
(macOS, Windows), inside a pool worker already (no pools of pools), or
:data:`JOBS_ENV` = 1.  ``jobs`` (or :data:`JOBS_ENV`) sets the number of
processes and skips the size rule; the number is also kept under what the
free memory holds (``work`` x :data:`BYTES_PER_WORK` per worker).

Progress and cancel: the caller's :class:`~.progress.Progress` gets
``update(stage, fraction done)``; with ``with_progress`` each call is
``fn(item, progress)`` and the fraction counts the items' own progress (each
worker writes its item's fraction into a shared array).  Setting the caller's
``cancel_event`` stops submitting, cancels what has not started, tells the
running items to stop (their progress raises :class:`~.errors.LoadCancelled`
at its next checkpoint) and raises :class:`~.errors.LoadCancelled`.  An item
that raises: the others are stopped the same way and its exception is raised
here.  A worker that died (the kernel's out-of-memory killer, most often):
:class:`MemoryError`.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Sequence, cast

from .errors import LoadCancelled
from .progress import Progress

#: Work (requests the Python model simulates) below which a pool costs more than it saves.
MIN_PARALLEL_WORK = 200_000
#: The compiled what-if model simulates a request in about this fraction of the Python
#: model's time (measured: 666,640 requests in 0.05 s against 1.48 s), so its work counts
#: that much less: it pays to fork only from ~6M requests (less for answers of one number).
NATIVE_SPEEDUP = 30
#: Memory one worker needs per unit of work (a simulation's per-request lists), bytes.
BYTES_PER_WORK = 400
#: Environment variable: the number of processes (1 = serial), overriding the size rule.
JOBS_ENV = "VRAMSCOPE_JOBS"
POLL_S = 0.05  # how often the parent looks at cancel and progress while waiting

_JOBS: dict[int, "_Job"] = {}  # token -> job; forked workers inherit it
_TOKENS = itertools.count(1)
_IN_WORKER = False


class _Job:
    def __init__(
        self, fn: Callable[..., Any], items: Sequence[Any], with_progress: bool, ctx: Any
    ) -> None:
        self.fn, self.items, self.with_progress = fn, items, with_progress
        self.fractions = ctx.RawArray("d", len(items))  # each item's progress, 0..1
        self.stop = ctx.Event()  # the running items stop at their next checkpoint


def available_cpus() -> int:
    """CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def env_jobs() -> int | None:
    """:data:`JOBS_ENV` as a number of processes (None: unset or unreadable)."""
    try:
        n = int(os.environ.get(JOBS_ENV, "").strip())
    except ValueError:
        return None
    return n if n >= 1 else None


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def workers_for(n_items: int, work: int | None = None, jobs: int | None = None) -> int:
    """How many processes :func:`pmap` uses for ``n_items`` items of ``work`` each
    (``jobs``: as asked; None: :data:`JOBS_ENV`, else every CPU); 1 = serial."""
    if _IN_WORKER or n_items < 2 or not can_fork():
        return 1
    if jobs is None:
        jobs = env_jobs()
    if jobs is None:
        if work is not None and work < MIN_PARALLEL_WORK:
            return 1
        jobs = available_cpus()
    k = max(1, min(int(jobs), n_items))
    if work and k > 1:
        free = _available_memory()
        if free is not None:
            k = max(1, min(k, free // max(work * BYTES_PER_WORK, 1)))
    return k


def simulation_work(n_requests: int, native: bool) -> int:
    """The ``work`` of one simulation of ``n_requests`` requests (``native``: by the
    compiled model), in the units of :data:`MIN_PARALLEL_WORK`."""
    return n_requests // NATIVE_SPEEDUP if native else n_requests


def in_worker() -> bool:
    """This process is a pool worker (its own pmaps run serially)."""
    return _IN_WORKER


def _worker_init() -> None:
    global _IN_WORKER
    _IN_WORKER = True
    # Ctrl-C reaches the whole process group: the parent stops the pool, the workers
    # print no tracebacks of their own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run(token: int, i: int) -> Any:  # in a worker
    job = _JOBS[token]
    if job.stop.is_set():
        raise LoadCancelled()
    if not job.with_progress:
        return job.fn(job.items[i])
    fractions = job.fractions

    def report(_stage: str, f: float) -> None:
        fractions[i] = f

    # A multiprocessing Event, shared with the parent: is_set() is all Progress asks of it.
    return job.fn(job.items[i], Progress(report, cast(threading.Event, job.stop)))


def pmap(
    fn: Callable[..., Any],
    items: Sequence[Any],
    *,
    jobs: int | None = None,
    work: int | None = None,
    progress: Progress | None = None,
    stage: str = "parallel",
    with_progress: bool = False,
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(x) for x in items]`` (``fn(x, progress)`` with ``with_progress``), on a pool
    of forked processes where that pays (see the module's docstring).

    ``work``: the size of one item's work (requests simulated), for the serial rule and
    the memory cap; ``progress``: updated ``(stage, fraction)``, its cancel event stops
    the work; ``on_result(i, result)``: called in this process as each item finishes
    (in the order they finish on a pool)."""
    items = list(items)
    n = len(items)
    k = workers_for(n, work, jobs)
    if k <= 1:
        return _serial(fn, items, progress, stage, with_progress, on_result)
    return _pooled(fn, items, k, progress, stage, with_progress, on_result)


def _serial(fn, items, progress, stage, with_progress, on_result) -> list[Any]:
    n = len(items)
    out = []
    for i, x in enumerate(items):
        if progress is not None:
            progress.update(stage, i / n)  # raises LoadCancelled after a cancel
        if with_progress:
            sub = (
                Progress(_slice(progress, stage, i, n), progress.cancel_event)
                if progress is not None
                else Progress()
            )
            r = fn(x, sub)
        else:
            r = fn(x)
        if on_result is not None:
            on_result(i, r)
        out.append(r)
    if progress is not None:
        progress.update(stage, 1.0)
    return out


def _slice(progress: Progress, stage: str, i: int, n: int):
    """Item ``i`` of ``n``'s own progress as a fraction of the whole."""

    def update(_stage: str, f: float) -> None:
        progress.update(stage, (i + f) / n)

    return update


def _pooled(fn, items, k, progress, stage, with_progress, on_result) -> list[Any]:
    n = len(items)
    ctx = multiprocessing.get_context("fork")
    job = _Job(fn, items, with_progress, ctx)
    token = next(_TOKENS)
    _JOBS[token] = job  # before the first submit: that is when the workers are forked
    cancel = progress.cancel_event if progress is not None else None
    results: list[Any] = [None] * n
    finished = False
    ex = ProcessPoolExecutor(max_workers=k, mp_context=ctx, initializer=_worker_init)
    futures: dict[Future, int] = {}
    try:
        if progress is not None:
            progress.update(stage, 0.0)
        for i in range(n):
            futures[ex.submit(_run, token, i)] = i
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=futures.__getitem__):
                i = futures[f]
                try:
                    results[i] = f.result()
                except BrokenProcessPool:
                    raise MemoryError("a worker process died (out of memory?)") from None
                job.fractions[i] = 1.0
                if on_result is not None:
                    on_result(i, results[i])
            if cancel is not None and cancel.is_set():
                raise LoadCancelled()
            if progress is not None and pending:
                progress.update(stage, min(sum(job.fractions) / n, 0.999))
        finished = True
    finally:
        if not finished:
            job.stop.set()
            for f in futures:
                f.cancel()
        # The running items end at their next checkpoint (or with their item): no worker
        # is killed, so no queue is left half-written.
        ex.shutdown(wait=True, cancel_futures=True)
        del _JOBS[token]
    if progress is not None:
        progress.update(stage, 1.0)
    return results
