"""A directory of per-rank snapshots (``torchrun ... -m vramscope.capture``):
one overview row per rank, and which rank is the outlier.

The capture module names each file after host, pid, rank, device, reason and
time (``host_pid123_rank0_cuda0_oom_20250301-142501-318.pickle``) and writes a
JSON sidecar beside it with ``rank``, ``world_size``, ``reason`` and the
allocator's ``memory_stats`` at that instant.  Hidden files and in-progress
writes (``.*``, ``*.tmp``) are skipped.  The rank comes from the sidecar,
else from the name.  When a rank has several files (an OOM dump and the exit
dump, say), the overview uses its latest OOM dump, else its latest file, and
lists all of them.

Per rank, reserved / allocated / active and their peaks are the allocator's
own counters from the sidecar (``*.all.current`` / ``*.all.peak``) when it
has them; otherwise the snapshot's exact figures and the peaks of the
replayed trace.  Fragmentation, free memory and the OOM verdict come from
the snapshot.

Outlier rule (:data:`OUTLIER_RULE`): a rank is an outlier on reserved,
allocated, peak reserved or peak allocated when it exceeds the median of the
*other* ranks by more than 10 % of that median and by more than 256 MiB;
a rank that hit an OOM while at least one other rank did not is an outlier
too.  Only excess is flagged (memory trouble is the rank that holds more),
and comparing with the other ranks' median makes a 2-rank job flag the
rank that holds more, not both.

What each rank's memory is: the split by category (parameters, gradients - DDP's
gradient buckets among them, named "DDP bucket" -, optimizer state, activations,
communication, unknown, ...) of its preferred file at the instant ``vramscope summary
FILE`` gives its split for (the requested peak of the device it answers for), the same
bytes per category; the ranks side by side, one column each (:func:`split_lines`).

Each rank's figures are :func:`rank_row` of its file - a small dict - computed in this
process, on a pool of local processes or as a task of a Dask cluster where the files
are (:func:`load_ranks`); the overview is the same whichever way.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, cast

from ...early.install_hint import install_hint
from ..analysis.figures import memory_stats
from ..analysis.oom import oom_reports
from ..core import parallel
from ..core.errors import LoadCancelled, SnapshotError
from ..core.progress import Progress
from ..core.snapshot import Snapshot
from ..core.units import format_bytes, plural
from ..io.load import load_snapshot, read_sidecar
from ..replay.timeline import build_timeline, oom_events

OUTLIER_RELATIVE = 0.10
OUTLIER_ABSOLUTE = 256 << 20
OUTLIER_METRICS = (
    "reserved_bytes",
    "allocated_bytes",
    "peak_reserved_bytes",
    "peak_allocated_bytes",
)
OUTLIER_RULE = (
    "a rank is an outlier on reserved, allocated, peak reserved or peak allocated when it "
    "exceeds the median of the other ranks by more than 10 % and by more than 256 MiB; "
    "a rank that hit an OOM while another rank did not is an outlier too"
)
METRIC_LABELS = {
    "reserved_bytes": "reserved",
    "allocated_bytes": "allocated",
    "peak_reserved_bytes": "peak reserved",
    "peak_allocated_bytes": "peak allocated",
    "fragmentation": "fragmentation",
}

SNAPSHOT_SUFFIXES = (
    ".pickle",
    ".pkl",
    ".pickle.gz",
    ".pickle.xz",
    ".pickle.bz2",
    ".pkl.gz",
    ".pkl.xz",
    ".pkl.bz2",
)
# host_pid123_rank0_cuda0_oom_20250301-142501-318[-2].pickle
NAME_RE = re.compile(
    r"^(?P<host>[^_]*)_pid(?P<pid>\d+)_rank(?P<rank>\d+)_cuda(?P<device>\d+|-)_"
    r"(?P<reason>[a-z]+)_(?P<stamp>\d{8}-\d{6}-\d{3})(?:-(?P<n>\d+))?\."
)
RANK_RE = re.compile(r"(?:^|_)rank(\d+)(?:_|\.|$)")


def is_temp_name(name: str) -> bool:
    """In-progress or hidden files (the capture module's atomic-write temps)."""
    return name.startswith(".") or name.endswith(".tmp")


def is_snapshot_name(name: str) -> bool:
    return name.endswith(SNAPSHOT_SUFFIXES) and not is_temp_name(name)


@dataclass
class RankFile:
    """One snapshot file of the directory, with what its name and sidecar say."""

    path: str
    rank: int | None
    reason: str | None  # exit | oom | signal | manual (None: unknown)
    device: int | None
    host: str | None
    pid: int | None
    stamp: str  # sortable time: the name's stamp, else the file's mtime
    world_size: int | None = None
    local_rank: int | None = None
    sidecar: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return Path(self.path).name

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "rank": self.rank,
            "reason": self.reason,
            "device": self.device,
            "host": self.host,
            "pid": self.pid,
            "time": self.stamp,
        }


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def read_rank_file(path: str | os.PathLike) -> RankFile:
    p = Path(path)
    m = NAME_RE.match(p.name)
    side = read_sidecar(p)
    rank = _int(side.get("rank")) if side else None
    if rank is None and m:
        rank = int(m["rank"])
    if rank is None:
        r = RANK_RE.search(p.name)
        rank = int(r.group(1)) if r else None
    reason = side.get("reason") if side and isinstance(side.get("reason"), str) else None
    if reason is None and m:
        reason = m["reason"]
    device = _int(side.get("device")) if side else None
    if device is None and m and m["device"] != "-":
        device = int(m["device"])
    if m:
        stamp = m["stamp"] + (f"-{int(m['n']):03d}" if m["n"] else "")
    else:
        try:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(p.stat().st_mtime)) + "-000"
        except OSError:
            stamp = ""
    return RankFile(
        path=os.fspath(p),
        rank=rank,
        reason=reason,
        device=device,
        host=(
            side.get("host")
            if side and isinstance(side.get("host"), str)
            else (m["host"] if m else None)
        ),
        pid=(_int(side.get("pid")) if side else None) or (int(m["pid"]) if m else None),
        stamp=stamp,
        world_size=_int(side.get("world_size")) if side else None,
        local_rank=_int(side.get("local_rank")) if side else None,
        sidecar=side,
    )


