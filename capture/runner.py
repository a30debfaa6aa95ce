"""Run any Python script or module under a recorder, like ``memray run``.

::

    python -m vramscope.capture [--out DIR] [--max-entries N] [--stacks python|all]
                                [--context all|alloc|state] [--no-signal] [--live]
                                (script.py | -m module) [args ...]

The script sees its own ``sys.argv`` (``[script.py, args ...]``), runs as
``__main__``, and finds its own directory first on ``sys.path``, exactly as
with ``python script.py``; ``-m module`` behaves like ``python -m module``.
The runner's exit status is the script's: the ``sys.exit`` code, 1 after an
uncaught exception (printed through ``sys.excepthook`` as Python would),
130 after Ctrl-C.

Runner options come before the script; everything from the script name on
belongs to the script, so ``--out`` after it is the script's own.
``vramscope record ...`` is this same runner.  ``--live`` also serves live
attach while the script runs (``vramscope attach PID``, File > Attach...).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import signal
import sys
from types import TracebackType
from typing import Sequence

from . import messages
from .recorder import Recorder

# Runner options that consume the next argument (when not written as --opt=value).
_TAKES_VALUE = {"--out", "-o", "--max-entries", "--stacks", "--context", "--signal"}


def _parser(prog: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog or "python -m vramscope.capture",
        usage="%(prog)s [options] (script.py | -m module) [args ...]",
        description=(
            "Run a Python script with CUDA memory history recording. A snapshot "
            "is written when it ends, at every CUDA out-of-memory error, and on "
            "SIGUSR1 (kill -USR1 PID) without stopping it."
        ),
        epilog=(
            "Everything from the script name (or -m module) on is passed to the "
            "script. Without CUDA the script runs normally after one warning."
        ),
    )
    p.add_argument(
        "-o",
        "--out",
        default="snapshots",
        metavar="DIR",
        help="directory for snapshots (default: %(default)s)",
    )
    p.add_argument(
        "--max-entries",
        type=_positive_int,
        default=100_000,
        metavar="N",
        help="alloc/free events kept, newest win (default: %(default)s)",
    )
    p.add_argument(
        "--stacks",
        choices=("python", "all"),
        default="python",
        help="python: Python stacks, fast dumps (default); all: adds C++ "
        "frames, dumps are slower (symbolisation) and larger",
    )
    p.add_argument(
        "--context",
        choices=("all", "alloc", "state"),
        default="all",
        help="which events keep a stack (default: %(default)s)",
    )
    p.add_argument(
        "--signal",
        default="SIGUSR1",
        metavar="NAME",
        help="signal that dumps a snapshot on demand (default: %(default)s)",
    )
    p.add_argument("--no-signal", action="store_true", help="no on-demand dumps")
    p.add_argument(
        "--no-exit-dump",
        action="store_true",
        help="no snapshot when the script ends (OOM and signal dumps still happen)",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="let a viewer attach while the script runs (vramscope attach PID, "
        "File > Attach...): a private local socket, never a network port",
    )
    return p


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split into (runner options, target and its args).

    The target starts at the first argument that is neither a runner option
    nor an option's value: a script path, ``-m`` (with its module), or what
    follows ``--``.
    """
    argv = list(argv)
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], argv[i + 1 :]
        if tok == "-m" or (tok.startswith("-m") and not tok.startswith("--")):
            return argv[:i], argv[i:]
        if tok == "-" or not tok.startswith("-"):
            return argv[:i], argv[i:]
        i += 2 if tok in _TAKES_VALUE else 1
    return argv, []


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    ``vramscope record ...`` calls ``main(args_after_record, prog="vramscope record")``
    and exits with the result.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    opts, target = split_argv(argv)
    parser = _parser(prog)
    try:
        args = parser.parse_args(opts)
    except SystemExit as exc:  # --help, or a usage error already printed
        return _exit_status(exc.code)
    if not target:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: a script or -m module to run is required", file=sys.stderr)
        return 2

    module: str | None = None
    if target[0].startswith("-m"):
        if target[0] == "-m":
            if len(target) < 2:
                print(f"{parser.prog}: error: -m needs a module name", file=sys.stderr)
                return 2
            module, script_args = target[1], target[2:]
        else:
            module, script_args = target[0][2:], target[1:]
    else:
        script, script_args = target[0], target[1:]

    # Check the target before starting anything, with Python's own messages.
    if module is not None:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            print(f"{sys.executable}: No module named {module}", file=sys.stderr)
            return 1
    elif not os.path.exists(script):
        print(
            f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
            "[Errno 2] No such file or directory",
            file=sys.stderr,
        )
        return 2

    recorder_class = Recorder
    if args.live:
        from .live.agent import LiveRecorder

        recorder_class = LiveRecorder
    try:
        recorder = recorder_class(
            args.out,
            args.max_entries,
            args.stacks,
            args.context,
            dump_on_exit=not args.no_exit_dump,
            dump_signal=None if args.no_signal else args.signal,
        )
    except (TypeError, ValueError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2

    return _run(recorder, module, script if module is None else None, script_args)


def _run(recorder: Recorder, module: str | None, script: str | None, script_args: list[str]) -> int:
    saved_argv = sys.argv[:]
    saved_path0 = sys.path[0] if sys.path else None
    try:
        if module is not None:
            # As `python -m`: the current directory first on sys.path.
            _set_path0(os.getcwd())
            sys.argv = [module, *script_args]  # run_module replaces argv[0] with the file
        else:
            assert script is not None
            _set_path0(os.path.dirname(os.path.abspath(script)))
            sys.argv = [script, *script_args]
        try:
            with recorder:
                if recorder.active:
                    _announce(recorder)
                if module is not None:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                elif script is not None:
                    runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            return _exit_status(exc.code)
        except KeyboardInterrupt as exc:
            _print_exception(exc)
            return 130
        except BaseException as exc:
            _print_exception(exc)
            return 1
        return 0
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0


def _set_path0(entry: str) -> None:
    if sys.path:
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)


def _announce(recorder: Recorder) -> None:
    line = (
        f"recording CUDA memory history into {recorder.out}{os.sep} "
        f"(stacks={recorder.stacks}, at most {recorder.max_entries} "
        f"event{'' if recorder.max_entries == 1 else 's'})"
    )
    if recorder._signal_held and recorder._signum is not None:
        name = signal.Signals(recorder._signum).name.removeprefix("SIG")
        line += f"; `kill -{name} {os.getpid()}` writes a snapshot without stopping"
    messages.info(line)


def _exit_status(code: object) -> int:
    """Exit status for a ``SystemExit`` code, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def _print_exception(exc: BaseException) -> None:
    """Print like the interpreter would for an uncaught exception, minus runner frames."""
    tb = _strip_runner_frames(exc.__traceback__)
    exc.__traceback__ = tb  # the default hook prints exc.__traceback__, not its tb argument
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        import traceback

        traceback.print_exception(type(exc), exc, tb)


def _own(filename: str) -> bool:
    if filename.startswith("<frozen runpy"):  # runpy is frozen in Python >= 3.11
        return True
    return os.path.normcase(os.path.realpath(filename)) in _OWN_FILES


_OWN_FILES = {os.path.normcase(os.path.realpath(f)) for f in (__file__, runpy.__file__)}


def _strip_runner_frames(tb: TracebackType | None) -> TracebackType | None:
    # The user wants to see their script's frames, not runner.py and runpy.
    while tb is not None and _own(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb
