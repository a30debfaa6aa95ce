"""The recorder: turns allocator history on, writes snapshots, turns it back off.

Recorders nest.  The active ones form a stack; the allocator always runs with
the settings of the innermost one, and OOM and signal dumps go to it.  When
the last one stops, history recording goes back to what it was before the
first started: off, or, if somebody else had already turned it on outside
vramscope, left on (torch can tell whether history is on, but not with which
settings, so those cannot be restored).

Recording starts when CUDA does.  If torch has not initialised CUDA yet when
a recorder starts, the settings are applied from torch's own queue of
deferred CUDA calls (the one behind ``torch.cuda.manual_seed``), so that
starting a recorder at the top of a script, or running a script under
``python -m vramscope.capture``, never starts the CUDA runtime early: a
script can still set ``CUDA_VISIBLE_DEVICES`` or ``PYTORCH_CUDA_ALLOC_CONF``
before its first CUDA call, exactly as without vramscope.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import pickle
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal, TypeVar

from . import files, gpu, messages, oom, outside, signals
from .backend import HistorySettings, get_backend

F = TypeVar("F", bound=Callable[..., Any])

STACKS = ("python", "all")
CONTEXTS = (None, "state", "alloc", "all")
_NO_CUDA = "no-cuda"  # key of the one warning a process gets when nothing can be recorded


class _State:
    """Process-wide recorder state (there is one allocator per process)."""

    lock = threading.RLock()
    stack: ClassVar[list[Recorder]] = []
    # History was on, set by someone else, when the first recorder started.
    external_before = False
    # What vramscope last applied: settings, or None (off / never touched).
    applied: HistorySettings | None = None
    deferred_pending = False
    # One dump at a time: a signal arriving during a dump must not start another.
    dump_lock = threading.Lock()
    # The exception hooks installed while a recorder is active (see _install_hooks), and
    # the exceptions an OOM dump was already written for, by identity: a reference would
    # keep their tracebacks' frames, and the tensors those hold, alive in a program that
    # catches the error and goes on.
    hooks: "tuple[Callable[..., Any], Callable[..., Any]] | None" = None
    handled: ClassVar[list[tuple[int, int]]] = []


def active_recorder() -> "Recorder | None":
    """The innermost active recorder, or None."""
    stack = _State.stack
    return stack[-1] if stack else None


def _usable_backend() -> Any:
    """The torch backend if recording can work here; else None, after one warning."""
    backend = get_backend()
    if backend is None:
        messages.warn_once(
            _NO_CUDA,
            "torch cannot be imported, so CUDA memory cannot be recorded; "
            "your program runs without recording",
        )
        return None
    problem = backend.early_problem()
    if problem is not None:
        messages.warn_once(_NO_CUDA, problem)
        return None
    return backend


def _apply(backend: Any) -> None:
    """Make the allocator's history settings match the recorder stack, now."""
    top = active_recorder()
    desired = top.settings if top is not None else None
    try:
        if desired is not None:
            if desired != _State.applied:
                backend.record_history(desired)
                _State.applied = desired
            oom.ensure_attached(backend, _on_oom)
        elif _State.applied is not None:
            if not _State.external_before:
                backend.record_history(None)
            _State.applied = None
    except Exception as exc:
        messages.warn(f"cannot change CUDA memory history recording: {type(exc).__name__}: {exc}")


def _apply_deferred(backend: Any) -> None:
    # Runs inside torch's CUDA initialisation, once the allocator exists; an
    # exception here would reach the user's program as DeferredCudaCallError,
    # so none may escape.
    #
    # torch holds its initialisation lock here.  A thread inside start() or
    # stop() holds _State.lock and may be waiting for that same torch lock
    # (in _lazy_call); waiting for it forever would deadlock.  Giving up is
    # safe: that thread's _lazy_call then finds CUDA initialised and runs
    # this function again itself.
    if not _State.lock.acquire(timeout=2.0):
        return
    try:
        _State.deferred_pending = False
        if _State.stack and _State.applied is None:
            # Only now can torch say whether someone else turned history on.
            _State.external_before = bool(backend.history_enabled())
        _apply(backend)
    except Exception as exc:
        messages.warn(f"cannot start CUDA memory history recording: {exc}")
    finally:
        _State.lock.release()


