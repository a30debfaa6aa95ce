"""``vramscope summary FILE [--json]``: the analysis, headless.

``vramscope summary DIR [--json] [--jobs N | --scheduler ADDRESS]``: a directory of
per-rank snapshots (written by the capture module under torchrun): one entry per rank,
outliers flagged, and what each rank's memory is (the split by category ``summary FILE``
gives for its file) side by side; the ranks read on a pool of this machine's cores
(``--jobs``, default all) or as tasks of a running Dask cluster (``--scheduler``), the same
overview either way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from ..early.install_hint import pip_install
from . import result_cache
from .arg_types import positive_int
from .background import can_fork

if TYPE_CHECKING:
    from collections.abc import Callable

# The CLI ends the process right after the output (see cli.main): nothing to clean up
# here (the column cache is written by a forked child of its own).
EXIT_WITHOUT_TEARDOWN = True

# The model (numpy) is imported only when the answer is not cached: a cached
# re-open costs an interpreter start and one small read.


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vramscope summary",
        description="Print a snapshot's memory figures (equal to torch.cuda.memory_stats() "
        "at the same instant) and, after an OOM, why it happened.",
    )
    p.add_argument(
        "file",
        help="snapshot file (a pickle, gzip/xz/bz2 compressed or not, "
        "or JSON), or a directory "
        "of per-rank snapshots (one entry per rank, outlier ranks flagged, each "
        "rank's memory by category side by side)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument(
        "--at",
        type=int,
        metavar="EVENT",
        help="report the state after trace event EVENT (0-based, of --device)",
    )
    p.add_argument(
        "--no-cache", action="store_true", help="parse the file even if its columns are cached"
    )
    p.add_argument(
        "--device",
        type=int,
        metavar="N",
        help="device to answer for: its peaks, memory categories and allocation "
        "sites, and the trace --at indexes (default: the last OOM's, else the "
        "one with the highest reserved peak); must be a device of the snapshot",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        metavar="N",
        help="a directory: read the ranks' files on N processes of this machine "
        "(default: all its CPUs; 1 = one after the other)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a directory: read each rank's file as a task of the running Dask "
        "cluster at ADDRESS (tcp://host:8786), on the workers, which see the "
        "directory; only each rank's figures come back (needs "
        f"{pip_install('dask')} here, from a clone of vramscope, and vramscope "
        "on the workers)",
    )
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.at is not None and args.at < 0:
        # Refused rather than counted from the end: "-5" would silently be another event
        # than the one typed (and the positive bound is checked against the device's count).
        print(
            f"vramscope: error: --at {args.at}: events are numbered from 0; give one "
            "of the device's events (0 or more)",
            file=sys.stderr,
        )
        return 2
    remote = args.file.startswith("ssh://")  # streamed through the user's ssh
    # With a scheduler the directory may be one only the cluster's workers see.
    if not remote and (
        os.path.isdir(args.file) or (args.scheduler and not os.path.exists(args.file))
    ):
        return _directory(args)
    if args.jobs is not None or args.scheduler:
        print(
            "vramscope: error: --jobs and --scheduler need a directory of per-rank "
            "snapshots, not a file",
            file=sys.stderr,
        )
        return 2
    if remote:  # run where the file is when vramscope is there: only the answer travels
        from .remote_run import answered_there

        code = answered_there("summary", args, argv)
        if code is not None:
            return code
    key = None
    if not remote and result_cache.enabled(args.no_cache):
        # The path as typed is part of the output ("file"), so part of the key.
        key = result_cache.key(args.file, [args.json, args.at, args.device, args.file])
        text = result_cache.get(key) if key else None
        if text is not None:
            sys.stdout.write(text)
            return 0
    code, text, deferred = _summary(args)
    if code:
        return code
    sys.stdout.write(text)
    sys.stdout.flush()
    from ..startup.parse_ahead import stamp  # stdlib only (the cached path stays numpy-free)

    stamp("output_done")
    if key:
        result_cache.put(key, text)
    if deferred is not None:
        _store_in_background(*deferred)
    return 0


def _store_in_background(key: str, snap) -> None:
    """Write the column cache after the answer is out (:func:`.background.detached`), so
    the command returns (and pipes close) at once; the store is atomic (temp file +
    rename), like every store."""
    from ..model.io import cache as column_cache
    from .background import detached

    detached(lambda: column_cache.store(key, snap))


def _summary(args):
    """(exit code, output text, (cache key, snapshot) to store later or None)."""
    use_cache = not args.no_cache and os.environ.get("VRAMSCOPE_NO_CACHE", "") in ("", "0")
    # Before numpy and the model are imported: the parse runs meanwhile, on another core.
    from ..startup import parse_ahead

    remote = args.file.startswith("ssh://")
    if not remote and parse_ahead.start(args.file, use_cache=use_cache):
        # While the child parses, this process would only wait: numpy.ma (which np.unique
        # imports on first use, ~20 ms) is imported now rather than after the parse.
        import numpy.ma  # noqa: F401
    from ..model import SnapshotError
    from ..model.io import cache as column_cache
    from ..model.io.remote import load_any
    from ..model.reports.summary import format_text
    from ..startup.parse_ahead import stamp

    stamp("imported")

    # A big file's columns are cached after the output is written (see
    # _store_in_background): the first summary does not wait for the disk.
    key = column_cache.file_key(args.file) if use_cache and can_fork() and not remote else None
    deferred = key is not None and not column_cache.entry_path(key).exists()
    try:
        snap = load_any(args.file, use_cache=use_cache and not deferred)
    except SnapshotError as exc:
        print(f"vramscope: error: {args.file}: {exc}", file=sys.stderr)
        return 2, "", None
    except MemoryError:
        print(f"vramscope: error: {args.file}: not enough memory to load it", file=sys.stderr)
        return 2, "", None
    try:
        summary = summarize_loaded(snap, args.file, args.device, args.at, "--at", _stamp_done)
    except Refused as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return 2, "", None
    if args.json:
        from .json_text import dumps_indented

        text = dumps_indented(summary) + "\n"
    else:
        text = format_text(summary) + "\n"
    return 0, text, (key, snap) if deferred else None


def _stamp_done(step: str) -> None:
    """summarize_loaded()'s steps done, in ``make bench``'s per-stage breakdown."""
    if step != "replay":
        from ..startup.parse_ahead import stamp

        stamp(step)


class Refused(Exception):
    """A device or event the snapshot does not have: one line (after ``vramscope: error:``)."""


def summarize_loaded(
    snap,
    file: str,
    device: int | None,
    at: int | None,
    at_name: str = "--at",
    step: Callable[[str], object] | None = None,
) -> dict:
    """The summary of the loaded ``snap`` (read from ``file``): of ``device`` (the one
    named, else the last OOM's, else the highest peak's), at its trace event ``at`` too
    if given (``at_name``: how the caller calls it, in a refusal).  What ``summary``
    prints and the MCP tool ``summary`` answers; ``step(name)`` is told of "replay",
    "replay_done" and "summary_done" as they come.  :class:`Refused` for a device or
    event the snapshot does not have."""
    from ..model.analysis import focus
    from ..model.replay.timeline import oom_events
    from ..model.reports.summary import summarize, summary_timeline

    def tell(name: str) -> None:
        if step is not None:
            step(name)

    if device is not None:
        known = snap.devices
        if device not in known:
            raise Refused(
                f"{file}: no device {device} in this snapshot "
                f"(its devices: {', '.join(map(str, known)) or 'none'})"
            )
    given = device is not None
    if not given:
        device = focus.default_trace_device(snap) if len(snap.trace) else focus.default_device(snap)
    chosen = focus.chosen_by(snap, device, given)
    # A report seeks only to the OOMs (and --at): no keyframes, those layouts kept.
    emit = oom_events(snap)
    moment = None
    if at is not None:
        n = int((snap.trace.device == device).sum()) if device is not None else 0
        if device is None or not n:
            raise Refused(
                f"{file}: no trace events" + (f" on device {device}" if device is not None else "")
            )
        if not 0 <= at < n:
            raise Refused(f"{at_name} {at} is outside 0..{n - 1}")
        moment = (device, at)
        emit.setdefault(device, []).append(at)
    tell("replay")
    # The memory categories' first part is made on another thread during the replay.
    timeline, prepared = summary_timeline(snap, emit)
    tell("replay_done")
    out = summarize(snap, timeline, moment, prepared, device, chosen)
    tell("summary_done")
    return out


def _directory(args) -> int:
    """One entry per rank of a directory written by the capture module."""
    from ..model import SnapshotError
    from ..model.reports import ranks

    if args.at is not None:
        print("vramscope: error: --at needs a snapshot file, not a directory", file=sys.stderr)
        return 2
    if args.jobs is not None and args.scheduler:
        print(
            "vramscope: error: --jobs is this machine's processes; with --scheduler the "
            "cluster's workers read the files: give one of them",
            file=sys.stderr,
        )
        return 2
    try:
        overview = ranks.load_ranks(
            args.file, use_cache=not args.no_cache, jobs=args.jobs, scheduler=args.scheduler
        )
    except SnapshotError as exc:
        print(f"vramscope: error: {args.file}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(overview.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(ranks.format_text(overview))
    return 0
