"""What advise gathers before any remedy, and the runs the remedies read.

:func:`gather` makes the :class:`Context` every spec of the catalogue reads: the
evidence and the batch judgement, the limit, the peak the run needs, the instant and
the split at it (:mod:`..split`), the segments reserved before the recording (the
floor every prediction keeps) and the largest batch that fits (:mod:`..batch_scale`'s
search, which the advice reports whether or not a smaller batch is a remedy).

An edited stream of a long recording is hundreds of MB: each is built, simulated and
dropped inside one task of advise's pool (a thread, a worker, or this process one at a
time), which answers only what the remedies read of its run (:class:`Run`).  The half
batch's prediction, which needs the judgement and nothing after it, starts on a thread
as soon as the judgement is made (:attr:`Context.half_ahead`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from ...analysis.oom import OomReport, OutsideOom, last_oom, outside_oom
from ...core import parallel
from ...core.progress import Progress
from ...core.units import format_bytes as fb
from ...whatif import Case
from ...whatif.run import SimResult
from ...whatif.run import simulate as simulate_requests
from .. import batch_scale, evidence, scaling, split

HALF = Fraction(1, 2)  # the smaller batch's remedy where no search finds one


def demand(case: Case, result: SimResult, limit: int | None) -> int:
    """Peak reserved the run needs: under the limit when it fits, else without a limit
    (the run truncated at its OOM would understate it)."""
    if result.first_oom is None or limit is None:
        return result.peak_reserved_until_oom
    return simulate_requests(case.requests, result.config, None, case.gpu_bytes).peak_reserved


def fits(result: SimResult, limit: int | None) -> bool | None:
    """The run stays under ``limit`` without an OOM (None: no limit known)."""
    if limit is None:
        return None
    return result.first_oom is None and result.peak_reserved_until_oom <= limit


@dataclass
class Run:
    """A run as a simulated remedy reads it."""

    reserved: np.ndarray  # the curve: reserved after each request
    demand: int  # :func:`demand`
    fits: bool | None  # :func:`fits`
    curve_x: np.ndarray | None  # the stream's trace events; None: the recorded stream's

    @classmethod
    def of(cls, result: SimResult, case: Case, limit: int | None) -> Run:
        """The run ``result`` of ``case``'s stream (the recorded one or a scaled one)."""
        return cls(
            result.reserved, demand(case, result, limit), fits(result, limit), case.curve_x()
        )


def run_of_prediction(pred: batch_scale.BatchPrediction, case: Case, limit: int | None) -> Run:
    """:meth:`Run.of` a batch prediction's run (``pred`` under ``limit``, of ``case``'s
    stream scaled), without the scaled stream again: the prediction's peak is the run's
    :func:`demand` already (its run without the limit after an OOM), and a scaled stream
    keeps the recorded rows, so its curve's x is ``case``'s."""
    result = pred.result
    return Run(result.reserved, pred.peak, fits(result, limit), case.curve_x())


def run_edited(edited: Case, case: Case, limit: int | None) -> Run:
    """The run of an edited stream of ``case``, as a pool task sends it back."""
    res = edited.simulate(None, limit)
    cx = edited.curve_x()
    # A stream with its rows unchanged shares the recorded x: not sent back, not copied.
    return Run(
        res.reserved,
        demand(edited, res, limit),
        fits(res, limit),
        None if cx is case.curve_x() else cx,
    )


def peak_of(edited: Case, limit: int | None) -> int:
    """The peak reserved an edited stream needs (:func:`demand` of its run)."""
    return demand(edited, edited.simulate(None, limit), limit)


def most_common_user_frame(snap, sites: np.ndarray) -> str | None:
    """The program's own line (:func:`..evidence.user_frame`) most of ``sites`` ran at:
    where a remedy's change is made."""
    counts: dict[str, int] = {}
    for s in np.unique(sites).tolist():
        w = evidence.user_frame(snap, int(s))
        if w:
            counts[w] = counts.get(w, 0) + int((sites == s).sum())
    return max(counts, key=counts.__getitem__) if counts else None


