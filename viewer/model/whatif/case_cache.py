"""Prepared what-if cases kept beside the column cache: a re-run skips the replay.

:func:`~.predictions.prepare` replays a device's trace and derives from it the request
stream, the memory limit's bounds and the trace window - most of a ``whatif`` or
``advise`` on a big file once its columns are cached.  All of it is a function of the
file's content, its sidecar, the device asked for and vramscope's code, so it is stored,
with what the self-check reads of the recorded run once that ran (its comparison with
the recording and its peaks: :class:`~.predictions.RecordedFigures`), under a key of
exactly those: the column cache's identity of the file (size, mtime, a hash of its first
and last MiB), the sidecar's JSON, the device, :data:`VERSION` and the modification
times of the model's sources (an edited or reinstalled checkout never reads an entry of
other code).  An entry (``cases/KEY.case`` in the cache directory) has the column
cache's format (:func:`..io.cache.write_entry`: plain numeric columns behind a JSON
header, mapped on read, nothing executed); one that does not read back whole and
consistent is dropped and the case prepared again.  The entries share the column
cache's size budget (:func:`..io.cache.max_bytes`) and its one least-recently-used
list: storing either kind trims both (:func:`..io.cache.trim`), and a read touches
the entry it read.

Files the column cache would not cache (under 1 MiB) are not stored: they are prepared
faster than an entry is read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...early import file_identity
from ..core import allocator_rules as rules
from ..core.snapshot import Snapshot
from ..io import cache as column_cache
from ..replay.layout import Layout
from ..replay.recorded_window import RecordedWindow
from .limits import LimitBounds
from .predictions import Case, RecordedFigures
from .requests import EMPTY_CACHE, Requests

VERSION = 2  # bump when an entry's columns or fields change meaning (2: the recorded run's figures)
SUFFIX = column_cache.CASE_SUFFIX
# Every model package a prepared case is computed by: an edit to one is a new key.
_SOURCES = ("whatif", "replay", "core", "io", "analysis", "_native")
_REQUEST_COLUMNS = ("kind", "size", "stream", "pool", "ref", "event")
_SEGMENT_COLUMNS = ("seg_tag", "seg_action", "seg_addr", "seg_size")
_LAYOUT_COLUMNS = tuple(f.name for f in dataclasses.fields(Layout))


def cases_dir() -> Path:
    """``cases/`` in the user cache directory, beside the column cache (which counts its
    entries in the size budget)."""
    return column_cache.cases_dir()


def _code_stamp() -> str:
    model = Path(__file__).resolve().parent.parent
    newest = 0
    for name in _SOURCES:
        try:
            with os.scandir(model / name) as it:
                for entry in it:
                    if entry.name.endswith((".py", ".so", ".pyd", ".c")):
                        newest = max(newest, entry.stat().st_mtime_ns)
        except OSError:
            pass
    return str(newest)


def key(path: str | os.PathLike, snap: Snapshot, device: int | None) -> str | None:
    """The entry's key for the case of ``device`` (None: the default one) in the file at
    ``path`` loaded as ``snap``; None for a file the cache does not keep."""
    try:
        side = json.dumps(snap.sidecar, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return None
    salt = hashlib.sha256(
        f"case{VERSION}:{_code_stamp()}:{device!r}:{side}".encode("utf-8", "surrogatepass")
    ).hexdigest()
    return file_identity.content_key(path, salt)


def _entry(k: str) -> Path:
    return cases_dir() / f"{k}{SUFFIX}"


def load(k: str, snap: Snapshot) -> Case | None:
    """The case stored under ``k`` for ``snap``, or None (missing, of another version,
    damaged: dropped)."""
    path = _entry(k)
    try:
        arrays, meta = column_cache.read_entry(path)
        case = _from_entry(arrays, meta, snap)
        os.utime(path)  # least recently *used* goes first
        return case
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        column_cache.remove_entry(path)
        return None


def store(k: str, case: Case) -> None:
    """Write ``case`` under ``k`` (atomically), then trim the whole cache, columns and
    cases, to its size budget; a cache that cannot be written is ignored."""
    directory = cases_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        arrays, meta = _to_entry(case)
        column_cache.write_entry(_entry(k), arrays, meta)
        column_cache.trim(column_cache.max_bytes())
    except (OSError, TypeError):
        pass


def _to_entry(case: Case) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    reqs = case.requests
    arrays: dict[str, np.ndarray] = {}
    for name in _REQUEST_COLUMNS + _SEGMENT_COLUMNS:
        arrays[name] = getattr(reqs, name)
    for name in _LAYOUT_COLUMNS:
        arrays[f"initial__{name}"] = getattr(reqs.initial, name)
    arrays["initial_pool"] = reqs.initial_pool
    meta = {
        "version": VERSION,
        "device": case.device,
        "n_events": reqs.n_events,
        "replay_inconsistencies": reqs.replay_inconsistencies,
        "limit": case.limit,
        "limit_source": case.limit_source,
        "bounds": dataclasses.asdict(case.bounds),
        "window": None if case.window is None else dataclasses.asdict(case.window),
        # What the self-check reads of the recorded run, once it ran (else not stored).
        "recorded": dataclasses.asdict(case.recorded_figures())
        if case.recorded_run_made or case.recorded_known is not None
        else None,
    }
    return arrays, meta


def _int(value: Any) -> int:
    if type(value) is not int:
        raise ValueError("not an integer")
    return value


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _device_times(snap: Snapshot, device: int) -> np.ndarray:
    """The trace's times at ``device``'s events, as the replay takes them (a view of the
    column when one device holds every event)."""
    trace = snap.trace
    if trace.single_device() == device:
        return trace.time_us
    return trace.time_us[np.flatnonzero(trace.device == device)]


def _from_entry(arrays: dict[str, np.ndarray], meta: dict, snap: Snapshot) -> Case:
    if meta.get("version") != VERSION:
        raise ValueError("another version")
    device = _int(meta["device"])
    n_events = _int(meta["n_events"])
    time_us = _device_times(snap, device)
    if len(time_us) != n_events:
        raise ValueError("not this file's trace")
    cols = {name: arrays[name] for name in _REQUEST_COLUMNS + _SEGMENT_COLUMNS}
    n = len(cols["kind"])
    if any(len(cols[c]) != n for c in _REQUEST_COLUMNS):
        raise ValueError("request columns of different lengths")
    if any(len(cols[c]) != len(cols["seg_tag"]) for c in _SEGMENT_COLUMNS):
        raise ValueError("segment columns of different lengths")
    initial = Layout(**{name: arrays[f"initial__{name}"] for name in _LAYOUT_COLUMNS})
    if len({len(getattr(initial, c)) for c in _LAYOUT_COLUMNS if c.startswith("seg_")}) > 1:
        raise ValueError("layout columns of different lengths")
    if len({len(getattr(initial, c)) for c in _LAYOUT_COLUMNS if c.startswith("blk_")}) > 1:
        raise ValueError("layout columns of different lengths")
    initial_pool = arrays["initial_pool"]
    if len(initial_pool) != len(initial.seg_addr):
        raise ValueError("initial pools")
    if n:
        kind, ref, event = cols["kind"], cols["ref"], cols["event"]
        if int(kind.min()) < 0 or int(kind.max()) > EMPTY_CACHE:
            raise ValueError("request kinds")
        if int(ref.max()) >= n or int(ref.min()) < -2 - initial.n_blocks:
            raise ValueError("request references")
        if int(event.min()) < 0 or int(event.max()) >= n_events:
            raise ValueError("request events")
    bounds = LimitBounds(
        lower=_int(meta["bounds"]["lower"]),
        upper=_opt_int(meta["bounds"]["upper"]),
        at_oom=_opt_int(meta["bounds"]["at_oom"]),
    )
    limit_source = meta["limit_source"]
    if type(limit_source) is not str:
        raise ValueError("limit source")
    reqs = Requests(
        **cols,
        initial=initial,
        initial_pool=initial_pool,
        n_events=n_events,
        replay_inconsistencies=_int(meta["replay_inconsistencies"]),
        time_us=time_us,
    )
    side = snap.sidecar or {}
    gpu = side.get("gpu_total_memory")
    case = Case(
        snap,
        device,
        reqs,
        rules.config_from_settings(snap.allocator_settings),
        _opt_int(meta["limit"]),
        limit_source,
        bounds,
        gpu if isinstance(gpu, int) and gpu > 0 else None,
    )
    window = meta["window"]
    case.window = None if window is None else RecordedWindow(**window)
    recorded = meta["recorded"]
    if recorded is not None:
        case.recorded_known = _figures(recorded)
    return case


def _figures(d: dict) -> RecordedFigures:
    if type(d["ok"]) is not bool or type(d["first_difference"]) is not str:
        raise ValueError("recorded figures")
    return RecordedFigures(
        d["ok"],
        _int(d["n_segment_events"]),
        d["first_difference"],
        _int(d["peak_reserved"]),
        _int(d["peak_allocated"]),
        _int(d["peak_reserved_until_oom"]),
    )
