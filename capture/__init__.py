"""Record PyTorch's CUDA allocator history and never lose the OOM snapshot.

In code::

    from vramscope.capture import record

    with record(out="snapshots/"):      # or @record(...) on a function
        train()

or around any script, like ``memray run``::

    python -m vramscope.capture --out snapshots/ train.py --lr 3e-4
    vramscope record --out snapshots/ -m my_package.train
    torchrun --nproc-per-node 8 -m vramscope.capture --out snapshots/ train.py

A snapshot is written when the block (or the script) ends, also on an
exception; at the moment of every CUDA out-of-memory error, before the
``OutOfMemoryError`` propagates unchanged; on ``kill -USR1 <pid>`` without
stopping training; and on :func:`dump`.  Each is a standard
``torch.cuda.memory._snapshot()`` pickle (torch's memory_viz opens it too)
with a JSON sidecar: torch version, GPU, allocator settings,
``memory_stats()`` at that moment, the reason and, for an OOM, the request.
File names carry host, pid, rank, device, reason and time, so every rank of
a distributed job writes its own files.

Without CUDA (a CPU-only torch, no GPU, or no torch at all) one warning goes
to stderr and the program runs as if vramscope were not there.  Capture
problems are always warnings, never exceptions in the user's program; only
misuse of the API (a bad argument) raises.

Live attach: ``serve()`` (or ``record(..., live=True)``, or the runner's
``--live``) lets ``vramscope attach`` and the viewer's File > Attach... watch
this process's memory and grab snapshots while it runs (see
:mod:`vramscope.capture.live`).

Importing this package does not import torch; that happens on the first
:func:`record` / :func:`start` / :func:`dump`.

Modules: :mod:`.recorder` (turns allocator history on, writes snapshots), :mod:`.runner`
(a script or module under a recorder), :mod:`.backend` (the few torch calls), :mod:`.files`
(names, atomic writes, the sidecar), :mod:`.gpu` (the whole GPU beside the snapshot),
:mod:`.oom` (the snapshot at an OOM), :mod:`.outside` (OOMs from outside the caching
allocator), :mod:`.signals` (``kill -USR1``), :mod:`.messages` (one-line warnings) and
:mod:`.live` (the live-attach agent).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .recorder import Recorder, active_recorder
from .signals import DEFAULT_SIGNAL

__all__ = [
    "Recorder",
    "active_recorder",
    "dump",
    "record",
    "serve",
    "start",
    "stop",
    "stop_serving",
]

# Recorders started with start(), newest last, so that stop() undoes the newest.
_started: list[Recorder] = []


def record(
    out: str | os.PathLike[str] = "snapshots",
    max_entries: int = 100_000,
    stacks: str = "python",
    context: str | None = "all",
    *,
    oom: bool = True,
    dump_on_exit: bool = True,
    dump_signal: str | int | None = DEFAULT_SIGNAL,
    max_oom_dumps: int = 10,
    live: bool = False,
) -> Recorder:
    """A recorder for ``with record(...):`` or ``@record(...)``.

    Entering starts ``torch.cuda.memory._record_memory_history``; leaving
    writes a snapshot (also when leaving on an exception) and restores the
    recording state from before.  As a decorator every call records anew;
    plain ``@record`` works too.

    Args:
        out: directory for the snapshots (created when the first one is
            written).
        max_entries: size of the allocator's ring buffer of alloc/free
            events; older events are overwritten, so memory stays bounded.
            Snapshot size and dump time grow with it: with Python stacks
            100 000 entries of a transformer's training make a 9 MB pickle,
            dumped in 0.15 s (H200, torch 2.11).
        stacks: ``"python"`` (default) keeps the Python stack of each event.
            ``"all"`` adds C++ frames; recording costs about the same (both
            within 0.2% of a 94 ms training step of a 75M-parameter
            transformer on an H200), but every dump symbolises the C++ frames (0.2-0.4 s
            for 1 000-10 000 entries, growing with the history and the
            variety of stacks) and the files are about twice as large.
            In some processes the first snapshot takes about 2.3 s longer, a
            one-time cost inside torch (seen with torch 2.11 when recording
            started before CUDA was initialised, as under the runner).
        context: which events keep a stack: ``"all"`` (allocations and frees,
            default), ``"alloc"`` (allocations only, cheaper), ``"state"``
            (only blocks still allocated) or None (no stacks at all).
        oom: write a snapshot at each CUDA out-of-memory error.
        dump_on_exit: write a snapshot when the block ends.
        dump_signal: signal that writes a snapshot without stopping the
            program (``kill -USR1 <pid>``); None turns this off.  Ignored
            where the signal does not exist (SIGUSR1 on Windows).
        max_oom_dumps: most OOM snapshots one recorder writes, so that code
            that catches OOMs in a loop (batch-size search) cannot fill a disk.
        live: also serve live attach (see :func:`serve`) while recording.

    Raises:
        ValueError, TypeError: for bad arguments; nothing else ever does.
    """
    if callable(out) and not isinstance(out, (str, os.PathLike)):
        return Recorder()(out)  # bare @record
    if live:
        from .live.agent import LiveRecorder

        return LiveRecorder(
            out,
            max_entries,
            stacks,
            context,
            oom=oom,
            dump_on_exit=dump_on_exit,
            dump_signal=dump_signal,
            max_oom_dumps=max_oom_dumps,
        )
    return Recorder(
        out,
        max_entries,
        stacks,
        context,
        oom=oom,
        dump_on_exit=dump_on_exit,
        dump_signal=dump_signal,
        max_oom_dumps=max_oom_dumps,
    )


def start(
    out: str | os.PathLike[str] = "snapshots",
    max_entries: int = 100_000,
    stacks: str = "python",
    context: str | None = "all",
    **options: Any,
) -> Recorder:
    """Start recording until :func:`stop`; same arguments as :func:`record`.

    OOM and signal dumps work as with ``record``; nothing is written when
    recording stops, so call :func:`dump` for a snapshot.
    """
    rec = Recorder(out, max_entries, stacks, context, **options).start()
    _started.append(rec)
    return rec


def dump(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Write a snapshot now; returns its path, or None if nothing could be written.

    Uses the innermost active recorder's directory; ``path`` puts the
    snapshot exactly there instead (sidecar beside it, ``.json``).  Without an
    active recorder the snapshot goes to ``snapshots/`` and holds the current
    memory state with whatever history torch happens to record.
    """
    rec = active_recorder()
    if rec is None:
        rec = Recorder(dump_signal=None)
    return rec.dump(path)


