"""Predictions per setting: the figures the CLI prints and the panel shows."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..core import allocator_rules as rules
from ..core.errors import LoadCancelled, SnapshotError
from ..core.progress import Progress
from ..core.snapshot import Snapshot
from ..core.units import format_bytes as fb
from ..core.units import plural
from ..replay import replay_device
from ..replay.recorded_window import RecordedWindow, recorded_window
from .limits import AT_OOM_SOURCE, LimitBounds, infer_limit, outside_oom_limit
from .requests import Requests, build_requests, released_by_empty_cache
from .run import SimResult, simulate
from .selfcheck import CheckResult, self_check

RECORDED = "recorded"
#: Requests from which :meth:`Case.recorded_beside` runs the recorded simulation on a
#: thread beside the caller's work: the compiled model answers 100k requests in a few
#: milliseconds, far more than a thread's start.
BESIDE_MIN_REQUESTS = 100_000
T = TypeVar("T")
# The standard set --recommend tries (each from the defaults, as the allocator parses them).
RECOMMENDED = [
    "",
    "expandable_segments:True",
    "max_split_size_mb:64",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "garbage_collection_threshold:0.6",
    "expandable_segments:True,garbage_collection_threshold:0.6",
]


@dataclass
class Prediction:
    """One setting's simulated run."""

    conf: str  # as given
    config: rules.AllocatorConfig
    limit: int | None
    result: SimResult
    # The program was changed too (another batch size): at the recorded settings the row
    # is still not the recorded run.
    program_changed: bool = False

    def to_dict(self, case: "Case") -> dict:
        r = self.result
        oom = r.first_oom
        return {
            "conf": self.conf,
            "settings": self.config.describe(),
            "memory_limit_bytes": self.limit,
            "peak_reserved_bytes": r.peak_reserved_until_oom,
            "peak_reserved_event": case.event_of(r.peak_reserved_request),
            "peak_allocated_bytes": r.peak_allocated,
            "fragmentation_at_peak": round(r.fragmentation_at_peak, 6),
            "free_at_peak_bytes": r.free_at_peak,
            "largest_free_at_peak_bytes": r.largest_free_at_peak,
            "cuda_malloc_count": r.n_cuda_malloc,
            "cuda_free_count": r.n_cuda_free,
            "alloc_retries": r.n_retries,
            "oom": None
            if oom is None
            else {
                "event": oom.event,
                "time_us": case.time_of(oom.event),
                "size_bytes": oom.size,
                "pool": oom.pool_kind,
                "kind": oom.kind,
                "reserved_bytes": oom.reserved_bytes,
                "allocated_bytes": oom.allocated_bytes,
                "free_in_pool_bytes": oom.free_in_pool_bytes,
                "largest_free_bytes": oom.largest_free_bytes,
                "as_recorded": oom.recorded,
                "verdict": verdict(oom),
            },
            "oom_count": len(r.ooms),
            "recorded_ooms_avoided": len(r.recorded_ooms_avoided),
            "peak_reserved_vs_recorded": None
            if self.peak_is_window_start(case)
            else (r.peak_reserved_until_oom / case.recorded_peak - 1.0)
            if case.recorded_peak
            else None,
            # The trace began after segments existed (see replay/recorded_window.py): they
            # keep their recorded places here, and a peak equal to them predicts nothing.
            "window_started_late": bool(case.window and case.window.started_late),
            "peak_reserved_is_window_start": self.peak_is_window_start(case),
        }

    def peak_is_window_start(self, case: "Case") -> bool:
        """The peak is the layout the trace window started with: recorded, not predicted."""
        w = case.window
        return bool(
            w
            and w.started_late
            and self.result.peak_reserved_until_oom <= self.result.reserved_before
        )


@dataclass(frozen=True)
class RecordedFigures:
    """What is read of the recorded run besides its curves: the self-check's comparison
    of its segment events and final segments with the recording, and its peaks."""

    ok: bool
    n_segment_events: int
    first_difference: str
    peak_reserved: int
    peak_allocated: int
    peak_reserved_until_oom: int


