"""The analyses ``vramscope mcp`` serves, as plain functions of plain arguments.

Each tool answers what its CLI command answers, built from the same model calls
in the same order (``summary``, ``advise``, ``whatif``, ``diff``, ``attach``), so a
coding agent reads exactly the JSON a script would: ``tests/cli/test_mcp.py``
compares the two.  ``stack_at`` is the GUI's stack panel at one moment, bounded.

Nothing here imports the MCP SDK (``mcp.py`` wraps these for it), so the
analyses stay testable and importable without the optional extra; nor the model
until a tool runs, so the server answers its handshake before numpy is loaded.
A failure the caller can act on (a missing file, a hostile pickle, an event out
of range) is a :class:`ToolFailure` of one line, like the CLI's ``vramscope:
error:`` lines; the glue turns it into an MCP tool error.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable

from . import result_cache

#: progress(fraction of the whole call 0..1, what is being done)
Report = Callable[[float, str], None]

#: Most allocations (and allocation sites) ``stack_at`` lists: an agent's context is
#: the budget, and the largest few explain the memory.
STACK_AT_MAX = 500
RECORDING_HEADING = re.compile(r"^##\s.*\bcaptur", re.IGNORECASE | re.MULTILINE)


class ToolFailure(Exception):
    """One line the caller can act on (what the CLI prints after ``vramscope: error:``)."""


class Stages:
    """The model's :class:`..model.core.progress.Progress` callbacks of several steps,
    as one fraction that only grows (MCP progress must increase with every
    notification), each step owning a slice of it."""

    def __init__(self, report: Report | None) -> None:
        self.report = report
        self.done = 0.0

    def at(self, fraction: float, label: str) -> None:
        if self.report is not None and fraction > self.done:
            self.done = min(fraction, 1.0)
            self.report(self.done, label)

    def slice(self, lo: float, hi: float, label: str):
        """A Progress for one model step, mapped onto ``lo..hi`` (None when nobody listens:
        the model then skips its callbacks)."""
        if self.report is None:
            return None
        from ..model.core.progress import Progress

        self.at(lo, label)
        return Progress(lambda _stage, f: self.at(lo + (hi - lo) * f, label))


# --------------------------------------------------------------------------- inputs
def snapshot_path(path: str) -> str:
    """``path`` as the model will open it (``~`` expanded: no shell did it); refused
    here only where the model would say less (an empty name).  Existence, a directory
    where a file is needed, and the content are the safe loader's to judge, with the
    CLI's words."""
    if not isinstance(path, str) or not path.strip():
        raise ToolFailure("no snapshot path given")
    return os.path.expanduser(path)


def _load(path: str, stages: Stages, lo: float, hi: float):
    """The snapshot at ``path`` through the safe loader (never pickle.load)."""
    from ..model import SnapshotError
    from ..model.io.load import load_snapshot

    try:
        return load_snapshot(path, stages.slice(lo, hi, f"loading {os.path.basename(path)}"))
    except SnapshotError as exc:
        raise ToolFailure(f"{path}: {exc}") from None
    except MemoryError:
        raise ToolFailure(f"{path}: not enough memory to load it") from None


def _known_device(snap, path: str, device: int | None) -> None:
    if device is not None and device not in snap.devices:
        known = ", ".join(map(str, snap.devices)) or "none"
        raise ToolFailure(f"{path}: no device {device} in this snapshot (its devices: {known})")