def scan_directory(directory: str | os.PathLike) -> tuple[dict[int, list[RankFile]], list[str]]:
    """Snapshot files of ``directory`` grouped by rank (each list preferred first),
    and the names skipped (no rank in name or sidecar)."""
    d = Path(directory)
    if not d.is_dir():
        raise SnapshotError(f"not a directory: {d}")
    try:
        names = sorted(e.name for e in d.iterdir() if e.is_file())
    except OSError as exc:
        raise SnapshotError(f"cannot list {d}: {exc.strerror or exc}") from None
    by_rank: dict[int, list[RankFile]] = {}
    skipped: list[str] = []
    for name in names:
        if not is_snapshot_name(name):
            continue
        rf = read_rank_file(d / name)
        if rf.rank is None:
            skipped.append(name)
            continue
        by_rank.setdefault(rf.rank, []).append(rf)
    for files in by_rank.values():
        files.sort(key=preference, reverse=True)
    return dict(sorted(by_rank.items())), skipped


def preference(rf: RankFile) -> tuple:
    """Sort key, best last: OOM dumps first, then the latest."""
    return (rf.reason == "oom", rf.stamp, rf.name)


@dataclass
class RankEntry:
    """The overview row of one rank."""

    rank: int
    file: RankFile  # the file the figures come from
    files: list[RankFile]  # every file of this rank, preferred first
    reserved_bytes: int | None = None
    allocated_bytes: int | None = None
    active_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    free_bytes: int | None = None
    largest_free_block_bytes: int | None = None
    fragmentation: float | None = None
    segment_count: int | None = None
    source: str = "snapshot"  # "allocator counters" when the sidecar had them
    oom: bool = False
    oom_kind: str | None = None
    verdict: str | None = None
    error: str | None = None  # the snapshot could not be loaded
    # What the memory is, as summary FILE of this rank's file says it (see CATEGORY_FIELDS).
    categories_device: int | None = None
    categories_event: int | None = None
    categories_at_peak: dict[str, int] | None = None
    categories_guessed_bytes_at_peak: int | None = None
    ddp_bucket_bytes_at_peak: int | None = None
    outlier_reasons: list[str] = field(default_factory=list)
    deviations: dict[str, int] = field(default_factory=dict)  # metric -> bytes above median

    @property
    def outlier(self) -> bool:
        return bool(self.outlier_reasons)

    def value(self, metric: str):
        return getattr(self, metric)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "rank": self.rank,
            "file": self.file.path,
            "reason": self.file.reason,
            "device": self.file.device,
            "host": self.file.host,
            "world_size": self.file.world_size,
        }
        for k in (
            "reserved_bytes",
            "allocated_bytes",
            "active_bytes",
            "peak_reserved_bytes",
            "peak_allocated_bytes",
            "free_bytes",
            "largest_free_block_bytes",
            "fragmentation",
            "segment_count",
            "source",
            "oom",
            "oom_kind",
            "verdict",
            "error",
            *CATEGORY_FIELDS,
        ):
            d[k] = getattr(self, k)
        d["outlier"] = self.outlier
        d["outlier_reasons"] = list(self.outlier_reasons)
        d["excess_over_median_bytes"] = dict(self.deviations)
        d["files"] = [f.to_dict() for f in self.files]
        return d