def stop() -> None:
    """Stop the recording most recently started with :func:`start` (no-op if none)."""
    if _started:
        _started.pop().stop()


def serve(
    out: str | os.PathLike[str] = "snapshots",
    max_entries: int = 100_000,
    stacks: str = "python",
    context: str | None = "all",
    **options: Any,
) -> Any:
    """Let a viewer attach to this running process; returns the agent (or None).

    Starts recording (same arguments as :func:`start`) unless a recorder is
    already active, and serves a local endpoint from a daemon thread: a Unix
    socket in a private per-user directory (127.0.0.1 TCP with a token where
    there are none), listed by ``vramscope attach --list``.  ``budget=0.01``
    caps the share of wall time its answers may take from the program.
    Problems are one warning; the program always carries on.
    """
    from .live.agent import serve as _serve

    return _serve(out, max_entries=max_entries, stacks=stacks, context=context, **options)


def stop_serving() -> None:
    """Stop live attach (no-op if not serving)."""
    from .live.agent import stop_serving as _stop

    _stop()


def _reset_for_tests() -> None:
    """Stop everything and forget process state (tests only)."""
    from . import backend, gpu, messages, recorder
    from .live import agent as live_agent

    live_agent.stop_serving()
    while _started:
        _started.pop().stop()
    for rec in list(recorder._State.stack):
        rec.stop()
    recorder._State.external_before = False
    recorder._State.applied = None
    recorder._State.deferred_pending = False
    messages._reset_once()
    backend.reset_backend()
    gpu._reset_for_tests()