@dataclass
class Context:
    """What every remedy spec reads of one recording (made once by :func:`gather`)."""

    case: Case
    batch: int | None  # the recorded batch size, when given
    limit: int | None  # the limit judged against (given, recorded, or the GPU's)
    limit_source: str
    evd: evidence.Evidence
    judgement: scaling.Judgement
    recorded: SimResult  # the recorded run, as the model replays it
    # The peak reserved the run needs (:func:`demand`): savings count from it.
    peak: int
    at: int  # request of the instant the split describes
    at_event: int  # its trace event
    moment: str  # "at the OOM" / "at the peak"
    split: dict
    # Segments reserved before the recording: every prediction keeps them.
    floor: int
    outside: OutsideOom | None  # the OOM outside the allocator this dump was taken at
    batch_not_judged: str | None  # why no batch is judged to fit (such an OOM)
    search: batch_scale.FitSearch | None  # the largest scale that fits (None: no limit)
    near: batch_scale.SafeAnswer | None  # its margin to the limit, and the batch after it
    # The half batch's prediction, started beside the rest of the context where it will
    # most likely be the smaller batch's remedy (:func:`gather`); None: made when asked for.
    half_ahead: parallel.Pending | None = None

    def half_batch(self) -> batch_scale.BatchPrediction:
        """The prediction at half the recorded batch under the limit (the smaller batch's
        remedy where no search found a smaller one that fits)."""
        if self.half_ahead is not None:
            pending, self.half_ahead = self.half_ahead, None
            return pending.result()[0]
        return batch_scale.predict(self.case, self.judgement, HALF, self.limit, None, self.batch)

    def close(self) -> None:
        """Stop what was started beside and never asked for."""
        if self.half_ahead is not None:
            self.half_ahead.close()
            self.half_ahead = None

    @property
    def snap(self):
        return self.case.snap

    @property
    def n(self) -> int:
        """Requests in the recorded stream."""
        return len(self.case.requests)

    @property
    def cut(self) -> bool:
        """The recorded run ran out of memory and was cut at its OOM: an edited stream
        shows nothing of what a change does after it, so the remedies that edit the
        stream estimate from the split at the OOM instead of simulating."""
        return self.recorded.first_oom is not None

    @cached_property
    def activations(self) -> np.ndarray:
        """Allocations that are activations (what checkpointing and autocast act on): by
        category when known, else those that scale with the batch made in forward."""
        if self.evd.categories is not None:
            return self.evd.category_in("activation")
        return self.judgement.scales & (self.evd.phase == evidence.FORWARD)

    @cached_property
    def activations_where(self) -> str | None:
        """The program's line most activations were made at (the forward to change)."""
        return most_common_user_frame(self.snap, self.evd.site[self.activations])

    @cached_property
    def held_by_others(self) -> OomReport | None:
        """The recorded OOM's report (:mod:`...analysis.oom`) when the device was full
        because of other processes or memory outside the allocator (``gpu_shortfall``);
        else None."""
        if self.recorded.first_oom is None:
            return None
        report = last_oom(self.snap)
        if report is None or report.device != self.case.device or report.gpu_shortfall is None:
            return None
        return report

    @property
    def safe(self) -> batch_scale.BatchPrediction | None:
        """The largest batch judged to fit with its uncertainty below the limit."""
        return self.near.safe if self.near is not None else None


def batch_not_judged(outside: OutsideOom | None, lim: int | None) -> str | None:
    """Why no batch is judged to fit, after an OOM outside the allocator: the limit then
    is what the allocator held plus the GPU's free memory, which the recorded batch stayed
    within and still died of the library's allocation (whose size the recording does not
    hold); None otherwise."""
    if outside is None or lim is None:
        return None
    free = (
        f", {fb(outside.device_free_bytes)} free on the GPU"
        if outside.device_free_bytes is not None
        else ""
    )
    return (
        f"the run died outside PyTorch's allocator ({outside.library}{free}): the "
        f"{fb(lim)} limit counts the allocator alone, within which the recorded batch "
        "stayed and still failed, so no batch is judged to fit it"
    )


