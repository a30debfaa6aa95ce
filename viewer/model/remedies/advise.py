"""Which change would make this run fit: remedies, each with a predicted peak, ranked.

The remedies are a catalogue (:mod:`.catalogue`), one spec each: what it is, when it
applies, the simulations it needs and how its prediction is built.  :func:`advise`
gathers what every spec reads (:func:`.catalogue.gather`: the evidence, the batch
judgement, the limit, the split at the peak, the largest batch that fits), runs the
simulations the applicable specs need side by side on one pool, builds each remedy,
keeps those that save something (or make a run that ran out of memory fit) and ranks
them by predicted peak reserved.  The runs that need no judgement (the recorded run,
the recorded stream at other allocator settings) start first, on threads beside it.

Simulated remedies run the recorded request stream, edited, through the allocator
model (:mod:`..whatif`), so caching and fragmentation are part of the answer.
Estimated ones (the change alters what the recording cannot show) carry a range of
the predicted peak reserved, bounded by runs of edited streams too (:mod:`.changes`).
Every prediction keeps the segments reserved before the recording started.

The live bytes at the peak are split by the batch-scaling judgement
(:mod:`.scaling`, :mod:`.split`): activations = allocations that scale with the batch
and were made in forward; model state = parameters, optimizer state and
gradients-by-size; the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import numpy as np

from ..categories.wording import format_split
from ..core import parallel
from ..core.progress import Progress
from ..core.units import format_bytes as fb
from ..core.units import plural
from ..whatif import Case, native_sim
from ..whatif.predictions import verdict as oom_verdict
from ..whatif.run import SimResult
from . import batch_scale
from .catalogue import SPECS, Context, RemedySpec, gather
from .catalogue.context import Basis
from .remedy import GPU_FREED, SIMULATED, Remedy


@dataclass
class Advice:
    """Everything ``vramscope advise`` says about one recording."""

    device: int
    # The recording's own peak reserved (memory_stats' reserved_bytes.all.peak; up to the
    # OOM in a run that ran out of memory).
    recorded_peak_reserved_bytes: int
    # The peak reserved the run needs at its settings: the recorded one when it fitted,
    # else simulated without a limit (the failed request served).  Savings are counted
    # from it, so that a remedy's demand is compared with a demand, never with a run
    # truncated at its OOM.
    needed_peak_reserved_bytes: int
    memory_limit_bytes: int | None
    limit_source: str
    verdict: str
    split_at_peak: dict[str, Any]
    remedies: list[Remedy]
    largest_scale_that_fits: float | None
    largest_batch_that_fits: int | None
    recorded_batch: int | None
    search_capped: bool = False
    # Library workspaces (cuDNN-like) whose size at another batch is not in the recording:
    # the batch answers (largest batch, smaller-batch remedy) are then estimates.
    batch_workspaces: int = 0
    # The largest batch's margin to the limit and the batch after it (None: no limit).
    near_limit: batch_scale.SafeAnswer | None = None
    # Why no batch is judged to fit though a limit is known (an OOM outside the allocator).
    batch_not_judged: str | None = None
    # "at the OOM" / "at the peak": the instant split_at_peak describes (its "event").
    moment: str = "at the peak"
    # The recorded run ran out of memory by fragmentation: remedies lead with settings.
    fragmentation: bool = False

    @property
    def largest_batch_is_estimate(self) -> bool:
        """The largest batch's prediction is an estimate (:func:`.batch_scale.is_estimate`)."""
        n = self.near_limit
        if n is not None and n.safe is not None:
            return n.safe.is_estimate
        return self.batch_workspaces > 0

    @property
    def batch_in_doubt(self) -> str:
        """What the batch prediction's estimate rests on, counted ("4 library workspaces",
        "552 autotuning allocations and ..."): the CLI's words and the Diagnosis panel's."""
        safe = self.near_limit.safe if self.near_limit is not None else None
        if safe is not None and safe.estimate is not None:
            return safe.estimate.in_doubt()
        return f"{self.batch_workspaces} library workspaces"

    @property
    def limit_known(self) -> bool:
        """A memory limit was given, recorded, inferred or is the GPU's total memory."""
        return self.memory_limit_bytes is not None

    # What the user should know about these answers (a window that starts late, ...).
    notes: list[str] = field(default_factory=list)
    # A rank of sharded (FSDP) training: its shards and what more ranks would hold
    # (:meth:`~..categories.MemoryBreakdown.sharding`); None: not sharded.
    sharding: dict[str, Any] | None = None

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "recorded_peak_reserved_bytes": self.recorded_peak_reserved_bytes,
            "needed_peak_reserved_bytes": self.needed_peak_reserved_bytes,
            "memory_limit_bytes": self.memory_limit_bytes,
            "memory_limit_source": self.limit_source,
            "verdict": self.verdict,
            "split_at_peak": self.split_at_peak,
            "split_moment": self.moment,
            "memory_limit_known": self.limit_known,
            "fragmentation_oom": self.fragmentation,
            "notes": self.notes,
            "sharding": self.sharding,
            "recorded_batch": self.recorded_batch,
            "largest_scale_that_fits": self.largest_scale_that_fits,
            "largest_batch_that_fits": self.largest_batch_that_fits,
            "batch_not_judged": self.batch_not_judged,
            "search_capped": self.search_capped,
            "largest_batch_is_estimate": self.largest_batch_is_estimate,
            "batch_workspace_allocations": self.batch_workspaces,
            **(
                self.near_limit.to_dict()
                if self.near_limit is not None
                else batch_scale.SafeAnswer.empty_dict()
            ),
            "remedies": [r.to_dict() for r in self.remedies],
        }


