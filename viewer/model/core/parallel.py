"""Independent pieces of model work on every core: a forked process pool, or
threads for work that runs without the GIL.

:func:`pmap` runs ``fn(item)`` for each item and returns the results in the
items' order, the same values ``[fn(x) for x in items]`` gives (what-if
settings, advise's allocator settings, the draws of a batch estimate's range,
the files of a rank directory).

How: a :class:`concurrent.futures.ProcessPoolExecutor` whose workers are
*forked* (Linux) after the function and the items are put in a module-level
table, so a worker finds them in the memory it shares copy-on-write with the
parent - the prepared case's numpy columns are never pickled, and ``fn`` may
be a closure.  Only an item's index goes to a worker and only its result comes
back: pickled, except its large buffers (numpy arrays of at least
:data:`SHARED_MIN_BYTES`, a simulation's per-request curves), which the worker
writes into a file of its own in ``/dev/shm`` that the parent maps and unlinks
as it reads the result (no copy through the pipe, no second copy in the
parent); a file a result left behind (an error, a cancel) is removed when the
pool ends.  Where ``/dev/shm`` is missing or full the buffer goes through the
pipe as before.

:func:`pmap_async` starts the same work and returns at once (a
:class:`Pending`): the workers run while this process does serial work of its
own, and :meth:`Pending.result` collects.  Its pool forks when it starts, so it
sees what was built before that call, not what is built after; it leaves this
process a CPU (it works too), and one item is worth a worker.

``threads`` (both): threads of this process instead of forked workers, for work
whose heavy part releases the GIL (the compiled what-if model's loop): no fork,
nothing copied either way; they pay from far less work
(:data:`MIN_THREAD_WORK`).  Nothing may fork while such threads run.

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

import glob
import itertools
import mmap
import multiprocessing
import os
import pickle
import signal
import sys
import threading
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from types import SimpleNamespace
from typing import Any, Callable, Sequence, cast

from .errors import LoadCancelled
from .progress import Progress

#: Work (requests the Python model simulates) below which a pool costs more than it saves.
MIN_PARALLEL_WORK = 200_000
#: The same for a thread beside this process (:func:`pmap_async` with ``threads``): it
#: starts in microseconds, and pays from a simulation of ~100k requests by the compiled
#: model, which takes a few milliseconds.
MIN_THREAD_WORK = 3_000
#: The compiled what-if model simulates a request in about this fraction of the Python
#: model's time (measured: 666,640 requests in 0.05 s against 1.48 s), so its work counts
#: that much less: it pays to fork only from ~6M requests (less for answers of one number).
NATIVE_SPEEDUP = 30
#: Memory one worker needs per unit of work (a simulation's per-request lists), bytes.
BYTES_PER_WORK = 400
#: Environment variable: the number of processes (1 = serial), overriding the size rule.
JOBS_ENV = "VRAMSCOPE_JOBS"
POLL_S = 0.05  # how often the parent looks at cancel and progress while waiting
#: A buffer of a pooled result at least this large comes back through a file in
#: :data:`SHARED_DIR` (mapped, not copied); smaller ones through the pipe.
SHARED_MIN_BYTES = 1 << 20
SHARED_DIR = "/dev/shm"
_SHIPPED = itertools.count()  # a worker's files, numbered

_JOBS: dict[int, "_Job"] = {}  # token -> job; forked workers inherit it
_TOKENS = itertools.count(1)
_IN_WORKER = False


class _Job:
    def __init__(
        self,
        fn: Callable[..., Any],
        items: Sequence[Any],
        with_progress: bool,
        ctx: Any,
        prefix: str,
    ) -> None:
        self.fn, self.items, self.with_progress = fn, items, with_progress
        self.fractions = ctx.RawArray("d", len(items))  # each item's progress, 0..1
        self.stop = ctx.Event()  # the running items stop at their next checkpoint
        # Names of the files this job's results leave in SHARED_DIR (the parent's pid
        # and the job's token: what the parent sweeps when the pool ends).
        self.prefix = prefix


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


def workers_for(
    n_items: int, work: int | None = None, jobs: int | None = None, threads: bool = False
) -> int:
    """How many processes :func:`pmap` uses for ``n_items`` items of ``work`` each
    (``jobs``: as asked; None: :data:`JOBS_ENV`, else every CPU; ``threads``: threads,
    which pay from :data:`MIN_THREAD_WORK`); 1 = serial."""
    if _IN_WORKER or n_items < 2 or not (threads or can_fork()):
        return 1
    asked = _jobs_asked(work, jobs, threads)
    if asked is None:
        return 1
    return _memory_cap(max(1, min(asked, n_items)), work)


def workers_beside(
    n_items: int, work: int | None = None, jobs: int | None = None, threads: bool = False
) -> int:
    """How many workers :func:`pmap_async` starts for ``n_items`` items of ``work`` each
    while this process works too (``jobs``, :data:`JOBS_ENV`: processes in all, this one
    counted; else every CPU; ``threads``: threads, which pay from
    :data:`MIN_THREAD_WORK`); 0 = serial, when the results are asked for."""
    if _IN_WORKER or n_items < 1 or not (threads or can_fork()):
        return 0
    asked = _jobs_asked(work, jobs, threads)
    if asked is None:
        return 0
    k = min(asked - 1, n_items)
    return _memory_cap(k, work) if k >= 1 else 0


def _jobs_asked(work: int | None, jobs: int | None, threads: bool) -> int | None:
    """The workers asked for: ``jobs``, else :data:`JOBS_ENV`, else every CPU; None (serial)
    when neither asks and ``work`` is too small to pay for a worker (threads pay from
    :data:`MIN_THREAD_WORK`, processes from :data:`MIN_PARALLEL_WORK`)."""
    if jobs is None:
        jobs = env_jobs()
    if jobs is None:
        if work is not None and work < (MIN_THREAD_WORK if threads else MIN_PARALLEL_WORK):
            return None
        jobs = available_cpus()
    return int(jobs)


def _memory_cap(k: int, work: int | None) -> int:
    """``k`` workers, no more than the free memory holds at ``work`` each."""
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


def _run(token: int, i: int) -> tuple[bytes, list[tuple[str, int]]]:  # in a worker
    job = _JOBS[token]
    if job.stop.is_set():
        raise LoadCancelled()
    if not job.with_progress:
        return _ship(job.fn(job.items[i]), job.prefix)
    fractions = job.fractions

    def report(_stage: str, f: float) -> None:
        fractions[i] = f

    # A multiprocessing Event, shared with the parent: is_set() is all Progress asks of it.
    return _ship(
        job.fn(job.items[i], Progress(report, cast(threading.Event, job.stop))), job.prefix
    )


def _ship(result: Any, prefix: str) -> tuple[bytes, list[tuple[str, int]]]:
    """``result`` pickled, its buffers of :data:`SHARED_MIN_BYTES` or more written to files
    in :data:`SHARED_DIR` (named ``prefix``...) instead: (the pickle, each file's name and
    size, in the order :func:`_unship` gives them back)."""
    files: list[tuple[str, int]] = []

    def out_of_band(buf: pickle.PickleBuffer) -> bool:
        try:
            raw = buf.raw()
        except BufferError:  # not contiguous: pickled as it is
            return True
        if raw.nbytes < SHARED_MIN_BYTES:
            return True
        name = f"{prefix}{os.getpid()}-{next(_SHIPPED)}"
        if not _write_shared(name, raw):
            return True
        files.append((name, raw.nbytes))
        return False

    try:
        data = pickle.dumps(result, protocol=5, buffer_callback=out_of_band)
    except BaseException:
        for name, _ in files:
            _unlink(name)
        raise
    return data, files


def _write_shared(name: str, raw: memoryview) -> bool:
    """``raw`` into a new file ``name`` of :data:`SHARED_DIR`, readable by this user
    alone; False (and no file) where it cannot be written (no such folder, full)."""
    path = os.path.join(SHARED_DIR, name)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return False
    try:
        done = 0
        while done < len(raw):
            done += os.write(fd, raw[done:])
        return True
    except OSError:
        _unlink(name)
        return False
    finally:
        os.close(fd)


def _unlink(name: str) -> None:
    try:
        os.unlink(os.path.join(SHARED_DIR, name))
    except OSError:
        pass


def _unship(data: bytes, files: list[tuple[str, int]]) -> Any:
    """The result :func:`_ship` made: its files mapped (shared with no one once unlinked,
    here at once: the memory goes with the last array that uses it)."""
    buffers = []
    try:
        for name, size in files:
            path = os.path.join(SHARED_DIR, name)
            fd = os.open(path, os.O_RDWR)
            try:
                os.unlink(path)
                buffers.append(mmap.mmap(fd, size))
            finally:
                os.close(fd)
    finally:
        for name, _ in files[len(buffers) :]:
            _unlink(name)
    return pickle.loads(data, buffers=buffers)


def _sweep(prefix: str) -> None:
    """Remove what results of a pool that ended left in :data:`SHARED_DIR` (an item that
    finished after a cancel or another's error: its result was never read)."""
    for path in glob.glob(os.path.join(SHARED_DIR, glob.escape(prefix) + "*")):
        try:
            os.unlink(path)
        except OSError:
            pass


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
    threads: bool = False,
) -> list[Any]:
    """``[fn(x) for x in items]`` (``fn(x, progress)`` with ``with_progress``), on a pool
    of forked processes where that pays (see the module's docstring).

    ``work``: the size of one item's work (requests simulated), for the serial rule and
    the memory cap; ``progress``: updated ``(stage, fraction)``, its cancel event stops
    the work; ``on_result(i, result)``: called in this process as each item finishes
    (in the order they finish on a pool); ``threads``: on threads of this process, for
    work that runs without the GIL (as :func:`pmap_async`'s)."""
    items = list(items)
    n = len(items)
    k = workers_for(n, work, jobs, threads)
    if k <= 1:
        return _serial(fn, items, progress, stage, with_progress, on_result)
    if threads:
        return _ThreadPool(fn, items, k, with_progress).collect(progress, stage, on_result)
    return _pooled(fn, items, k, progress, stage, with_progress, on_result)


