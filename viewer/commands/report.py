"""``vramscope report FILE -o OUT.html [--device N|all]``: the HTML report, headless.

The same page as the GUI's File > Export report: the file is opened in a main window
that never appears on a screen (no display needed), and the window's own export runs
(:mod:`vramscope.viewer._qt.report_shot`): one section per device, the device that ran
out of memory first, each with its figures, verdict, what the memory is, remedies and
top allocation sites, and images of the timeline and the segment map.
"""

from __future__ import annotations

import argparse
import os
import sys

# Qt's objects need no orderly teardown once the page is written.
EXIT_WITHOUT_TEARDOWN = True


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope report",
        description="Write one self-contained HTML page about a snapshot, to attach to a "
        "bug report: the same page as File > Export report in the GUI.",
        epilog="example: vramscope report oom.pickle -o oom-report.html",
    )
    p.add_argument("file", help="snapshot file (pickle, compressed or not, or JSON)")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT.html", help="where to write the page"
    )
    p.add_argument(
        "--device",
        default="all",
        metavar="{N,all}",
        help="only device N's section (default: all, one section per device, "
        "the one that ran out of memory first)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for the analyses (default 300)",
    )
    p.add_argument("--no-cache", action="store_true", help="parse the file even if cached")
    return p


def input_error(args) -> str | None:
    """The one-line error of the arguments (before anything is loaded), or None."""
    path, out = args.file, args.output
    if str(path).startswith("ssh://"):
        return f"{path}: the report needs a local file (copy it first)"
    if not os.path.exists(path):
        return f"{path}: no such file"
    if os.path.isdir(path):
        return f"{path}: a directory; the report is of one snapshot file"
    if not (args.device == "all" or (args.device.isascii() and args.device.isdigit())):
        return f"--device {args.device}: a device number (0, 1, ...) or all"
    if not args.timeout > 0:
        return f"--timeout {args.timeout:g}: a number of seconds above 0"
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        return f"{out}: no folder {folder}"
    if os.path.isdir(out):
        return f"{out}: a directory, not a file to write"
    if not os.access(folder, os.W_OK):
        return f"{out}: cannot write in {folder}"
    return None


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    error = input_error(args)
    if error:
        print(f"vramscope: error: {error}", file=sys.stderr)
        return 2
    if args.no_cache:
        os.environ["VRAMSCOPE_NO_CACHE"] = "1"
    # No window ever appears, and no display is needed.
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from .._qt.report_shot import export_report
    except ImportError as exc:  # pragma: no cover - broken installs
        print(f"vramscope: error: the report needs PySide6 and pyqtgraph ({exc})", file=sys.stderr)
        return 2
    device = None if args.device == "all" else int(args.device)
    code, error = export_report(args.file, args.output, device, args.timeout)
    if code:
        print(f"vramscope: error: {error}", file=sys.stderr)
        return code
    print(f"wrote {args.output}")
    return 0