# The early tasks of the recorded run and of the recorded stream under the judged limit
# where that is another (no spec's: no "/").
RECORDED_RUN, LIMITED_RUN = "recorded", "limited"


# The runs beside the judgement are asked for once the evidence and the judgement are
# made, which on a long recording take as long as about this many runs in a row: so many
# rounds on fewer threads answer as soon, and leave the memory bandwidth to the evidence
# (measured on a 16-core host, 10M events: nine runs on nine threads slowed the evidence
# from 0.95 to 1.4 s).
BESIDE_ROUNDS = 2


def _jobs_beside_judgement(n_runs: int) -> int | None:
    """The threads for ``n_runs`` runs beside the judgement, this one counted
    (:func:`..core.parallel.pmap_async`'s ``jobs``): enough to make them in
    :data:`BESIDE_ROUNDS` rounds, no more than the CPUs; None where the user set the
    number (:data:`..core.parallel.JOBS_ENV`)."""
    if parallel.env_jobs() is not None:
        return None
    return min(parallel.available_cpus(), -(-n_runs // BESIDE_ROUNDS) + 1)


def _before_judgement(case: Case, batch: int | None, limit: int | None) -> dict[str, Any]:
    """The runs that need no judgement, named as :func:`_build_all` names them: the
    recorded run (the self-check's, and the baseline under the recording's limit), the
    baseline under another limit (given, or the GPU's) and the runs of the specs of the
    recorded stream at other settings whose ``applies`` and ``simulations`` read only
    the :class:`~.catalogue.context.Basis` (their answers there are the ones they give
    on the whole context: the same code on the same values).  None where the compiled
    model does not run them (they need the GIL)."""
    if not native_sim.use_native():
        return {}
    basis = Basis.of(case, batch, limit)
    tasks: dict[str, Any] = {}
    # A recording the replay found inconsistent: its recorded run's error comes first.
    if not case.requests.replay_inconsistencies:
        tasks[RECORDED_RUN] = case.recorded_run
        if basis.limit != case.limit:  # the baseline: under another limit than recorded
            tasks[LIMITED_RUN] = partial(case.simulate, None, basis.limit)
    for spec in SPECS:
        if spec.edits_stream or spec.split_after_oom or spec.method == GPU_FREED:
            continue
        try:
            prep = spec.applies(cast(Context, basis))
            runs = spec.simulations(cast(Context, basis), prep) if prep is not None else {}
        except AttributeError:  # it reads the judgement: its runs wait for it
            continue
        tasks.update({f"{spec.id}/{name}": run for name, run in runs.items()})
    return tasks


# The cores above which an edited stream's runs start before the later specs' tests.
EARLY_MIN_CPUS = 2
# Runs of specs started as soon as they applied (:func:`_applying`): by spec id, the runs'
# names and their pool.
Started = dict[str, tuple[list[str], parallel.Pending]]


def _start_runs(
    ctx: Context, spec: RemedySpec, prep: Any
) -> tuple[list[str], parallel.Pending] | None:
    """``spec``'s runs started on threads at once (None: it needs none), beside the other
    specs' ``applies`` still to come: with the compiled model an edited stream's run
    need not wait for them (the specs' tests read the context, the runs their own
    edited streams)."""
    runs = spec.runs(ctx, prep)
    if not runs:
        return None
    names = list(runs)
    return names, parallel.pmap_async(
        lambda name: runs[name](),
        names,
        work=parallel.simulation_work(ctx.n, True),
        threads=True,
    )


def _applying(ctx: Context, started: Started) -> list[tuple[RemedySpec, Any]]:
    """Every spec of the catalogue that applies to ``ctx`` (but what else holds the GPU,
    judged apart) with what it acts on, in the catalogue's order.  With the compiled
    model the runs of a spec that edits the stream start as soon as it is found to apply
    (:func:`_start_runs`), into ``started`` by spec id: an edited stream is the longest
    run, and the later specs' tests take most of a second on a long recording."""
    # Where this process has no core to spare beyond the prediction and the runs already
    # beside it (two), starting more only interleaves the same work.
    early = native_sim.use_native() and parallel.available_cpus() > EARLY_MIN_CPUS
    applying = []
    for spec in SPECS:
        if spec.method == GPU_FREED:
            continue
        prep = spec.applies(ctx)
        if prep is None:
            continue
        applying.append((spec, prep))
        if early and spec.edits_stream:
            runs = _start_runs(ctx, spec, prep)
            if runs is not None:
                started[spec.id] = runs
    return applying


def _build_all(
    ctx: Context,
    applying: list[tuple[RemedySpec, Any]],
    progress: Progress,
    done: dict[str, Any],
    started: Started,
) -> list[Remedy]:
    """Every applicable spec's remedies, in their order.  Their runs: one task per run,
    named ``SPEC/RUN`` (each builds its edited stream where it runs, and drops it),
    side by side on a pool, the edited streams first (the longest); serially for a small
    case; ``done``: answers of tasks already run (beside the judgement); ``started``:
    the runs of specs already started (:func:`_applying`), by spec id.  With the
    compiled model the pool is threads of this process (its simulations run without the
    GIL, the edits are numpy's): nothing forks while the half batch's prediction, started
    in :func:`.catalogue.gather`, runs beside it.  While the pool runs, the specs that
    need none of its runs are built here (the batch prediction, whose own draws go to
    threads too)."""
    tasks: dict[str, Callable[[], Any]] = {}
    owner: dict[str, tuple[str, str]] = {}
    for spec, prep in sorted(applying, key=lambda sp: not sp[0].edits_stream):
        if spec.id in started:
            continue
        for name, run in spec.runs(ctx, prep).items():
            tasks[f"{spec.id}/{name}"] = run
            owner[f"{spec.id}/{name}"] = (spec.id, name)
    keys = [key for key in tasks if key not in done]
    waiting = {owner[key][0] for key in keys} | set(started)
    got = dict(done)
    answers: dict[str, dict[str, Any]] = {}

    def ran(spec: RemedySpec) -> dict[str, Any]:
        if spec.id in answers:
            return answers[spec.id]
        return {owner[k][1]: got[k] for k in tasks if owner[k][0] == spec.id}

    built: dict[str, list[Remedy]] = {}
    native = native_sim.use_native()
    with parallel.pmap_async(
        lambda key: tasks[key](),
        keys,
        work=parallel.simulation_work(ctx.n, native),
        threads=native,
    ) as pool:
        if native and (pool.pooled or started):
            for spec, prep in applying:
                if spec.id not in waiting:
                    built[spec.id] = spec.build(ctx, prep, ran(spec))
        # The runs started early (the cancel stops them too), then the pool's.
        for i, (sid, (names, pending)) in enumerate(started.items()):
            progress.update("allocator", i / (len(started) + 1))
            answers[sid] = dict(zip(names, pending.result(Progress(None, progress.cancel_event))))
        got.update(zip(keys, pool.result(progress, "allocator")))
    return [
        r
        for spec, prep in applying
        for r in (built[spec.id] if spec.id in built else spec.build(ctx, prep, ran(spec)))
    ]


def advise(
    case: Case, batch: int | None = None, limit: int | None = None, progress: Progress | None = None
) -> Advice:
    """The remedies for ``case`` (a what-if Case), ranked by predicted peak reserved.

    ``batch``: the recorded batch size (gives ``largest_batch_that_fits``);
    ``limit``: bytes allowed (default: the recording's, else the GPU's memory).
    """
    progress = progress or Progress()
    # The runs that need no judgement start first, on threads beside it (the compiled
    # model runs without the GIL); taken before this process simulates or forks a pool.
    early = _before_judgement(case, batch, limit)
    keys = list(early)
    done: dict[str, Any] = {}
    with parallel.pmap_async(
        lambda key: early[key](),
        keys,
        work=parallel.simulation_work(len(case.requests), native=True),
        threads=True,
        jobs=_jobs_beside_judgement(len(keys)),
    ) as beside:

        def judged() -> SimResult | None:
            done.update(zip(keys, beside.result(Progress(None, progress.cancel_event))))
            return done.get(LIMITED_RUN)

        ctx = gather(case, batch, limit, progress, judged)
    try:
        return _advice(case, batch, ctx, progress, done)
    finally:
        ctx.close()


def _advice(
    case: Case, batch: int | None, ctx: Context, progress: Progress, done: dict[str, Any]
) -> Advice:
    """:func:`advise`'s answer once its context is gathered (``done``: the answers of the
    runs made beside the judgement)."""
    # The case keeps the recorded run (Case.recorded_run); the context the baseline.
    done.pop(RECORDED_RUN, None)
    done.pop(LIMITED_RUN, None)
    progress.update("allocator", 0.0)
    # What else holds the GPU is no change of the program: judged apart, below.
    started: Started = {}
    try:
        applying = _applying(ctx, started)
        remedies = _build_all(ctx, applying, progress, done, started)
    finally:  # an error or a cancel: the runs started early stop (none after their answers)
        for _names, pending in started.values():
            pending.close()
    lim = ctx.limit
    if lim is not None:
        for r in remedies:
            rng = r.predicted_peak_reserved_range
            r.range_holds_limit = rng is not None and rng[0] <= lim < rng[1]
    # A remedy that saves nothing is no remedy, unless it makes an OOM run fit.
    considered = len(remedies)
    remedies = [r for r in remedies if r.saving_bytes > 0 or (ctx.cut and r.fits)]
    notes = _notes(ctx, remedies, considered)
    # A rank of sharded training: what it holds of the model, and what more ranks would.
    bd = ctx.evd.breakdown
    at_event = ctx.at_event
    sharding = bd.sharding(at_event) if bd is not None and 0 <= at_event < bd.n_events else None
    if sharding is not None:
        notes.append(sharding.note())
    fragmentation = ctx.cut and getattr(ctx.recorded.first_oom, "kind", None) == "fragmentation"
    # The order follows the verdict: a fragmentation OOM leads with what removes the
    # fragmentation (allocator settings), then the rest by predicted peak.
    remedies.sort(
        key=lambda r: (
            not (fragmentation and r.remedy.startswith("allocator:")),
            r.predicted_peak_reserved_bytes,
            r.method != SIMULATED,
        )
    )
    progress.update("search", 1.0)
    gpu = [
        r
        for spec in SPECS
        if spec.method == GPU_FREED
        for r in spec.build(ctx, spec.applies(ctx), {})
    ]
    if gpu:
        # Another process (or memory outside the allocator) is the cause: those remedies
        # first; allocator settings only where they make the run fit as it is.
        remedies = gpu + [r for r in remedies if not r.remedy.startswith("allocator:") or r.fits]
    safe, search, near = ctx.safe, ctx.search, ctx.near
    return Advice(
        device=case.device,
        recorded_peak_reserved_bytes=case.recorded_peak,
        needed_peak_reserved_bytes=ctx.peak,
        memory_limit_bytes=lim,
        limit_source=ctx.limit_source,
        verdict=_verdict(ctx),
        split_at_peak=ctx.split,
        remedies=remedies,
        moment=ctx.moment,
        fragmentation=fragmentation,
        notes=notes,
        largest_scale_that_fits=float(safe.scale) if safe is not None else None,
        largest_batch_that_fits=safe.batch if safe is not None else None,
        recorded_batch=batch,
        search_capped=bool(search and search.capped and near is not None and not near.stepped_down),
        batch_workspaces=int(ctx.judgement.uncertain_workspace.sum()),
        near_limit=near,
        batch_not_judged=ctx.batch_not_judged,
        sharding=sharding.to_dict() if sharding is not None else None,
    )


def _notes(ctx: Context, remedies: list[Remedy], considered: int) -> list[str]:
    """What the user should know about the remedies found (or not found)."""
    floor, peak = ctx.floor, ctx.peak
    notes = []
    floor_sets_peak = bool(floor) and floor >= peak // 2
    if floor_sets_peak:
        notes.append(
            f"{fb(floor)} of the {fb(peak)} peak was reserved before the recording "
            "started, and predictions keep it: record from the program's start "
            "(capture before the first CUDA allocation) to judge what a change saves"
        )
    if not remedies and considered:
        # The evidence was there (the split above may show what scales with the batch),
        # but every change tried on it left the peak where it is.
        why = (
            "what was reserved before the recording, which predictions keep"
            if floor_sets_peak
            else "memory none of them removes"
        )
        notes.append(
            f"{plural(considered, 'change')} tried on this recording, none lowers "
            f"its peak reserved: the peak is set by {why}"
        )
    elif not remedies:
        notes.append(
            "no remedy has its evidence in this recording (nothing that scales "
            "with the batch, no saved activations, nothing kept each iteration)"
        )
    return notes


def _verdict(ctx: Context) -> str:
    """The verdict line: the OOM (the whole GPU's first where others held it), an OOM
    outside the allocator, or the peak against the limit."""
    recorded, held, outside = ctx.recorded, ctx.held_by_others, ctx.outside
    peak, lim, lim_source = ctx.peak, ctx.limit, ctx.limit_source
    if held is not None and recorded.first_oom is not None:
        # The verdict every view shows for this OOM (summary, the GUI's banner): the
        # whole GPU first, then the allocator's judgement within what it could have had.
        # Its event among the device's (summary's): the model's first OOM under a limit
        # the device lowered during the run (other processes grew) can come earlier.
        trace = ctx.snap.trace
        event = int(np.count_nonzero(trace.device[: held.event_index] == held.device))
        return f"out of memory at event {event}: {held.verdict}"
    if recorded.first_oom is not None:
        return (
            f"out of memory at event {recorded.first_oom.event}: {oom_verdict(recorded.first_oom)}"
        )
    if outside is not None:
        return f"out of memory outside the allocator: {outside.verdict}"
    if lim is not None and peak > lim:  # a limit below the recorded run's own
        return f"does not fit: peak reserved {fb(peak)} is above the limit {fb(lim)} ({lim_source})"
    if lim is not None:
        return f"fits: peak reserved {fb(peak)} of {fb(lim)} ({lim_source})"
    return f"peak reserved {fb(peak)}; no memory limit known"


def format_peak(r: Remedy) -> str:
    """The predicted peak as people should read it: ``1.36 GiB (estimate, 1.10 - 1.55
    GiB)`` with a range, ``1.71 GiB (estimate)`` estimated without one, else exact."""
    return peak_text(
        r.predicted_peak_reserved_bytes, r.predicted_peak_reserved_range, r.is_estimate
    )


def peak_text(predicted: int, rng, is_estimate: bool) -> str:
    """:func:`format_peak` of a remedy's three fields (its JSON's
    ``predicted_peak_reserved_bytes``, ``_range`` and ``predicted_peak_is_estimate``)."""
    text = fb(predicted)
    if rng is not None:
        # A range whose ends read the same is one value (labelled, not a range).
        span = batch_scale.range_words(*rng)
        if span is not None:
            return f"{text} (estimate, {span})"
    return f"{text} (estimate)" if is_estimate else text


def peak_words(recorded: int, needed: int) -> str:
    """The recorded peak and, where it differs, the peak the run needs, each named (an
    :class:`Advice`'s two figures): the words of the CLI, the Diagnosis panel and the
    HTML report."""
    text = f"recorded peak reserved {fb(recorded)}"
    if needed != recorded:
        text += f"; needed to run through {fb(needed)} (simulated, savings count from it)"
    return text


def split_lines(advice: Advice) -> list[str]:
    """The memory at the advice's instant in words, two axes of the same bytes: what it
    is (the categories, the words of ``summary`` and the header) and how it scales with
    the batch (what a smaller batch would change)."""
    s = advice.split_at_peak
    at = advice.moment + (
        f" (event {s['event']})" if s.get("event") is not None and s["event"] >= 0 else ""
    )
    out = []
    if s.get("categories") is not None:
        out.append(f"{at}: {format_split(s['categories'])}")
        at = "  of which"
    before = (
        f", {fb(s['before_recording'])} from before the recording"
        if s.get("before_recording")
        else ""
    )
    out.append(
        f"{at}: {fb(s['scales_with_batch'])} scales with the batch, "
        f"{fb(s['model_state'])} model state ({fb(s['optimizer_state'])} optimizer "
        f"state), {fb(s['other_fixed'])} other fixed{before}"
    )
    return out


def batch_not_judged_words(a: Advice) -> str:
    """The batch line when no batch is judged (:attr:`Advice.batch_not_judged`): the
    CLI's and the Diagnosis panel's words."""
    return f"largest batch that fits: not judged: {a.batch_not_judged}"


def format_text(advice: Advice) -> str:
    """The CLI's text: verdict, split at the peak, ranked remedies, largest fitting batch."""
    a = advice
    lim = f"{fb(a.memory_limit_bytes)} ({a.limit_source})" if a.memory_limit_bytes else "none"
    peaks = peak_words(a.recorded_peak_reserved_bytes, a.needed_peak_reserved_bytes)
    lines = [
        f"device {a.device}: {peaks}; memory limit {lim}",
        f"verdict: {a.verdict}"
        + ("" if a.memory_limit_bytes is not None else " (give --memory-limit)"),
    ]
    lines += split_lines(a)
    if a.largest_scale_that_fits is not None:
        more = " or more (search stopped at 64x)" if a.search_capped else ""
        doubt = a.batch_in_doubt
        est = f"; an estimate: {doubt}" if a.largest_batch_is_estimate else ""
        near = (
            ("; " + batch_scale.near_limit_words(a.near_limit)) if a.near_limit is not None else ""
        )
        if a.largest_batch_that_fits is not None:
            lines.append(
                f"largest batch that fits: {a.largest_batch_that_fits}{more} "
                f"(recorded {a.recorded_batch}; scale {a.largest_scale_that_fits:.3g}"
                f"{est}){near}"
            )
        else:
            lines.append(
                f"largest batch scale that fits: {a.largest_scale_that_fits:.3g}{more} "
                f"(pass --batch N for a batch size{est}){near}"
            )
    elif a.batch_not_judged is not None:
        lines.append(batch_not_judged_words(a))
    elif a.near_limit is not None and a.near_limit.search.scale is not None:
        lines.append(
            "no batch size fits with room to spare; " + batch_scale.near_limit_words(a.near_limit)
        )
    elif a.memory_limit_bytes is not None:
        lines.append(
            "no batch size fits: the memory that does not scale with the batch is over the limit"
        )
    rows = [("#", "remedy", "peak reserved", "saving", "fits", "method")]
    for k, r in enumerate(a.remedies, 1):
        rows.append((str(k), r.title, format_peak(r), fb(r.saving_bytes), r.fits_word, r.method))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    if not a.remedies:
        rows = []
    elif a.remedies[0].method == GPU_FREED:
        lines.append("remedies, what else holds the GPU first, then by predicted peak reserved:")
    elif a.fragmentation and a.remedies[0].remedy.startswith("allocator:"):
        lines.append("remedies, the fragmentation's first, then by predicted peak reserved:")
    else:
        lines.append("remedies, ranked by predicted peak reserved:")
    for row in rows:
        lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    for k, r in enumerate(a.remedies, 1):
        hint = (
            " (pass --batch N for the exact size)"
            if r.remedy == "smaller_batch"
            and r.batch is None
            and a.recorded_batch is None
            and r.batch_scale not in (None, 0.5)
            else ""
        )
        lines.append(f"  {k}. {r.change}{hint}" + (f"  [{r.where}]" if r.where else ""))
    lines += [f"note: {t}" for t in a.notes]
    return "\n".join(lines)