@dataclass
class RankOverview:
    directory: str
    ranks: list[RankEntry]
    skipped: list[str]
    medians: dict[str, float | None]

    def entry(self, rank: int) -> RankEntry | None:
        for e in self.ranks:
            if e.rank == rank:
                return e
        return None

    @property
    def outliers(self) -> list[RankEntry]:
        return [e for e in self.ranks if e.outlier]

    @property
    def world_size(self) -> int | None:
        sizes = {e.file.world_size for e in self.ranks if e.file.world_size}
        return max(sizes) if sizes else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "world_size": self.world_size,
            "rank_count": len(self.ranks),
            "outlier_ranks": [e.rank for e in self.outliers],
            "outlier_rule": OUTLIER_RULE,
            "medians": self.medians,
            "ranks": [e.to_dict() for e in self.ranks],
            "skipped": list(self.skipped),
        }


#: The figures a rank's row takes from its snapshot (:func:`snapshot_row`).
ROW_FIELDS = (
    "reserved_bytes",
    "allocated_bytes",
    "active_bytes",
    "free_bytes",
    "largest_free_block_bytes",
    "fragmentation",
    "segment_count",
    "peak_reserved_bytes",
    "peak_allocated_bytes",
    "oom",
    "oom_kind",
    "verdict",
)
#: What the memory is, per rank: the fields of ``vramscope summary FILE --json`` of the
#: rank's file, under the same names (``categories_event``: summary's
#: ``peak_requested_event``, the instant of the split; ``ddp_bucket_bytes_at_peak``: of
#: the gradients, those in DDP's gradient buckets).
CATEGORY_FIELDS = (
    "categories_device",
    "categories_event",
    "categories_at_peak",
    "categories_guessed_bytes_at_peak",
    "ddp_bucket_bytes_at_peak",
)


DDP_BUCKET = "ddp_bucket"  # the reason the categories give DDP's gradient buckets


def snapshot_row(snap: Snapshot) -> dict[str, Any]:
    """The figures of one rank's row from its loaded snapshot: a small dict of plain
    numbers and strings (:data:`ROW_FIELDS`, :data:`CATEGORY_FIELDS`), what a pool
    worker or a Dask task sends back instead of the snapshot."""
    stats = memory_stats(snap)
    # Built as summary FILE builds it (no keyframes; the OOMs' layouts kept).
    timeline = (
        build_timeline(snap, keyframes=False, emit=oom_events(snap)) if len(snap.trace) else None
    )
    row: dict[str, Any] = {
        "reserved_bytes": int(stats.reserved_bytes),
        "allocated_bytes": int(stats.allocated_bytes),
        "active_bytes": int(stats.active_bytes),
        "free_bytes": int(stats.free_bytes),
        "largest_free_block_bytes": int(stats.largest_free_block_bytes),
        "fragmentation": float(stats.fragmentation),
        "segment_count": int(stats.segment_count),
        "peak_reserved_bytes": None,
        "peak_allocated_bytes": None,
        "oom": False,
        "oom_kind": None,
        "verdict": None,
    }
    if timeline is not None:
        for curve in ("reserved", "allocated"):
            best = None
            for d in timeline.devices:
                rep = timeline.replay(d)
                if rep is not None and len(rep):
                    v, _k = rep.peak(curve)
                    best = int(v) if best is None else max(best, int(v))
            row[f"peak_{curve}_bytes"] = best
    reports = oom_reports(snap, timeline)
    if reports:
        row["oom"] = True
        row["oom_kind"] = reports[-1].kind
        row["verdict"] = reports[-1].verdict
    row.update(category_fields(snap, timeline))
    return row