class Case:
    """One device's recorded requests, ready to be simulated under any setting."""

    def __init__(
        self,
        snap: Snapshot,
        device: int,
        reqs: Requests,
        recorded: rules.AllocatorConfig,
        limit: int | None,
        limit_source: str,
        bounds: LimitBounds,
        gpu_bytes: int | None,
    ) -> None:
        self.snap, self.device, self.requests = snap, device, reqs
        self.recorded, self.limit, self.limit_source = recorded, limit, limit_source
        self.bounds, self.gpu_bytes = bounds, gpu_bytes
        self._recorded_run: SimResult | None = None
        self.window: RecordedWindow | None = None  # what the trace window cannot show
        # What the self-check and "vs recorded" read of the recorded run, when known
        # without it (a cached case: .case_cache); see recorded_figures().
        self.recorded_known: RecordedFigures | None = None

    @property
    def recorded_peak(self) -> int:
        """Peak reserved of the recorded run: the recording's own counter (the sidecar's
        ``reserved_bytes.all.peak`` of this device), else the model's.  The model runs
        under one constant limit, the one at the OOM; where the GPU had more room earlier
        (another process took it meanwhile) the recorded run reserved more than that
        limit, which the model, stopped at the limit, cannot show."""
        counter = self.snap.sidecar_stats(self.device).get("reserved_bytes.all.peak")
        if isinstance(counter, int) and not isinstance(counter, bool) and counter > 0:
            return counter
        return self.recorded_figures().peak_reserved_until_oom

    def with_requests(self, requests: Requests) -> "Case":
        """A copy of this case for another request stream (a program edit, another
        batch); its recorded-settings run is simulated again when first asked for."""
        out = copy.copy(self)
        out.requests = requests
        out._recorded_run = None
        out.recorded_known = None
        return out

    def recorded_run(self) -> SimResult:
        if self._recorded_run is None:
            self._recorded_run = simulate(self.requests, self.recorded, self.limit, self.gpu_bytes)
        return self._recorded_run

    @property
    def recorded_run_made(self) -> bool:
        """Whether the recorded run was simulated already (:meth:`recorded_run`)."""
        return self._recorded_run is not None

    def recorded_figures(self) -> RecordedFigures:
        """The figures of the recorded run the self-check and "vs recorded" read: kept
        with a cached case (:attr:`recorded_known`), else from :meth:`recorded_run`."""
        if self._recorded_run is None and self.recorded_known is not None:
            return self.recorded_known
        sim = self.recorded_run()
        check = self_check(self.snap, self.device, self.requests, sim)
        return RecordedFigures(
            check.ok,
            check.n_segment_events,
            check.first_difference,
            sim.peak_reserved,
            sim.peak_allocated,
            sim.peak_reserved_until_oom,
        )

    def recorded_beside(self, work: Callable[[], T], progress: Progress | None = None) -> T:
        """``work()``, with the recorded run (:meth:`recorded_run`, the self-check's)
        simulated first, or meanwhile on a thread of its own where that pays: a stream of
        at least :data:`BESIDE_MIN_REQUESTS` requests that the compiled model answers
        (its loop runs without the GIL, on its own state: the same result to the byte
        either way), two CPUs or more and :data:`~..core.parallel.JOBS_ENV` not 1.
        ``work`` must not fork (no process pool) while the thread runs.  ``progress``
        (the recorded run's when serial) gives its cancel event to the thread.  An error
        of the recorded run is raised first, as serially."""
        if self._recorded_run is not None or not self._beside_pays():
            self.simulate(RECORDED, progress=progress)
            return work()
        import threading

        stop = threading.Event()
        got: list = []

        def recorded() -> None:
            try:
                self.simulate(RECORDED, progress=Progress(None, stop))
            except BaseException as exc:  # raised in the caller's thread below
                got.append(exc)

        own = threading.Thread(target=recorded, name="vramscope-recorded-run", daemon=True)
        cancel = progress.cancel_event if progress is not None else None
        own.start()
        try:
            out = work()
        except BaseException:
            stop.set()  # its next checkpoint ends it
            own.join()
            if got and not isinstance(got[0], LoadCancelled):
                raise got[0] from None
            raise
        while own.is_alive():
            own.join(0.05)
            if cancel is not None and cancel.is_set():
                stop.set()
        if got:
            raise got[0]
        return out

    def _beside_pays(self) -> bool:
        from ..core import parallel
        from . import native_sim

        return (
            len(self.requests) >= BESIDE_MIN_REQUESTS
            and not self.requests.replay_inconsistencies
            and native_sim.use_native()
            and parallel.env_jobs() != 1
            and parallel.available_cpus() >= 2
        )

    def config_of(self, conf: str | rules.AllocatorConfig | None) -> rules.AllocatorConfig:
        if conf is None or conf == RECORDED:
            return self.recorded
        if isinstance(conf, rules.AllocatorConfig):
            return conf
        return rules.parse_conf(conf)

    def effective_limit(self, given: int | None = None) -> tuple[int | None, str]:
        """The memory limit a judgement of this case runs under, and where it comes from:
        the one ``given``, else the recording's (sidecar, inferred), else the GPU's total
        memory; (None, "none") without any.  advise, the Diagnosis and the What-if panels
        all take it from here, so they judge and name the same limit."""
        if given is not None:
            return int(given), "given"
        if self.limit is not None:
            return int(self.limit), self.limit_source
        if self.gpu_bytes:
            return int(self.gpu_bytes), "GPU total memory"
        return None, "none"

    def simulate(
        self,
        conf: str | rules.AllocatorConfig | None = None,
        limit: int | None = None,
        progress: Progress | None = None,
    ) -> SimResult:
        """Simulate under ``conf`` (a PYTORCH_CUDA_ALLOC_CONF string, ``"recorded"`` or None)."""
        cfg = self.config_of(conf)
        lim = self.limit if limit is None else limit
        if cfg == self.recorded and lim == self.limit:
            if self._recorded_run is None:  # computed once, also for the self-check
                self._recorded_run = simulate(self.requests, cfg, lim, self.gpu_bytes, progress)
            return self._recorded_run
        return simulate(self.requests, cfg, lim, self.gpu_bytes, progress)

    def self_check(self, peaks_since_start: bool = True) -> CheckResult:
        """The model at the recorded settings against the recording (events, segments, peaks).

        ``peaks_since_start``: the sidecar's peak counters cover the whole recording; a
        program that called ``torch.cuda.reset_peak_memory_stats`` since (known to the
        caller, not to the trace) has counters of a later window: not compared."""
        figures = self.recorded_figures()
        check = CheckResult(figures.ok, figures.n_segment_events, figures.first_difference)
        # Not compared: the sidecar's counters of another device, or of another window.
        stats = self.snap.sidecar_stats(self.device) if peaks_since_start else {}
        if check.ok and not self._wrapped():
            for name, ours in (
                ("reserved_bytes.all.peak", figures.peak_reserved),
                ("allocated_bytes.all.peak", figures.peak_allocated),
            ):
                theirs = stats.get(name)
                if isinstance(theirs, int) and theirs != ours:
                    return CheckResult(
                        False,
                        check.n_segment_events,
                        f"{name}: recorded {theirs}, simulated {ours}",
                    )
        return check

    def _wrapped(self) -> bool:
        return bool(len(self.requests.initial.seg_addr))

    def event_of(self, request: int) -> int:
        return int(self.requests.event[request]) if 0 <= request < len(self.requests) else -1

    def time_of(self, event: int) -> int:
        t = self.requests.time_us
        return int(t[event]) if 0 <= event < len(t) else -1

    def curve_x(self) -> np.ndarray:
        """Trace event index of each request (the x of the reserved curves)."""
        return self.requests.event