def memory_limit(value: int | str | None) -> int | None:
    """``10000000000``, ``"10GB"``, ``"9.5GiB"`` -> bytes (the CLI's ``--memory-limit``)."""
    if value is None:
        return None
    from ..model.core import units

    if isinstance(value, bool):
        raise ToolFailure(f"memory_limit: not a size: {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ToolFailure(f"memory_limit must be positive: {value}")
        return value
    if str(value).strip().startswith("-"):
        raise ToolFailure(f"memory_limit must be positive: {value!r}")
    try:
        return units.parse_bytes(str(value))
    except ValueError as exc:
        raise ToolFailure(f"memory_limit: {exc}") from None


def _positive(name: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise ToolFailure(f"{name} must be a positive whole number, not {value}")


def dumps(obj: Any) -> str:
    """JSON as the CLI prints it with ``--json`` (without the final newline)."""
    return json.dumps(obj, indent=1)


# --------------------------------------------------------------------------- summary
def summary(
    path: str, device: int | None = None, at: int | None = None, report: Report | None = None
) -> str:
    """``vramscope summary PATH --json [--device N] [--at EVENT]``, as its text.

    Shares the CLI's result cache both ways (same key: file, arguments, code), so a
    summary the user already ran is answered at once, and the other way round."""
    path = snapshot_path(path)
    if at is not None and at < 0:
        raise ToolFailure(
            f"at {at}: events are numbered from 0; give one of the device's events (0 or more)"
        )
    if os.path.isdir(path):
        if at is not None:
            raise ToolFailure("at needs a snapshot file, not a directory")
        return _rank_directory(path)
    key = None
    if result_cache.enabled(False):
        key = result_cache.key(path, [True, at, device])
        text = result_cache.get(key) if key else None
        # The key is the file's content, but the text names the path it was asked by:
        # an answer stored for another spelling (or copy) of the file is computed again.
        if text is not None and _names(text, path):
            return text.rstrip("\n")
    text = dumps(summary_dict(path, device, at, Stages(report)))
    if key:
        result_cache.put(key, text + "\n")
    return text


def _names(text: str, path: str) -> bool:
    """Whether a stored summary is of ``path`` as spelled (an unreadable one is not)."""
    try:
        return json.loads(text).get("file") == path
    except (ValueError, AttributeError):
        return False


def summary_dict(path: str, device: int | None, at: int | None, stages: Stages) -> dict:
    """What ``vramscope summary --json`` computes: its own :func:`.summary.summarize_loaded`
    of the snapshot loaded here (with progress)."""
    from .summary import Refused, summarize_loaded

    snap = _load(path, stages, 0.0, 0.5)
    marks = {
        "replay": (0.5, "replaying the trace"),
        "replay_done": (0.8, "what the memory is: categories, sites, leaks"),
        "summary_done": (1.0, "done"),
    }
    try:
        return summarize_loaded(snap, path, device, at, "at", lambda step: stages.at(*marks[step]))
    except Refused as exc:
        raise ToolFailure(str(exc)) from None


def _rank_directory(path: str) -> str:
    """``vramscope summary DIR --json``: one entry per rank, outliers flagged, with its
    split by category."""
    from ..model import SnapshotError
    from ..model.reports import ranks

    try:
        overview = ranks.load_ranks(path)
    except SnapshotError as exc:
        raise ToolFailure(f"{path}: {exc}") from None
    return dumps(overview.to_dict())


# --------------------------------------------------------------------------- what-if
def _answered(path: str, device: int | None, stages: Stages, run) -> list[str]:
    """``run(case)``'s answer for a what-if case of ``path``'s ``device`` (what
    ``whatif.load_case`` prepares, its recorded run simulated for the self-check), as
    [its JSON text, warnings...]; a recording the model cannot follow: one line."""
    from ..model import SnapshotError
    from ..model.core.progress import stage_words
    from ..model.whatif import prepare

    snap = _load(path, stages, 0.0, 0.12)
    try:
        case = prepare(snap, device, stages.slice(0.12, 0.21, "replaying the trace"))
        case.simulate("recorded", progress=stages.slice(0.21, 0.3, stage_words("self_check")))
        got = run(case)
    except SnapshotError as exc:
        raise ToolFailure(f"{path}: {exc}") from None
    return [dumps(got.data), *(f"warning: {w}" for w in got.warnings)]


#: advise()'s steps, in the order it runs them, each with its slice of 0.3..1.
_ADVISE_STAGES = {"judge": (0.30, 0.40), "search": (0.40, 0.75), "allocator": (0.75, 1.00)}


def advise(
    path: str,
    batch: int | None = None,
    limit: int | str | None = None,
    device: int | None = None,
    report: Report | None = None,
    seq: int | None = None,
) -> list[str]:
    """``vramscope advise PATH --json [...]``: [its JSON text, warnings...]."""
    from ..model.core.progress import Progress, stage_words
    from .advise import answer

    path = snapshot_path(path)
    _positive("batch", batch)
    _positive("seq", seq)
    lim = memory_limit(limit)
    stages = Stages(report)
    progress = None
    if report is not None:

        def step(stage: str, f: float) -> None:
            lo, hi = _ADVISE_STAGES.get(stage, (0.3, 1.0))
            stages.at(lo + (hi - lo) * f, stage_words(stage))

        progress = Progress(step)
    return _answered(
        path, device, stages, lambda case: answer(case, path, batch, lim, device, progress, seq)
    )


def whatif(
    path: str,
    settings: list[str] | None = None,
    recommend: bool = False,
    limit: int | str | None = None,
    device: int | None = None,
    report: Report | None = None,
    seq_scale: list[float] | None = None,
    seq: int | None = None,
) -> list[str]:
    """``vramscope whatif PATH --conf S... [--recommend] [--seq-scale X... --seq N] --json``:
    [its JSON, warnings...]."""
    from ..model.core.units import plural
    from .whatif import BadConf, answer, settings_to_try

    path = snapshot_path(path)
    try:
        confs = settings_to_try(settings or [], recommend)
    except BadConf as exc:
        raise ToolFailure(f"settings {exc.conf!r}: {exc.error}") from None
    for f in seq_scale or []:
        if not f > 0 or f == float("inf"):
            raise ToolFailure(f"seq_scale must be positive numbers, not {f}")
    _positive("seq", seq)
    lim = memory_limit(limit)
    stages = Stages(report)
    what = f"simulating {plural(len(confs), 'setting')}"
    return _answered(
        path,
        device,
        stages,
        lambda case: answer(
            case,
            confs,
            lim,
            recommend,
            device,
            progress=stages.slice(0.3, 1.0, what),
            seq_scales=list(seq_scale or []),
            seq=seq,
        ),
    )


def whatif_pair(
    path: str,
    with_file: str,
    batch: int | None = None,
    seq: int | None = None,
    batch_scale: list[float] | None = None,
    seq_scale: list[float] | None = None,
    sizes: str | None = None,
    settings: list[str] | None = None,
    limit: int | str | None = None,
    device: int | None = None,
    report: Report | None = None,
) -> list[str]:
    """``vramscope whatif PATH --with WITH_FILE --batch N --sizes A,B --json`` (or ``--seq``,
    ``--batch-scale``, ``--seq-scale``): [its JSON, warnings...]."""
    from ..model import SnapshotError
    from ..model.remedies.two_recordings import PairError
    from ..model.whatif import prepare
    from .whatif import BadConf, settings_to_try
    from .whatif_pair import (
        MCP_NAMES,
        PairOptionError,
        error_words,
        pair_answer,
        parse_sizes,
        question,
    )

    path, other = snapshot_path(path), snapshot_path(with_file)
    _positive("batch", batch)
    _positive("seq", seq)
    try:
        confs = settings_to_try(settings or [], False)
        knob, targets, relative = question(
            batch,
            list(batch_scale or []),
            seq,
            list(seq_scale or []),
            parse_sizes(sizes, MCP_NAMES),
            MCP_NAMES,
        )
    except BadConf as exc:
        raise ToolFailure(f"settings {exc.conf!r}: {exc.error}") from None
    except PairOptionError as exc:
        raise ToolFailure(str(exc)) from None
    for f in [*(batch_scale or []), *(seq_scale or [])]:
        if isinstance(f, bool) or not f > 0 or f != f or f == float("inf"):
            raise ToolFailure(f"scale: not a positive number: {f!r}")
    lim = memory_limit(limit)
    stages = Stages(report)
    cases = []
    for k, p in enumerate((path, other)):
        snap = _load(p, stages, 0.3 * k, 0.3 * k + 0.2)
        try:
            cases.append(
                prepare(
                    snap, device, stages.slice(0.3 * k + 0.2, 0.3 * k + 0.3, "replaying the trace")
                )
            )
        except SnapshotError as exc:
            raise ToolFailure(f"{p}: {exc}") from None
    try:
        got = pair_answer(
            cases[0],
            cases[1],
            knob,
            targets,
            relative,
            parse_sizes(sizes, MCP_NAMES),
            confs,
            lim,
            stages.slice(0.6, 1.0, "simulating"),
        )
    except PairError as exc:
        raise ToolFailure(error_words(exc, MCP_NAMES)) from None
    return [dumps(got.data), *(f"warning: {w}" for w in got.warnings)]


# --------------------------------------------------------------------------- diff
def diff(
    a: str, b: str, change: str | None = None, top: int = 10, report: Report | None = None
) -> str:
    """``vramscope diff A B --json [--change REMEDY] [--top N]`` (commands/diff.py)."""
    from .diff import answer

    if top < 0:
        raise ToolFailure("top must be at least 0")
    a, b = snapshot_path(a), snapshot_path(b)
    stages = Stages(report)
    snap_a = _load(a, stages, 0.0, 0.2)
    snap_b = _load(b, stages, 0.2, 0.4)
    return dumps(answer(snap_a, snap_b, change=change, top=top, stages=stages).data)


# --------------------------------------------------------------------------- stack_at
def stack_at(
    path: str,
    event: int | None = None,
    device: int | None = None,
    limit: int = 20,
    all_frames: bool = False,
    report: Report | None = None,
) -> str:
    """The allocations alive after trace event ``event`` of ``device``, largest first,
    each with its stack: what the window's table and stack panel show at that moment
    (:func:`..model.view.stack_query.stack_at`; the arguments checked here).

    ``event`` None: the last OOM's event, else the allocated peak's.  ``limit`` bounds
    both lists (allocations and allocation sites); the totals cover every allocation."""
    import numpy as np

    from ..model.analysis import focus
    from ..model.view import stack_query
    from ..model.view.document import Document

    path = snapshot_path(path)
    if not 1 <= limit <= STACK_AT_MAX:
        raise ToolFailure(f"limit must be 1..{STACK_AT_MAX}, not {limit}")
    if event is not None and event < 0:
        raise ToolFailure(
            f"event {event}: events are numbered from 0; give one of the "
            "device's events (0 or more)"
        )
    stages = Stages(report)
    snap = _load(path, stages, 0.0, 0.4)
    _known_device(snap, path, device)
    with_events = set(np.unique(snap.trace.device).tolist())
    given = device is not None
    if device is None:
        device = focus.default_trace_device(snap)
        if device is None:
            raise ToolFailure(
                f"{path}: no trace events (record with torch.cuda.memory._record_memory_history)"
            )
    elif device not in with_events:
        raise ToolFailure(f"{path}: no trace events on device {device}")
    doc = Document.build(snap, stages.slice(0.4, 0.9, "replaying the trace"))
    n = doc.n_events(device)
    if event is None:
        picked = stack_query.moment_of(doc, device)
        if picked is None:
            raise ToolFailure(f"{path}: no trace events on device {device}")
        event, event_chosen_by = picked
    else:
        event_chosen_by = "given"
        if not 0 <= event < n:
            raise ToolFailure(f"event {event} is outside 0..{n - 1}")
    out = stack_query.stack_at(doc, device, event, event_chosen_by, given, limit, all_frames)
    stages.at(1.0, "done")
    return dumps(out)


# --------------------------------------------------------------------------- live
def live_agents() -> str:
    """``vramscope attach --list --json``: agents first, then GPU processes without one."""
    from ..model.live.targets import list_targets
    from .attach import listing_dict

    return dumps(listing_dict(*list_targets()))


def live_snapshot(pid: int, path: str, report: Report | None = None) -> str:
    """``vramscope attach PID --save PATH`` (snapshot and sidecar), then the saved file's
    summary.  A process without an agent is refused with the opt-in: injecting one
    into a process an agent named is a step for the user, on the command line."""
    from .. import live_protocol as proto
    from ..model.live.client import AttachError
    from ..model.live.session import LiveSession
    from .attach import save_snapshot

    if pid <= 0:
        raise ToolFailure(f"not a process id: {pid}")
    if not isinstance(path, str) or not path.strip():
        raise ToolFailure("no path given to save the snapshot to")
    out = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(out):
        raise ToolFailure(f"{path}: it is a directory; give a file name to write")
    if not os.path.isdir(os.path.dirname(out)):
        raise ToolFailure(f"{path}: no such directory: {os.path.dirname(out)}")
    if proto.find_entry(pid) is None:
        if not proto.pid_alive(pid):
            raise ToolFailure(f"no process {pid}")
        raise ToolFailure(
            f"process {pid} has no vramscope agent; opt in with: {proto.OPT_IN} "
            f"(or run `vramscope attach {pid}` yourself)"
        )
    stages = Stages(report)
    stages.at(0.05, f"saving a snapshot of process {pid}")
    session = LiveSession(str(pid))
    try:
        session.connect()
        saved, _snap = save_snapshot(session, out)
    except AttachError as exc:
        raise ToolFailure(str(exc)) from None
    except OSError as exc:
        raise ToolFailure(f"{path}: {exc.strerror or exc}") from None
    finally:
        session.close()
    stages.at(0.5, "summarising the saved snapshot")
    return dumps(summary_dict(str(saved), None, None, Stages(None)))


# --------------------------------------------------------------------------- guide
_GUIDE_FALLBACK = """\
## Capture a snapshot

Around any script, no code change (needs torch in that environment):

    python -m vramscope.capture --out snapshots/ train.py
    torchrun --nproc-per-node 8 -m vramscope.capture --out snapshots/ train.py

A snapshot (with a .json sidecar) is written when the script ends, at every CUDA OOM
and on SIGUSR1. With plain torch: torch.cuda.memory._record_memory_history() before
the code to look at, torch.cuda.memory._dump_snapshot("oom.pickle") after the OOM.
"""


def recording_guide() -> str:
    """The README's "Capture a snapshot" section, from the installed package's metadata
    (the README is its long description: one text, never a copy to keep in step); a
    short version where the metadata is missing (a frozen app)."""
    from importlib import metadata

    try:
        meta = metadata.metadata("vramscope")
        text = meta.get_payload() or meta.get("Description") or ""  # type: ignore[attr-defined]
    except Exception:  # no metadata at all (PyInstaller): the short version
        text = ""
    start = RECORDING_HEADING.search(text)
    if start is None:
        return _GUIDE_FALLBACK
    end = re.compile(r"^##\s", re.MULTILINE).search(text, start.end())
    return text[start.start() : end.start() if end else len(text)].strip() + "\n"