def _sync(backend: Any) -> None:
    """Apply the stack's settings now if CUDA is up, else when torch brings it up."""
    if backend.cuda_initialized():
        _apply(backend)
        return
    if _State.deferred_pending:
        return  # the queued call reads the stack when it runs
    if active_recorder() is None and _State.applied is None:
        return  # nothing to start and nothing to undo
    try:
        queued = backend.call_at_cuda_init(lambda: _apply_deferred(backend))
    except Exception:
        queued = False
    if queued:
        _State.deferred_pending = True
    elif backend.cuda_available():
        _apply(backend)  # old torch without the queue: start the runtime now


def _on_oom(event: oom.OomEvent) -> None:
    rec = active_recorder()  # no lock: this runs inside the allocator, keep it short
    if rec is not None:
        rec._handle_oom(event)


def _on_signal(signum: int) -> None:
    for rec in reversed(list(_State.stack)):
        if rec._signum == signum:
            rec._dump("signal", blocking=False)
            return


signals.set_dispatch(_on_signal)


class Recorder:
    """Records the CUDA caching allocator's history and writes snapshots.

    Use as a context manager, a decorator, or with :meth:`start` /
    :meth:`dump` / :meth:`stop`; :func:`vramscope.capture.record` builds one.
    See that function for the arguments and their cost.
    """

    def __init__(
        self,
        out: str | os.PathLike[str] = "snapshots",
        max_entries: int = 100_000,
        stacks: str = "python",
        context: str | None = "all",
        *,
        oom: bool = True,
        dump_on_exit: bool = True,
        dump_signal: str | int | None = signals.DEFAULT_SIGNAL,
        max_oom_dumps: int = 10,
    ) -> None:
        if not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"out must be a directory path, not {type(out).__name__}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive int, not {max_entries!r}")
        if stacks not in STACKS:
            raise ValueError(f"stacks must be one of {STACKS}, not {stacks!r}")
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, not {context!r}")
        if (
            isinstance(max_oom_dumps, bool)
            or not isinstance(max_oom_dumps, int)
            or max_oom_dumps < 0
        ):
            raise ValueError(f"max_oom_dumps must be an int >= 0, not {max_oom_dumps!r}")
        # Absolute now: a script that changes directory must not move its snapshots.
        self.out = Path(os.path.abspath(out))
        self.max_entries = max_entries
        self.stacks = stacks
        self.context = context
        self.oom = bool(oom)
        self.dump_on_exit = bool(dump_on_exit)
        self.dump_signal = dump_signal
        self.max_oom_dumps = max_oom_dumps
        self._signum = signals.resolve(dump_signal)
        self._backend: Any = None
        self._active = False
        self._noop = False
        self._signal_held = False
        self._oom_dumps = 0
        #: Every snapshot this recorder wrote, oldest first.
        self.paths: list[Path] = []
        #: The newest OOM snapshot, if any.
        self.last_oom_path: Path | None = None

    # -- configuration -----------------------------------------------------

    @property
    def settings(self) -> HistorySettings:
        return HistorySettings(self.context, self.stacks, self.max_entries)

    @property
    def active(self) -> bool:
        """Whether this recorder is started and actually recording (CUDA present)."""
        return self._active and not self._noop

    def _clone(self) -> "Recorder":
        return Recorder(
            self.out,
            self.max_entries,
            self.stacks,
            self.context,
            oom=self.oom,
            dump_on_exit=self.dump_on_exit,
            dump_signal=self.dump_signal,
            max_oom_dumps=self.max_oom_dumps,
        )

    def __repr__(self) -> str:
        state = "active" if self.active else ("inactive (no CUDA)" if self._noop else "inactive")
        return (
            f"Recorder(out={str(self.out)!r}, max_entries={self.max_entries}, "
            f"stacks={self.stacks!r}, context={self.context!r}) [{state}]"
        )

    # -- start / stop --------------------------------------------------------

    def start(self) -> "Recorder":
        """Start recording (deferred until CUDA initialises); returns self.

        Without CUDA this prints one warning per process and does nothing
        else.  Starting a recorder that is already started is an error.
        """
        with _State.lock:
            if self._active:
                raise RuntimeError("this Recorder is already started; nest a new one instead")
            self._active = True
            self._oom_dumps = 0
            backend = _usable_backend()
            if backend is None:
                self._noop = True
                return self
            self._noop = False
            self._backend = backend
            self._say_free_stacks_off(backend)
            try:
                if not _State.stack and _State.applied is None and backend.cuda_initialized():
                    # Asking before CUDA is initialised crashes torch; the
                    # deferred start asks instead (see _apply_deferred).
                    _State.external_before = bool(backend.history_enabled())
                _State.stack.append(self)
                _install_hooks()
                if self.out.is_dir():
                    files.clean_stale_temps(self.out)
                if self._signum is not None:
                    self._signal_held = signals.acquire(self._signum)
                _sync(backend)
            except Exception as exc:
                messages.warn(f"cannot start recording: {type(exc).__name__}: {exc}")
        return self

    def _say_free_stacks_off(self, backend: Any) -> None:
        if self.context != "all":
            return
        why = _safe(getattr(backend, "free_stack_hazard", lambda: None))
        if why:
            messages.info_once(
                "free-stacks-off",
                f"frees are recorded without their stacks (context 'alloc'): {why}; "
                "VRAMSCOPE_FREE_STACKS=1 records them anyway",
            )

    def stop(self) -> None:
        """Stop recording and restore the previous state; a no-op if not started.

        Does not dump: call :meth:`dump` first to keep the history.
        """
        with _State.lock:
            if not self._active:
                return
            self._active = False
            if self._noop:
                return
            try:
                if self in _State.stack:
                    _State.stack.remove(self)
                if not _State.stack:
                    _remove_hooks()
                if self._signal_held and self._signum is not None:
                    signals.release(self._signum)
                    self._signal_held = False
                _sync(self._backend)
            except Exception as exc:
                messages.warn(f"cannot stop recording cleanly: {type(exc).__name__}: {exc}")

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        try:
            if exc is not None and self.active:
                self._annotate_oom(exc)
                self._outside_oom(exc)
            if self.dump_on_exit and self.active:
                extra = None
                if exc is not None and not _clean_exit(exc):
                    extra = {"exception": f"{type(exc).__name__}: {exc}"[:4000]}
                self._dump("exit", extra=extra)
        finally:
            self.stop()
        return False  # never swallow the user's exception

    def __call__(self, func: F) -> F:
        """Decorate ``func`` so that each call runs under a fresh copy of this recorder."""
        if not callable(func):
            raise TypeError("Recorder used as a decorator needs a callable")
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self._clone():
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._clone():
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    # -- dumping -----------------------------------------------------------

    def dump(self, path: str | os.PathLike[str] | None = None) -> Path | None:
        """Write a snapshot now (reason ``manual``); returns its path, or None on failure.

        ``path`` None names the file automatically inside ``out``; otherwise
        the snapshot goes exactly there and the sidecar next to it with
        ``.json`` as suffix.  Works on a recorder that is not started too (the
        snapshot then has whatever history is being recorded, maybe none).
        """
        if path is not None:
            files.sidecar_path(path)  # a misuse (a .json path) raises here, before anything
        return self._dump("manual", path=path)

    def _handle_oom(self, event: oom.OomEvent) -> None:
        if not self.oom:
            return
        if self._oom_dumps >= self.max_oom_dumps:
            messages.warn_once(
                f"oom-cap-{id(self)}",
                f"{self.max_oom_dumps} out-of-memory snapshot"
                f"{'' if self.max_oom_dumps == 1 else 's'} written; not writing more "
                "(max_oom_dumps)",
            )
            return
        self._oom_dumps += 1
        path = self._dump("oom", device=event.device, oom_event=event)
        if path is not None:
            self.last_oom_path = path

    def _annotate_oom(self, exc: BaseException) -> None:
        """Add the OOM's message to the OOM sidecar, once the exception is seen."""
        if self.last_oom_path is None or self._backend is None:
            return
        try:
            if self._backend.is_oom(exc):
                files.update_sidecar(files.sidecar_path(self.last_oom_path), oom_message=str(exc))
        except Exception as exc2:
            messages.warn(f"cannot add the OOM message to the sidecar: {exc2}")

    def _outside_oom(self, exc: BaseException) -> Path | None:
        """An ``oom`` snapshot for an OOM outside the caching allocator (cuBLAS, NCCL, ...).

        Called with the exception the program dies of; the snapshot, the whole-GPU
        table and the sidecar's ``outside_allocator_oom`` are taken now, before the
        exception goes on unchanged.  Allocator OOMs were dumped by the observer.
        """
        if not self.oom or self._backend is None or self._noop:
            return None
        try:
            found = outside.classify(
                exc, is_allocator_oom=self._backend.is_oom, skip_files=_OWN_FRAMES
            )
        except Exception:
            found = None
        if found is None:
            return None
        key = (id(exc), id(exc.__traceback__))
        with _State.lock:
            if key in _State.handled:
                return None  # dumped already: by the with block, then the exception hook
            if self._oom_dumps >= self.max_oom_dumps:
                return None
            self._oom_dumps += 1
            _State.handled[:] = [*_State.handled[-7:], key]
        messages.info(
            f"the program died of an out-of-memory error outside PyTorch's "
            f"allocator ({found['library']}): {found['error'][:200]}"
        )
        path = self._dump(
            "oom", extra={"outside_allocator_oom": found, "oom_message": outside.full_message(exc)}
        )
        if path is not None:
            self.last_oom_path = path
        return path

    def _dump(
        self,
        reason: str,
        *,
        path: str | os.PathLike[str] | None = None,
        device: int | None = None,
        oom_event: oom.OomEvent | None = None,
        extra: dict[str, Any] | None = None,
        blocking: bool = True,
    ) -> Path | None:
        backend = self._backend if self._backend is not None else _usable_backend()
        if backend is None or self._noop:
            return None
        if device is None and not backend.cuda_initialized():
            if not backend.cuda_available():
                messages.warn_once(
                    _NO_CUDA,
                    f"CUDA is not available (torch {backend.torch_version} sees no GPU), "
                    "so no GPU memory was recorded",
                )
            else:
                messages.info(f"no {reason} snapshot: this process has not used CUDA")
            return None
        if not _State.dump_lock.acquire(blocking=blocking):
            messages.info(f"a snapshot is being written already; {reason} request skipped")
            return None
        try:
            return self._write(backend, reason, path, device, oom_event, extra)
        except Exception as exc:
            messages.warn(f"could not write the {reason} snapshot: {type(exc).__name__}: {exc}")
            return None
        finally:
            _State.dump_lock.release()

    def _write(
        self,
        backend: Any,
        reason: str,
        path: str | os.PathLike[str] | None,
        device: int | None,
        oom_event: oom.OomEvent | None,
        extra: dict[str, Any] | None,
    ) -> Path:
        # The snapshot and memory_stats must describe the same allocator state.
        # Building the snapshot's Python objects can trigger the cyclic garbage
        # collector, which may free CUDA tensors in between: keep it off for
        # these few calls.  (Pickling below touches no GPU memory.)
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            t0 = time.perf_counter()
            snap = backend.snapshot()
            snapshot_s = time.perf_counter() - t0
            if device is None:
                device = backend.current_device()
            stats = backend.memory_stats(device)
            # The rest of the GPU at the same instant (other processes, the CUDA context).
            whole = gpu.whole_gpu(backend, device)
        finally:
            if gc_was_enabled:
                gc.enable()
        when = time.time()
        if path is None:
            target = files.unique_path(self.out / files.snapshot_name(reason, device, when=when))
        else:
            target = Path(path)
        t1 = time.perf_counter()
        nbytes = files.atomic_write(target, lambda f: pickle.dump(snap, f))
        write_s = time.perf_counter() - t1

        oom_fields: dict[str, Any] | None = None
        if oom_event is not None:
            oom_fields = {
                **oom_event.sidecar_fields(),
                "oom_trace_size": oom.last_oom_trace_size(snap, oom_event.device),
            }
        settings = snap.get("allocator_settings") if isinstance(snap, dict) else None
        alloc_conf = files.alloc_conf_from_env()
        if not alloc_conf and isinstance(settings, dict):
            alloc_conf = str(settings.get("PYTORCH_CUDA_ALLOC_CONF") or "")
        sms, threads = _safe(lambda: backend.multiprocessors(device)) or (None, None)
        side = files.build_sidecar(
            name=target.stem,
            reason=reason,
            memory_stats=stats,
            torch_version=backend.torch_version,
            gpu=_safe(lambda: backend.device_name(device)),
            device=device,
            alloc_conf=alloc_conf,
            snapshot=snap,
            oom=oom_fields,
            recording=self._recording_info(backend),
            extra={
                "gpu_total_memory": _safe(lambda: backend.total_memory(device)),
                "gpu_multiprocessors": sms,
                "gpu_threads_per_multiprocessor": threads,
                "allocator_backend": _safe(backend.allocator_backend),
                "snapshot_call_s": round(snapshot_s, 6),
                "write_s": round(write_s, 6),
                "bytes": nbytes,
                "snapshot_file": target.name,
                "gpu_memory": whole,
                **(extra or {}),
            },
            when=when,
        )
        files.write_sidecar(files.sidecar_path(target), side)
        messages.info(f"wrote {target} ({reason})")
        self.paths.append(target)
        return target

    def _recording_info(self, backend: Any) -> dict[str, Any]:
        rec = self if self.active else active_recorder()
        info: dict[str, Any] = {"enabled": _safe(backend.history_enabled)}
        if rec is not None:
            info.update(max_entries=rec.max_entries, stacks=rec.stacks, context=rec.context)
            effective = getattr(backend, "effective_context", None)
            used = _safe(lambda: effective(rec.context)) if effective else rec.context
            if used != rec.context:
                # What the allocator recorded, and why it differs from what was asked.
                info.update(
                    context=used,
                    context_requested=rec.context,
                    free_stacks_off=_safe(backend.free_stack_hazard),
                )
        return info