def prepare(
    snap: Snapshot,
    device: int | None = None,
    progress: Progress | None = None,
    limit: int | None = None,
) -> Case:
    """The request stream of ``device`` (default: the last OOM's device, else the one whose
    reserved memory peaked highest, among those with trace events:
    :func:`..analysis.focus.default_trace_device`, the rule every view follows)."""
    from ..analysis.focus import default_trace_device, trace_devices

    devices = trace_devices(snap)
    if device is None:
        if not devices:
            raise SnapshotError(
                "the snapshot has no trace events to simulate "
                "(record with torch.cuda.memory._record_memory_history)"
            )
        device = default_trace_device(snap)
        assert device is not None  # some device has events
    elif device not in devices:
        raise SnapshotError(f"no trace events on device {device}")
    rep = replay_device(snap, device, progress, keyframes=False)
    recorded = rules.config_from_settings(snap.allocator_settings)
    side = snap.sidecar or {}
    stats = side.get("memory_stats") or {}
    # With no retries recorded (and no rule that releases without one), every
    # release in the trace was the program's own empty_cache.
    retries_possible = not (
        stats.get("num_alloc_retries") == 0
        and recorded.max_split_size >= rules.NO_LIMIT
        and recorded.garbage_collection_threshold == 0
    )
    reqs = build_requests(
        rep,
        snap.pools,
        retries_possible,
        gc_possible=recorded.garbage_collection_threshold > 0,
        cfg=recorded,
        emptied=released_by_empty_cache(snap, rep),
    )
    bounds = infer_limit(reqs, recorded, snap.trace.device_free[rep.rows])
    lim: int | None
    if limit is not None:
        lim, source = int(limit), "given"
    elif isinstance(side.get("memory_limit_bytes"), int):
        lim, source = int(side["memory_limit_bytes"]), "sidecar"
    elif bounds.upper is not None:
        lim = bounds.estimate
        source = AT_OOM_SOURCE if lim == bounds.at_oom else "inferred"
        if source == AT_OOM_SOURCE and lim is not None and bounds.lower > lim:
            # The allocator held more earlier: the device's room shrank during the run (other
            # processes grew), which one constant limit cannot reproduce.
            source += (
                f"; it held {fb(bounds.lower)} earlier in the run: other processes "
                "took room meanwhile"
            )
    else:
        lim, source = None, "none"
    # A dump at an OOM outside the allocator: the device then had only its free memory.
    outside = outside_oom_limit(snap, device) if source not in ("given", "sidecar") else None
    if outside is not None and (lim is None or outside < lim):
        lim, source = outside, AT_OOM_SOURCE
    gpu = side.get("gpu_total_memory")
    case = Case(
        snap,
        device,
        reqs,
        recorded,
        lim,
        source,
        bounds,
        gpu if isinstance(gpu, int) and gpu > 0 else None,
    )
    case.window = recorded_window(rep)
    return case