def category_fields(snap: Snapshot, timeline) -> dict[str, Any]:
    """:data:`CATEGORY_FIELDS` of ``snap``: the split ``vramscope summary FILE`` gives,
    made by the same functions for the same device and instant (its requested peak)."""
    from .summary import answered_device, breakdown_fields, peak_device_of, peaks

    out: dict[str, Any] = dict.fromkeys(CATEGORY_FIELDS)
    if timeline is None or not timeline.devices:
        return out
    device_peaks = {d: peaks(timeline, d) for d in timeline.devices}
    device = peak_device_of(answered_device(snap, device_peaks), device_peaks)
    event = device_peaks[device]["peak_requested_event"] if device is not None else None
    made: dict = {}
    fields = breakdown_fields(snap, timeline, None, device, event, made=made)
    split = fields.get("categories_at_peak")
    if split is None:
        return out
    out["categories_device"] = fields["categories_device"]
    out["categories_event"] = event
    out["categories_at_peak"] = {k: int(v) for k, v in split.items()}
    out["categories_guessed_bytes_at_peak"] = int(fields["categories_guessed_bytes_at_peak"] or 0)
    bd = made.get(device)
    ddp = bd.reasons_at(event).get(DDP_BUCKET, 0) if bd is not None and event is not None else 0
    out["ddp_bucket_bytes_at_peak"] = int(ddp)
    return out


def rank_row(path: str | os.PathLike, use_cache: bool | None = None) -> dict[str, Any]:
    """Load the snapshot at ``path`` and return its :func:`snapshot_row`; a file that
    cannot be loaded: ``{"error": one line}``.  The per-rank work of :func:`load_ranks`,
    run where the file is (in this process, a pool worker or a Dask worker)."""
    try:
        snap = load_snapshot(path, use_cache=use_cache)
    except SnapshotError as exc:
        return {"error": str(exc)}
    except MemoryError:
        return {"error": "not enough memory to load it"}
    return snapshot_row(snap)


def rank_entry(
    rank: int,
    files: list[RankFile],
    snap: Snapshot | None = None,
    error: str | None = None,
    row: dict[str, Any] | None = None,
) -> RankEntry:
    """The figures of one rank from its preferred file (``snap``: that file, loaded; or
    ``row``: its :func:`rank_row`, computed elsewhere) and its sidecar."""
    rf = files[0]
    if row is None and snap is not None:
        row = snapshot_row(snap)
    if row is not None and row.get("error") is not None:
        error, row = error or row["error"], None
    e = RankEntry(rank, rf, files, error=error)
    if row is not None:
        for k in (*ROW_FIELDS, *CATEGORY_FIELDS):
            setattr(e, k, row.get(k, getattr(e, k)))
    counters = (rf.sidecar or {}).get("memory_stats")
    if isinstance(counters, dict):
        took = False
        for attr, key in (
            ("reserved_bytes", "reserved_bytes.all.current"),
            ("allocated_bytes", "allocated_bytes.all.current"),
            ("active_bytes", "active_bytes.all.current"),
            ("peak_reserved_bytes", "reserved_bytes.all.peak"),
            ("peak_allocated_bytes", "allocated_bytes.all.peak"),
        ):
            c = _int(counters.get(key))
            if c is not None:
                setattr(e, attr, c)
                took = True
        if took:
            e.source = "allocator counters"
        n_ooms = _int(counters.get("num_ooms"))
        if n_ooms and not e.oom:
            e.oom = True  # the allocator counted an OOM the trace no longer holds
    if rf.reason == "oom":
        e.oom = True
    if (
        e.oom
        and e.verdict is None
        and rf.sidecar
        and isinstance(rf.sidecar.get("oom_message"), str)
    ):
        e.verdict = " ".join(rf.sidecar["oom_message"].split())[:300]
    return e