@dataclass
class Basis:
    """What advise knows of a recording before judging it: the case, the batch and the
    limit (:class:`Context`'s first fields, the same values).  A spec whose ``applies``
    and ``simulations`` read no more (the recorded stream at other settings) names its
    runs on it, and they start beside the judgement (:func:`..advise.advise`)."""

    case: Case
    batch: int | None
    limit: int | None
    limit_source: str

    @classmethod
    def of(cls, case: Case, batch: int | None, limit: int | None) -> Basis:
        """``limit`` as :func:`..advise.advise` takes it (judged as :func:`gather` does)."""
        return cls(case, batch, *case.effective_limit(limit))


def gather(
    case: Case,
    batch: int | None,
    limit: int | None,
    progress: Progress,
    judged: Callable[[], SimResult | None] | None = None,
) -> Context:
    """The :class:`Context` of ``case`` (stages ``judge`` and ``search`` of ``progress``);
    ``limit`` as :func:`..advise.advise` takes it; ``judged()``, where given, is called
    once the evidence and the batch judgement are made, before the first simulation
    (advise takes the runs it started beside them there), and answers the recorded
    stream's run under the judged limit where it was made there (None: made here)."""
    lim, lim_source = case.effective_limit(limit)
    progress.update("judge", 0.0)
    evd = evidence.gather(case)
    j = scaling.judge(case, batch, evd)
    ready = judged() if judged is not None else None
    base = ready if ready is not None else case.simulate(None, lim)
    recorded = case.recorded_run()
    outside = outside_oom(case.snap) if recorded.first_oom is None else None
    if outside is not None and outside.device not in (None, case.device):
        outside = None
    unjudged = batch_not_judged(outside, lim) if limit is None else None
    searching = lim is not None and unjudged is None
    # The smaller batch's remedy is the half batch unless the search finds a smaller one
    # that fits: certainly without a search, almost always when the recorded batch fits
    # (unless its margin is too thin).  Its runs start now, beside the split, the search
    # and the other remedies' evidence (none of them forks); unused, they are stopped.
    half_ahead = (
        batch_scale.predict_beside(case, j, HALF, lim, batch)
        if (not searching or fits(base, lim)) and batch_scale.anything_scales(case, j)
        else None
    )
    try:
        # The baseline is what the run needs: after an OOM, its peak without a limit
        # (the failed request served), so savings compare demands, not truncated runs.
        peak = demand(case, base, lim)
        at, at_event, moment_name = split.moment(case, evd, recorded)
        split_then = split.split_at(case, evd, j, at, at_event)
        progress.update("search", 0.0)
        sub = Progress(lambda s, f: progress.update("search", f), progress.cancel_event)
        search = (
            batch_scale.largest_fitting_scale(case, j, lim, None, batch, 0.01, sub)
            if searching
            else None
        )
        # The safe answer: below the point answer while its uncertainty reaches the limit.
        near = (
            batch_scale.safe_answer(case, j, search, None, batch, 0.01, sub)
            if search is not None
            else None
        )
    except BaseException:
        if half_ahead is not None:
            half_ahead.close()
        raise
    return Context(
        case=case,
        batch=batch,
        limit=lim,
        limit_source=lim_source,
        evd=evd,
        judgement=j,
        recorded=recorded,
        peak=peak,
        at=at,
        at_event=at_event,
        moment=moment_name,
        split=split_then,
        floor=split.reserved_before_recording(case),
        outside=outside,
        batch_not_judged=unjudged,
        search=search,
        near=near,
        half_ahead=half_ahead,
    )