def predict(
    case: Case, confs: list[str], limit: int | None = None, progress: Progress | None = None
) -> list[Prediction]:
    """One :class:`Prediction` per setting, in the order given."""
    out = []
    n = max(len(confs), 1)
    for j, conf in enumerate(confs):
        cfg = case.config_of(conf)
        sub = None
        if progress is not None:
            progress.update("simulate", j / n)  # raises LoadCancelled after a Cancel
            sub = Progress(_scaled(progress, j, n), progress.cancel_event)
        result = case.simulate(cfg, limit, sub)
        out.append(Prediction(conf, cfg, case.limit if limit is None else limit, result))
    if progress is not None:
        progress.update("simulate", 1.0)
    return out


def _scaled(progress: Progress, j: int, n: int):
    """A progress callback for setting ``j`` of ``n``: its fraction within the whole."""

    def update(stage: str, f: float) -> None:
        progress.update("simulate", (j + f) / n)

    return update


def limit_text(case: Case, limit: int | None = None) -> str:
    """The memory limit the predictions used, and where it came from.

    ``limit`` is the one given (``--memory-limit``); then the recording's own
    limit is named beside it, since "vs recorded" compares with the recorded run.
    """
    own = f"{fb(case.limit)} ({case.limit_source})" if case.limit else "none"
    if limit is None or limit == case.limit:
        return own
    return f"{fb(limit)} (given; the recording's: {own})"


#: The columns of the prediction table (the CLI's ``whatif``, batch rows included).
TABLE_COLUMNS: tuple[str, ...] = (
    "setting",
    "peak reserved",
    "vs recorded",
    "peak alloc",
    "frag@peak",
    "cudaMalloc",
    "cudaFree",
    "OOM",
)


def table_head(case: Case, limit: int | None = None) -> str:
    """The line above the prediction table: device, requests, settings, memory limit."""
    return (
        f"device {case.device}: {plural(len(case.requests), 'request')}; recorded settings: "
        f"{case.recorded.describe()}; memory limit: {limit_text(case, limit)}"
    )


def table_row(case: Case, p: Prediction, d: dict, peak: str) -> tuple[str, ...]:
    """One prediction's row (``d``: its :meth:`Prediction.to_dict`; ``peak``: the peak
    reserved cell as the caller words it)."""
    oom = d["oom"]
    return (
        row_label(case, p),
        peak,
        vs_recorded_text(d),
        fb(d["peak_allocated_bytes"]),
        f"{d['fragmentation_at_peak'] * 100:.1f}%",
        str(d["cuda_malloc_count"]),
        str(d["cuda_free_count"]),
        "-" if oom is None else f"event {oom['event']} ({oom['kind']})",
    )


def aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """``rows`` as left-aligned columns two spaces apart."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]


def format_text(
    case: Case, preds: list[Prediction], ranked: bool = False, limit: int | None = None
) -> str:
    """The CLI's table and one line per predicted OOM (``limit``: the one given, if any)."""
    rows: list[tuple[str, ...]] = [TABLE_COLUMNS]
    for p in preds:
        d = p.to_dict(case)
        fixed = d["peak_reserved_is_window_start"]
        rows.append(table_row(case, p, d, fb(d["peak_reserved_bytes"]) + ("*" if fixed else "")))
    lines = [table_head(case, limit), *aligned(rows)]
    for p in preds:
        oom = p.result.first_oom
        if oom is not None:
            lines.append(f"  {p.conf or '(defaults)'}: OOM at event {oom.event}: {verdict(oom)}")
    lines.extend(window_notes(case, preds))
    if ranked:
        lines.append("ranked by predicted peak reserved (lowest first; OOMs last)")
    return "\n".join(lines)


def vs_recorded_text(d: dict) -> str:
    """The "vs recorded" cell of a prediction (its :meth:`Prediction.to_dict`), the same
    words in the CLI's table and the What-if panel's: "out of memory" for a run that
    stops at an OOM (its peak is only up to there: nothing to compare), "n/a*" for a peak
    that is the window's start, else the change in percent ("-": no recorded peak)."""
    if d["oom"] is not None:
        return "out of memory"
    if d["peak_reserved_is_window_start"]:
        return "n/a*"
    vs = d["peak_reserved_vs_recorded"]
    return "-" if vs is None else f"{vs * 100:+.1f}%"


def row_label(case: Case, p: Prediction) -> str:
    """The setting as given; "(= recorded)" marks the one that is the recorded run's settings
    (under --recommend the defaults often are: the baseline the other rows compare with),
    "(recorded settings)" the same settings with the program changed (another batch)."""
    label = p.conf if p.conf else "(defaults)"
    if p.conf != RECORDED and p.config == case.recorded:
        # A changed program (another batch) at the recorded settings is not the recorded
        # run: "(= recorded)" would read as if it were.
        label += " (recorded settings)" if p.program_changed else " (= recorded)"
    return label


def window_notes(case: Case, preds: list[Prediction]) -> list[str]:
    """What the predictions cannot show when the trace began after segments existed."""
    w = case.window
    if not (w and w.started_late):
        return []
    lines = [
        f"note: {w.describe()}.",
        "  Under every setting those segments keep their recorded places: a setting's "
        "effect on them is unknown, and cudaMalloc/cudaFree count the window only.",
    ]
    if any(p.peak_is_window_start(case) for p in preds):
        lines.append(
            f"  * = the {fb(w.reserved_before)} the window started with, never "
            "exceeded: recorded, not a prediction of this setting's peak."
        )
    return lines


def rank(preds: list[Prediction]) -> list[Prediction]:
    """Settings that run without OOM first, then by predicted peak reserved."""
    return sorted(
        preds, key=lambda p: (p.result.first_oom is not None, p.result.peak_reserved_until_oom)
    )


def verdict(oom) -> str:
    """One line: why this request failed, in the allocator's terms."""
    head = f"{fb(oom.size)} requested ({oom.pool_kind} pool): {oom.kind}: "
    limit = fb(oom.limit) if oom.limit else "the GPU's free memory"
    grow = (
        f"{fb(oom.reserved_bytes)} reserved + {fb(oom.new_memory_bytes)} new "
        f"{'pages' if oom.expandable else 'segment'} would pass {limit}"
    )
    if oom.kind == "fragmentation":
        where = (
            "partly used pages of the expandable segment, which only unmap whole pages"
            if oom.expandable
            else "partly used segments, which cannot be freed"
        )
        return (
            head + f"{fb(oom.free_in_pool_bytes)} is free in the pool but the largest block "
            f"is {fb(oom.largest_free_bytes)}; the free memory sits in {where}, and {grow}"
        )
    return head + (
        f"only {fb(oom.free_in_pool_bytes)} free in the pool after releasing the cache, and {grow}"
    )