def flag_outliers(entries: list[RankEntry]) -> dict[str, float | None]:
    """Apply :data:`OUTLIER_RULE` in place; the median of each metric over all ranks."""
    medians: dict[str, float | None] = {}
    for metric in (*OUTLIER_METRICS, "fragmentation"):
        values = [e.value(metric) for e in entries if e.value(metric) is not None]
        medians[metric] = statistics.median(values) if values else None
    for e in entries:
        e.outlier_reasons = []
        e.deviations = {}
    if len(entries) < 2:
        return medians
    for metric in OUTLIER_METRICS:
        for e in entries:
            v = e.value(metric)
            others = [
                o.value(metric) for o in entries if o is not e and o.value(metric) is not None
            ]
            if v is None or not others:
                continue
            med = statistics.median(others)
            excess = v - med
            if excess > OUTLIER_RELATIVE * med and excess > OUTLIER_ABSOLUTE:
                e.deviations[metric] = int(excess)
                e.outlier_reasons.append(
                    f"{METRIC_LABELS[metric]} {format_bytes(v)} is {format_bytes(excess)} above "
                    f"the other ranks' median ({format_bytes(med)})"
                )
    if any(not e.oom for e in entries):
        for e in entries:
            if e.oom:
                e.outlier_reasons.insert(0, "ran out of memory while other ranks did not")
    return medians


#: Below these many bytes of snapshot files the pool costs more than it saves
#: (a fork and a pickle per rank against milliseconds of loading): read in this process.
POOL_MIN_BYTES = 16 << 20
SCHEDULER_TIMEOUT_S = 30  # to connect to a Dask scheduler


class ClusterError(SnapshotError):
    """The Dask scheduler given cannot be used (not installed, unreachable, a task that
    failed on a worker): one line, like every :class:`SnapshotError`."""


class _CancelCheck:
    """``cancelled()`` as the event :class:`~..core.progress.Progress` polls."""

    def __init__(self, cancelled: Callable[[], bool] | None) -> None:
        self.cancelled = cancelled

    def is_set(self) -> bool:
        return bool(self.cancelled is not None and self.cancelled())