def _uncaught(exc: BaseException | None) -> None:
    """An exception nobody caught, in the main thread or another: the innermost active
    recorder writes its OOM snapshot (outside the allocator) and notes an allocator OOM's
    message, as ``__exit__`` does for a ``with`` block.  A program that called
    :func:`start` has no ``with`` block whose exit would see the exception."""
    rec = active_recorder()
    if exc is None or rec is None or not rec.active:
        return
    try:
        rec._annotate_oom(exc)
        rec._outside_oom(exc)
    except Exception as exc2:
        messages.warn(f"cannot record the uncaught exception: {type(exc2).__name__}: {exc2}")


def _install_hooks() -> None:
    """Chain ``sys.excepthook`` and ``threading.excepthook`` (once, while any recorder is
    active): each sees the exception first, then calls the hook it replaced with the same
    arguments; the exception is never changed or swallowed."""
    if _State.hooks is not None:
        return
    prev_sys, prev_thread = sys.excepthook, threading.excepthook

    def excepthook(exc_type: Any, exc: Any, tb: Any) -> Any:
        if _State.hooks is not None and _State.hooks[0] is excepthook:
            _uncaught(exc)
        return prev_sys(exc_type, exc, tb)

    def thread_excepthook(args: Any) -> Any:
        if _State.hooks is not None and _State.hooks[1] is thread_excepthook:
            _uncaught(args.exc_value)
        return prev_thread(args)

    # Whichever of these hooks someone else wrapped since stays in their chain, where a
    # stale one only passes the exception on (the identity checks above).
    excepthook.previous = prev_sys  # type: ignore[attr-defined]
    thread_excepthook.previous = prev_thread  # type: ignore[attr-defined]
    sys.excepthook, threading.excepthook = excepthook, thread_excepthook
    _State.hooks = (excepthook, thread_excepthook)


def _remove_hooks() -> None:
    """Put back the hooks :func:`_install_hooks` replaced, where nobody replaced ours since."""
    hooks, _State.hooks = _State.hooks, None
    if hooks is None:
        return
    if sys.excepthook is hooks[0]:
        sys.excepthook = hooks[0].previous  # type: ignore[attr-defined]
    if threading.excepthook is hooks[1]:
        threading.excepthook = hooks[1].previous  # type: ignore[attr-defined]


# Frames of the capture itself (the runner, runpy, the decorator) are not the program's.
_OWN_FRAMES = tuple(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    for name in ("runner.py", "recorder.py", "__init__.py", "__main__.py")
) + (os.path.abspath(runpy.__file__),)


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _clean_exit(exc: BaseException) -> bool:
    return isinstance(exc, SystemExit) and exc.code in (None, 0)
