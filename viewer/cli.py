"""The ``vramscope`` command.

``vramscope [FILE]`` opens the GUI; subcommands do headless work.  One module
per subcommand lives in :mod:`vramscope.viewer.commands`; this module only
dispatches, so ``vramscope summary`` never imports Qt.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module in vramscope.viewer.commands, one-line help)
COMMANDS = {
    "summary": ("summary", "print the memory figures and the OOM verdict of a snapshot"),
    "diff": ("diff", "compare two snapshots: what grew, by allocation stack"),
    "record": ("record", "run a Python script with allocator history recording (needs torch)"),
    "whatif": ("whatif", "predict peak memory and OOMs under other allocator settings"),
    "advise": ("advise", "rank the changes that would make a run fit, by predicted peak memory"),
    "report": ("report", "write the HTML report of a snapshot (File > Export report)"),
    "attach": ("attach", "list running processes, watch one live, or save a snapshot from it"),
    "mcp": ("mcp", "serve these analyses to coding agents (Model Context Protocol, stdio)"),
}

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def gui_parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="vramscope",
        description="See why your GPU ran out of memory: open a PyTorch CUDA memory snapshot.",
        epilog=f"commands (vramscope COMMAND --help):\n{commands}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "file",
        nargs="?",
        help="snapshot to open: a pickle (protocol 0-5), gzip/xz/bz2 "
        "compressed or not, or JSON; or a directory of per-rank snapshots "
        "(torchrun) for the rank overview",
    )
    parser.add_argument(
        "--screenshot",
        metavar="OUT.png",
        help="load FILE, render the main window (1440x900) to a PNG and exit",
    )
    # What the screenshot shows (checked by commands.gui: one line and exit 2 when wrong).
    from .commands.gui import SCREENSHOT_VIEWS

    shot = parser.add_argument_group(
        "screenshot views (with --screenshot; default: the window as it opens)"
    )
    shot.add_argument(
        "--view",
        metavar="{" + ",".join(SCREENSHOT_VIEWS) + "}",
        help="what to render: "
        + "; ".join(f"{name}: {text}" for name, text in SCREENSHOT_VIEWS.items()),
    )
    shot.add_argument(
        "--color-by",
        metavar="{site,category}",
        help="colour the timeline, segment map and Blocks table by code site "
        "or by what the memory is (View > Colour by category)",
    )
    shot.add_argument(
        "--device",
        metavar="{N,all,host}",
        help="the device selector: GPU N, all devices, or pinned host memory",
    )
    shot.add_argument(
        "--at",
        metavar="{EVENT,peak,oom,latest}",
        help="move the cursor (time travel) to after trace event EVENT "
        "(0-based, of the shown device), the allocated peak, the last OOM, "
        "or the end as recorded",
    )
    shot.add_argument(
        "--timeout",
        metavar="SECONDS",
        help="how long to wait for the work off the GUI thread (what the "
        "memory is, the panels' runs) before giving up (default 300)",
    )
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="open the bundled example offscreen, check its figures, exit 0 if all is well",
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="parse the file even if its columns are cached"
    )
    parser.add_argument("--version", action=_VersionAction)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: the version is looked up only when asked for (importlib.metadata
    costs 30-50 ms, which every window start would otherwise pay)."""

    def __init__(
        self,
        option_strings,
        dest=argparse.SUPPRESS,
        default=argparse.SUPPRESS,
        help="show program's version number and exit",
    ):
        super().__init__(
            option_strings=option_strings, dest=dest, default=default, nargs=0, help=help
        )

    def __call__(self, parser, namespace, values, option_string=None):
        from . import __version__

        sys.stdout.write(f"vramscope {__version__}\n")
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: this process's); the exit code.

    Called as the process's entry (``argv`` None), a command whose module sets
    ``EXIT_WITHOUT_TEARDOWN`` ends the process right after its output: freeing a big
    snapshot's columns and the interpreter's teardown cost 0.05-0.1 s that nobody
    waits for usefully.  Called with ``argv`` (tests, embedding) it always returns."""
    entry = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if entry:
        # No command does matrix algebra: one BLAS thread, not a pool of one per core
        # started when numpy loads (~30 ms on 16 cores, and idle threads beside the
        # commands' own pools and forks).
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if argv and argv[0] in COMMANDS:
        module = importlib.import_module(f".commands.{COMMANDS[argv[0]][0]}", __package__)
        try:
            code = module.main(argv[1:])
            sys.stdout.flush()
        except BrokenPipeError:
            # `vramscope advise FILE | head`: the reader left; no traceback.  Python would
            # fail again flushing stdout at exit, so stdout now points at /dev/null.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return EXIT_FAILURE
        if entry and getattr(module, "EXIT_WITHOUT_TEARDOWN", False):
            _exit_now(code)
        return code
    parser = gui_parser()
    args, extra = parser.parse_known_args(argv)
    error = not_a_file_error(args.file, extra)
    if error:
        print(f"vramscope: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.no_cache:
        os.environ["VRAMSCOPE_NO_CACHE"] = "1"
    if args.self_test:
        from .commands import selftest

        return selftest.main(args)
    from .commands import gui

    return gui.main(args)


def not_a_file_error(file: str | None, extra: list[str]) -> str | None:
    """The one line for a first word that is neither a file nor a command: a mistyped
    command (``vramscope summery FILE``) is named as one, with the command it is close
    to; a missing file as a missing file.  Decided before any window (Qt) starts."""
    if not file or file.startswith("ssh://") or os.path.exists(file):
        return None
    import difflib  # (only for a first word that is no file: not on every start)

    close = difflib.get_close_matches(file, COMMANDS, n=1)
    hint = f"did you mean {close[0]}?" if close else "commands: " + ", ".join(COMMANDS)
    if close:
        return f"unknown command '{file}' ({hint})"
    if os.sep in file or "." in file:
        return f"{file}: no such file"
    if extra:
        return f"unknown command '{file}' ({hint})"
    return f"{file}: no such file, and no such command ({hint})"


def _exit_now(code: int | None) -> None:
    """End the process at once with ``code`` (output flushed first; no atexit handlers,
    no freeing of what the command built)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the exit code still matters
            pass
    os._exit(code if isinstance(code, int) else EXIT_FAILURE if code else EXIT_OK)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