def load_ranks(
    directory: str | os.PathLike,
    progress: Callable[[int, int, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    use_cache: bool | None = None,
    jobs: int | None = None,
    scheduler: Any = None,
) -> RankOverview:
    """Load every rank's preferred file of ``directory`` and flag the outliers.

    Each rank's figures are :func:`rank_row` of its preferred file, computed (the same
    function, the same small dict back, so the same overview whichever way):

    * ``scheduler`` None: on a pool of this machine's cores (:mod:`..core.parallel`;
      ``jobs`` processes, None: every CPU, and serially for a directory of less than
      :data:`POOL_MIN_BYTES`; ``jobs=1``: serially);
    * ``scheduler``: the address of a running Dask scheduler (``tcp://host:8786``) or a
      ``distributed.Client``: one task per file on the cluster's workers, which read the
      file where it is and send back the row (the directory is listed here when it is
      one here, else by a task there too).  Workers need vramscope installed.

    ``progress(i, n, name)`` is called before each file (serially) or as files finish
    (``i`` done so far, ``name`` empty); ``cancelled()`` returning true raises
    :class:`LoadCancelled`.  A file that cannot be loaded gives a row with ``error``
    set (the sidecar's counters still count).  Raises :class:`SnapshotError` when the
    directory holds no ranked snapshot, :class:`ClusterError` when the scheduler cannot
    be used.
    """
    if scheduler is not None:
        return _load_on_cluster(directory, scheduler, progress, cancelled, use_cache)
    by_rank, skipped = scan_directory(directory)
    _require_ranks(directory, by_rank, skipped)
    n = len(by_rank)
    paths = [files[0].path for files in by_rank.values()]
    if jobs is None and _total_bytes(paths) < POOL_MIN_BYTES:
        jobs = 1
    if parallel.workers_for(n, None, jobs) <= 1:
        rows = []
        for i, files in enumerate(by_rank.values()):
            if cancelled is not None and cancelled():
                raise LoadCancelled()
            if progress is not None:
                progress(i, n, files[0].name)
            rows.append(rank_row(files[0].path, use_cache))
    else:
        done = [0]

        def finished(_i: int, _row) -> None:
            done[0] += 1
            if progress is not None and done[0] < n:
                progress(done[0], n, "")

        if progress is not None:
            progress(0, n, "")
        rows = parallel.pmap(
            lambda path: rank_row(path, use_cache),
            paths,
            jobs=jobs,
            progress=Progress(None, cast(threading.Event, _CancelCheck(cancelled))),
            on_result=finished,
        )
    return _overview(directory, by_rank, skipped, rows, progress)


def _require_ranks(directory, by_rank: dict, skipped: list[str]) -> None:
    if not by_rank:
        raise SnapshotError(
            f"no snapshot files with a rank in {directory}"
            + (f" ({len(skipped)} without a rank)" if skipped else "")
        )


def _total_bytes(paths: list[str]) -> int:
    total = 0
    for p in paths:
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total


def _overview(
    directory,
    by_rank: dict[int, list[RankFile]],
    skipped: list[str],
    rows: list[dict[str, Any]],
    progress: Callable[[int, int, str], None] | None,
) -> RankOverview:
    entries = [
        rank_entry(rank, files, row=row) for (rank, files), row in zip(by_rank.items(), rows)
    ]
    medians = flag_outliers(entries)
    if progress is not None:
        progress(len(entries), len(entries), "")
    return RankOverview(os.fspath(directory), entries, skipped, medians)


def _load_on_cluster(directory, scheduler, progress, cancelled, use_cache) -> RankOverview:
    """:func:`load_ranks` through a running Dask scheduler: a task per file."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ClusterError(
            "a Dask scheduler needs the distributed package: " + install_hint("dask")
        ) from None
    own = isinstance(scheduler, str)
    try:
        client = (
            Client(scheduler, set_as_default=False, timeout=SCHEDULER_TIMEOUT_S)
            if own
            else scheduler
        )
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {scheduler}: "
            f"{' '.join(str(exc).split()) or type(exc).__name__}"
        ) from None
    try:
        try:
            if os.path.isdir(directory):
                by_rank, skipped = scan_directory(directory)
                # The workers' working directory is not ours: absolute paths (the
                # overview keeps the names as given).
                paths = [os.path.abspath(files[0].path) for files in by_rank.values()]
            else:  # only the cluster sees it
                by_rank, skipped = client.submit(
                    scan_directory, os.fspath(directory), pure=False
                ).result()
                paths = [files[0].path for files in by_rank.values()]
            _require_ranks(directory, by_rank, skipped)
            n = len(by_rank)
            futures = [client.submit(rank_row, path, use_cache, pure=False) for path in paths]
            if progress is not None:
                progress(0, n, "")
            done = 0
            for _ in as_completed(futures, loop=client.loop):
                if cancelled is not None and cancelled():
                    client.cancel(futures)
                    raise LoadCancelled()
                done += 1
                if progress is not None and done < n:
                    progress(done, n, "")
            rows = client.gather(futures)
        except (SnapshotError, LoadCancelled):
            raise
        except (OSError, TimeoutError) as exc:
            raise ClusterError(
                f"the Dask scheduler at {_address(client)} failed: "
                f"{' '.join(str(exc).split()) or type(exc).__name__}"
            ) from None
        except Exception as exc:  # a task that failed on a worker (vramscope missing, ...)
            raise ClusterError(
                f"a task failed on the Dask cluster: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())}"
            ) from None
    finally:
        if own:
            client.close()
    return _overview(directory, by_rank, skipped, rows, progress)


def _address(client) -> str:
    try:
        return str(client.scheduler.address)
    except AttributeError:
        return "?"


def format_text(overview: RankOverview) -> str:
    """The overview as a table for the terminal."""
    fb = format_bytes

    def cell(v, frac=False):
        if v is None:
            return "?"
        return f"{v:.1%}" if frac else fb(v)

    lines = [
        f"{overview.directory}: {plural(len(overview.ranks), 'rank')}"
        + (f" (world size {overview.world_size})" if overview.world_size else "")
    ]
    head = (
        f"{'rank':>4}  {'reserved':>11}  {'allocated':>11}  {'peak res.':>11}  "
        f"{'peak alloc.':>11}  {'frag.':>6}  {'OOM':<3}  file"
    )
    lines.append(head)
    for e in overview.ranks:
        flag = " *" if e.outlier else "  "
        lines.append(
            f"{e.rank:>4}{flag}{cell(e.reserved_bytes):>11}  {cell(e.allocated_bytes):>11}  "
            f"{cell(e.peak_reserved_bytes):>11}  {cell(e.peak_allocated_bytes):>11}  "
            f"{cell(e.fragmentation, True):>6}  {'yes' if e.oom else 'no':<3}  {e.file.name}"
            + (f"  (+{len(e.files) - 1} more)" if len(e.files) > 1 else "")
        )
    for e in overview.ranks:
        if e.error:
            lines.append(f"rank {e.rank}: could not load {e.file.name}: {e.error}")
    lines.extend(split_lines(overview))
    if overview.outliers:
        lines.append("outliers (*):")
        for e in overview.outliers:
            for r in e.outlier_reasons:
                lines.append(f"  rank {e.rank}: {r}")
            if e.verdict:
                lines.append(f"  rank {e.rank}: {e.verdict}")
    else:
        lines.append("no outlier rank")
    lines.append(f"rule: {OUTLIER_RULE}")
    for name in overview.skipped:
        lines.append(f"skipped (no rank in its name or sidecar): {name}")
    return "\n".join(lines)


#: Ranks side by side in one block of the split's table; more ranks wrap into further
#: blocks of as many (a 64-rank job reads as 8 blocks, not one 800-column line).
SPLIT_RANKS_PER_BLOCK = 8


@dataclass
class SplitRow:
    """One row of the ranks' split (:func:`split_table`): ``values`` one per rank of the
    overview, in its order (None: that rank has no split)."""

    key: str  # a category name, "ddp_bucket", "total", "guessed", "device" or "event"
    label: str
    values: list[int | None]
    is_bytes: bool = True

    def cells(self) -> list[str]:
        """The values as the text and the GUI show them ("?" where a rank has none)."""
        return [
            "?" if v is None else (format_bytes(v) if self.is_bytes else str(v))
            for v in self.values
        ]


def split_table(overview: RankOverview) -> list[SplitRow]:
    """What the memory is, per rank, at the instant ``vramscope summary FILE`` of the
    rank's file gives its split for: the device and event, one row per category non-zero
    on some rank (the categories' order and words), of the gradients those in DDP's
    buckets (where any rank has some), the total and how much of it is a guess.  Empty
    when no rank has a split (no trace, files that could not be loaded)."""
    from ..categories.reasons import CATEGORY_LABELS, CATEGORY_NAMES

    ranks = overview.ranks
    if not any(e.categories_at_peak is not None for e in ranks):
        return []

    def of(get: Callable[[RankEntry], int | None]) -> list[int | None]:
        return [None if e.categories_at_peak is None else get(e) for e in ranks]

    rows = [
        SplitRow("device", "device", of(lambda e: e.categories_device), False),
        SplitRow("event", "at event", of(lambda e: e.categories_event), False),
    ]
    ddp = of(lambda e: e.ddp_bucket_bytes_at_peak or 0)
    for name, label in zip(CATEGORY_NAMES, CATEGORY_LABELS):
        values = [
            None if e.categories_at_peak is None else e.categories_at_peak.get(name, 0)
            for e in ranks
        ]
        if any(values):
            rows.append(SplitRow(name, label, values))
        if name == "gradient" and any(ddp):
            rows.append(SplitRow(DDP_BUCKET, "  in DDP buckets", ddp))
    rows.append(
        SplitRow("total", "total", of(lambda e: sum((e.categories_at_peak or {}).values())))
    )
    guessed = of(lambda e: e.categories_guessed_bytes_at_peak or 0)
    if any(guessed):
        rows.append(SplitRow("guessed", "  of it guessed", guessed))
    return rows


SPLIT_HEAD = (
    "what the memory is at each rank's requested peak (the split vramscope summary gives "
    "for the rank's file):"
)


def split_lines(overview: RankOverview, per_block: int = SPLIT_RANKS_PER_BLOCK) -> list[str]:
    """:func:`split_table` as text: one column per rank, one row per category; more than
    ``per_block`` ranks wrap into blocks of ``per_block`` columns."""
    rows = split_table(overview)
    if not rows:
        return ["what the memory is: no rank's file has a trace to split it by category"]
    lines = [SPLIT_HEAD]
    width = max(len(r.label) for r in rows)
    cells = [r.cells() for r in rows]
    ranks = overview.ranks
    for start in range(0, len(ranks), per_block):
        stop = start + per_block
        if start:
            lines.append("")
        heads = [f"rank {e.rank}" for e in ranks[start:stop]]
        col = [max(len(h), *(len(c[start + i]) for c in cells)) for i, h in enumerate(heads)]
        lines.append(" " * width + "".join(f"  {h:>{w}}" for h, w in zip(heads, col)))
        for r, c in zip(rows, cells):
            lines.append(
                f"{r.label:<{width}}" + "".join(f"  {v:>{w}}" for v, w in zip(c[start:stop], col))
            )
    return lines