def pmap_async(
    fn: Callable[..., Any],
    items: Sequence[Any],
    *,
    jobs: int | None = None,
    work: int | None = None,
    with_progress: bool = False,
    threads: bool = False,
) -> Pending:
    """:func:`pmap`'s work, started on a pool beside this process and left running: the
    :class:`Pending` gives the results (:meth:`Pending.result`, which also takes the
    progress).  Use it as a context manager: leaving the block before the results were
    asked for (an error, a cancel of this process's own work) stops the pool.  Serial
    (in :meth:`Pending.result`) where :func:`workers_beside` says so.

    ``threads``: threads of this process instead of forked workers, for work that runs
    without the GIL (the compiled what-if model's loop): no fork, no copy of a result,
    and the items see what is built meanwhile.  Nothing may fork (no :func:`pmap` on a
    pool) until its results were taken: a fork copies the running threads' half-done
    state and the locks they hold."""
    items = list(items)
    k = workers_beside(len(items), work, jobs, threads)
    pool: _Pool | None = None
    if k:
        pool = (
            _ThreadPool(fn, items, k, with_progress)
            if threads
            else _start(fn, items, k, with_progress)
        )
    return Pending(fn, items, with_progress, pool)


class Pending:
    """Work :func:`pmap_async` started: :meth:`result` waits for it, :meth:`close` stops it."""

    def __init__(
        self,
        fn: Callable[..., Any],
        items: list[Any],
        with_progress: bool,
        pool: _Pool | None,
    ) -> None:
        self._fn, self._items, self._with_progress, self._pool = fn, items, with_progress, pool

    @property
    def pooled(self) -> bool:
        """The work runs on a pool (else serially, when :meth:`result` is called)."""
        return self._pool is not None

    def result(
        self,
        progress: Progress | None = None,
        stage: str = "parallel",
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list[Any]:
        """The results in the items' order (:func:`pmap`'s, ``progress``, ``stage`` and
        ``on_result`` as there); the pool ends here."""
        if self._pool is None:
            return _serial(self._fn, self._items, progress, stage, self._with_progress, on_result)
        pool, self._pool = self._pool, None
        # This process's own work is done: it takes on what no worker has started.
        return pool.collect(progress, stage, on_result, helping=True)

    def close(self) -> None:
        """Stop what has not finished (nothing to do after :meth:`result`)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.end(finished=False)

    def __enter__(self) -> Pending:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    return _start(fn, items, k, with_progress).collect(progress, stage, on_result)


def _start(fn, items, k, with_progress) -> _Pool:
    """A pool of ``k`` forked workers with every item submitted."""
    return _Pool(fn, items, k, with_progress)


class _Pool:
    """One round of work on ``k`` forked workers: every item submitted at once (the
    workers fork at the first submit, seeing this process as it is then)."""

    def __init__(self, fn, items, k, with_progress) -> None:
        ctx = multiprocessing.get_context("fork")
        self.token = next(_TOKENS)
        self.job = _Job(fn, items, with_progress, ctx, f"vramscope-{os.getpid()}-{self.token}-")
        _JOBS[self.token] = self.job  # before the first submit: that is when the workers fork
        self.n = len(items)
        self.ex: Executor = ProcessPoolExecutor(
            max_workers=k, mp_context=ctx, initializer=_worker_init
        )
        self.futures: dict[Future, int] = {}
        self.ended = False
        try:
            for i in range(self.n):
                self.futures[self.ex.submit(_run, self.token, i)] = i
        except BaseException:
            self.end(finished=False)
            raise

    def collect(self, progress, stage, on_result, helping: bool = False) -> list[Any]:
        """Every result, in the items' order; the pool ends here.  ``helping``: this
        process runs the items no worker has taken yet itself (the last first), one at a
        time, while it waits (a pool sized to leave it a CPU)."""
        n, job, futures = self.n, self.job, self.futures
        cancel = progress.cancel_event if progress is not None else None
        results: list[Any] = [None] * n
        finished = False
        try:
            if progress is not None:
                progress.update(stage, 0.0)
            pending = set(futures)
            # Highest index first: the items a worker is least likely to have taken.
            queued = sorted(futures, key=futures.__getitem__) if helping else []
            while pending:
                while queued:
                    f = queued.pop()
                    if f in pending and f.cancel():
                        pending.discard(f)
                        i = futures[f]
                        results[i] = self.here(i, progress, stage)
                        job.fractions[i] = 1.0
                        if on_result is not None:
                            on_result(i, results[i])
                        break
                done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=futures.__getitem__):
                    i = futures[f]
                    try:
                        results[i] = self.take(f)
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
            self.end(finished)
        if progress is not None:
            progress.update(stage, 1.0)
        return results

    def take(self, f: Future) -> Any:
        """A finished item's result."""
        return _unship(*f.result())

    def here(self, i: int, progress: Progress | None, stage: str) -> Any:
        """Item ``i`` run in this process (no worker took it); its progress counts in
        the whole, and the caller's cancel stops it."""
        job = self.job
        if not job.with_progress:
            return job.fn(job.items[i])
        fractions, n = job.fractions, self.n

        def report(_stage: str, f: float) -> None:
            fractions[i] = f
            if progress is not None:  # raises LoadCancelled after a cancel
                progress.update(stage, min(sum(fractions) / n, 0.999))

        cancel = progress.cancel_event if progress is not None else None
        return job.fn(job.items[i], Progress(report, cancel))

    def end(self, finished: bool) -> None:
        """Stop (unless ``finished``) and wait for the workers; remove what results left."""
        if self.ended:
            return
        self.ended = True
        if not finished:
            self.job.stop.set()
            for f in self.futures:
                f.cancel()
        try:
            # The running items end at their next checkpoint (or with their item): no
            # worker is killed, so no queue is left half-written.
            self.ex.shutdown(wait=True, cancel_futures=True)
        finally:
            del _JOBS[self.token]
            _sweep(self.job.prefix)


class _ThreadPool(_Pool):
    """:class:`_Pool`'s round on ``k`` threads of this process (:func:`pmap_async`'s
    ``threads``): the results are the items' own objects."""

    def __init__(self, fn, items, k, with_progress) -> None:
        self.token = 0
        # The progress and the stop flag in this process's own memory.
        here = SimpleNamespace(RawArray=lambda _t, n: [0.0] * n, Event=threading.Event)
        self.job = _Job(fn, items, with_progress, here, "")
        self.n = len(items)
        self.ex = ThreadPoolExecutor(max_workers=k, thread_name_prefix="vramscope-beside")
        self.futures = {}
        self.ended = False
        try:
            for i in range(self.n):
                self.futures[self.ex.submit(self.run, i)] = i
        except BaseException:
            self.end(finished=False)
            raise

    def run(self, i: int) -> Any:
        job = self.job
        if job.stop.is_set():
            raise LoadCancelled()
        if not job.with_progress:
            return job.fn(job.items[i])
        fractions = job.fractions

        def report(_stage: str, f: float) -> None:
            fractions[i] = f

        return job.fn(job.items[i], Progress(report, job.stop))

    def take(self, f: Future) -> Any:
        return f.result()

    def end(self, finished: bool) -> None:
        if self.ended:
            return
        self.ended = True
        if not finished:
            self.job.stop.set()
        # The running items end at their next checkpoint (or with their item).
        self.ex.shutdown(wait=True, cancel_futures=True)
