"""Which change would make this run fit: remedies, each with a predicted peak, ranked.

Simulated remedies run the recorded request stream, edited, through the
allocator model (:mod:`..whatif`), so caching and fragmentation are part of
the answer:

* ``smaller_batch``: the largest batch that fits the limit (or half the
  batch when there is no limit), via :mod:`.batch_scale`;
* ``allocator:SETTINGS``: other ``PYTORCH_CUDA_ALLOC_CONF`` settings (the
  what-if standard set; the best few that lower the peak);
* ``free_kept``: drop what is kept every iteration (a leak in training;
  outputs and their graphs kept by an evaluation loop without ``no_grad``):
  what the program's own line makes only to keep (``.detach().clone()``) is not
  made, the rest is freed at its iteration's end; an evaluation loop is told to
  use ``no_grad`` too, and its graphs are freed as :mod:`.no_grad` frees them;
* ``no_grad_forward``: forwards whose graph no backward uses (:mod:`.no_grad`);
* ``8bit_optimizer``: the optimizer state's allocations at a quarter of their
  bytes, with a range down to the run without state nor step temporaries (SGD
  without momentum): another optimizer makes other temporaries.

Estimated remedies (the change alters what the recording cannot show; labelled
``estimated``, each with a range of the predicted peak reserved) are bounded by
runs of edited streams too (:mod:`.changes`), so the range is in reserved bytes,
segment caching included:

* ``gradient_checkpointing``: the repeated blocks' saved activations removed but
  one block's (recomputed one at a time), and besides keeping each block's
  largest saved tensor (the block input a checkpoint keeps is at most that
  large); the point is the middle, the range's top adds one block's bytes made
  again in backward where the cache may have no room;
* ``bf16_autocast``: activations and temporaries of autocast's bf16 ops halved,
  of its fp32 ops kept, the rest at three quarters, plus bf16 weight copies; the
  range goes from every activation halved to nothing saved but the copies added;
* ``set_to_none``: the gradients live at a peak in the forward pass (with
  the categories package: gradients zeroed in place stay allocated), the range
  up to the recorded peak (freed segments may stay cached).

The live bytes at the peak are split by the batch-scaling judgement
(:mod:`.scaling`): activations = allocations that scale with the batch and
were made in forward; model state = parameters, optimizer state and
gradients-by-size; the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import partial
from typing import Any, Callable

import numpy as np

from ..analysis.gpu_accounting import GpuHolder
from ..analysis.oom import last_oom, outside_oom, releasable_bytes
from ..categories.sharded import world_size
from ..core import parallel
from ..core.progress import Progress
from ..core.units import format_bytes as fb
from ..core.units import plural
from ..whatif import RECOMMENDED, Case, native_sim
from ..whatif import requests as rq
from ..whatif.predictions import verdict as oom_verdict
from ..whatif.run import simulate as simulate_requests
from . import batch_scale, changes, evidence, scaling

SIMULATED, ESTIMATED = "simulated", "estimated"
# A remedy that changes what else holds the GPU, not the program: its peak is the
# program's own, unchanged; it fits because the memory the allocator can have rises.
GPU_FREED = "the limit rises"
ALLOCATOR_REMEDIES = 2  # how many allocator settings to list (the best that lower the peak)


def _workspace_note(pred: batch_scale.BatchPrediction) -> str:
    """``; estimate ...`` when cuDNN-like workspaces make a batch prediction an estimate
    (:func:`.batch_scale.is_estimate`); their range where its ends read apart, else the
    one value every size drawn gives."""
    est = pred.estimate
    if not pred.is_estimate or est is None:
        return ""
    span = batch_scale.range_words(est.low, est.high)
    return f"; estimate: {est.workspaces} library workspaces: {batch_scale.RANGE_WHAT}; " + (
        f"peak reserved {span}"
        if span
        else f"every size drawn gives the same peak reserved, {fb(est.low)}"
    )


@dataclass
class Remedy:
    """One change and what it is predicted to do."""

    remedy: str  # id: smaller_batch, allocator:..., free_kept, gradient_checkpointing, ...
    title: str
    predicted_peak_reserved_bytes: int
    saving_bytes: int
    method: str  # simulated | estimated
    change: str  # the one-line change to make
    where: str | None  # file:line of the code to change, when one exists
    fits: bool | None  # under the limit (None: no limit known)
    detail: str = ""
    # simulated reserved after each request
    curve: np.ndarray | None = field(default=None, repr=False)
    curve_x: np.ndarray | None = field(default=None, repr=False)  # trace event of each curve point
    acts_on: np.ndarray | None = field(default=None, repr=False)  # bool per request it changes
    # (low, high) of the predicted peak when it is an estimate with a range: a batch
    # prediction that hangs on library workspaces (cuDNN-like) whose size at another
    # batch is not in the recording, a simulated change that also alters what the
    # recording cannot show (another optimizer's temporaries), or an estimated remedy
    # (every one has a range, but where its ends are one value).  None: exact.
    predicted_peak_reserved_range: tuple[int, int] | None = None

    # A smaller-batch remedy's batch (None: the recorded batch is not known) and its
    # fraction of the recorded batch; None for every other remedy.
    batch: int | None = None
    batch_scale: float | None = None
    # A batch prediction the one rule (:func:`.batch_scale.is_estimate`) calls an estimate,
    # with or without a range.
    batch_estimate: bool = False
    # The limit lies inside the predicted range: whether it fits depends on where in the
    # range the real run lands ("maybe" where ``fits`` is said).
    range_holds_limit: bool = False
    # A remedy that frees the GPU (method GPU_FREED): the memory the allocator could have
    # had with the change made (None: not known, or another kind of remedy).
    limit_with_change_bytes: int | None = None

    @property
    def fits_word(self) -> str:
        """ "yes", "no", "maybe" (the limit inside the range) or "-" (no limit known)."""
        if self.fits is None:
            return "-"
        if self.range_holds_limit:
            return "maybe"
        return "yes" if self.fits else "no"

    @property
    def is_estimate(self) -> bool:
        """The predicted peak is an estimate (estimated method, a range, or a batch
        prediction that :func:`.batch_scale.is_estimate` calls one)."""
        return (
            self.method == ESTIMATED
            or self.predicted_peak_reserved_range is not None
            or self.batch_estimate
        )

    def acts_on_events(self, case: Case) -> np.ndarray:
        """Trace event indices (of the case's device) of the allocations this remedy changes."""
        if self.acts_on is None:
            return np.zeros(0, np.int64)
        return case.requests.event[self.acts_on]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("curve")
        d.pop("curve_x")
        d.pop("acts_on")
        d.pop("batch_estimate")
        rng = self.predicted_peak_reserved_range
        d["predicted_peak_reserved_range"] = list(rng) if rng is not None else None
        d["predicted_peak_is_estimate"] = self.is_estimate
        d["fits_word"] = self.fits_word  # the one decision every view shows
        return d


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


def _most_common_user_frame(snap, sites: np.ndarray) -> str | None:
    counts: dict[str, int] = {}
    for s in np.unique(sites).tolist():
        w = evidence.user_frame(snap, int(s))
        if w:
            counts[w] = counts.get(w, 0) + int((sites == s).sum())
    return max(counts, key=counts.__getitem__) if counts else None


def _parameters(evd: evidence.Evidence, j: scaling.Judgement) -> np.ndarray:
    """Allocations that are parameters: by category when known, else module state."""
    if evd.categories is not None:
        return evd.categories == "parameter"
    return j.rule == scaling.MODULE_STATE


def _optimizer_state(evd: evidence.Evidence, j: scaling.Judgement) -> np.ndarray:
    """Allocations that are optimizer state: by category when known, else kept optimizer
    allocations."""
    if evd.categories is not None:
        return evd.categories == "optimizer_state"
    return (j.rule == scaling.OPTIMIZER) & (evd.free_at == len(evd))


def moment(case: Case, evd: evidence.Evidence, recorded) -> tuple[int, int, str]:
    """(request index, trace event, name) of the instant the split describes: the
    recorded run's first OOM, else the first event at the peak of requested bytes - the
    instant ``summary`` calls "at the peak", so both give the same split."""
    reqs = case.requests
    if recorded.first_oom is not None:
        r = int(recorded.first_oom.request)
        return r, int(reqs.event[r]) if 0 <= r < len(reqs) else -1, "at the OOM"
    bd = evd.breakdown
    if bd is not None and bd.n_events:
        k = int(np.argmax(bd.requested))
        r = int(np.searchsorted(reqs.event, k, side="right")) - 1
        return max(r, 0), k, "at the peak"
    r = int(np.argmax(recorded.allocated)) if len(recorded.allocated) else 0
    return r, int(reqs.event[r]) if 0 <= r < len(reqs) else -1, "at the peak"


def split_at(
    case: Case, evd: evidence.Evidence, j: scaling.Judgement, request: int, event: int | None = None
) -> dict:
    """Requested bytes live after ``request`` (trace event ``event``), split two ways
    that add up to the same total:

    * ``categories``: what the memory is (parameter, activation, ...), the split
      ``summary`` and the header give at the same event (None without categories);
    * how it scales with the batch: ``scales_with_batch`` + ``model_state`` +
      ``other_fixed`` + ``before_recording`` (live blocks allocated before the
      recording started, whose requests the window does not hold).

    ``activations`` (the category's bytes) is what checkpointing and autocast act on;
    ``activations_forward`` (scales with the batch, made in forward) is the same idea
    judged without categories."""
    reqs = case.requests
    n = len(reqs)
    idx = np.arange(n)
    live = (reqs.kind == rq.ALLOC) & (idx <= request) & (evd.free_at > request)
    scales = j.scales
    state_rules = (
        np.isin(
            j.rule,
            (
                scaling.MODULE_STATE,
                scaling.OPTIMIZER,
                scaling.STATE_SIZE,
                scaling.CATEGORY_FIXED,
                scaling.KEPT_ONCE,
            ),
        )
        & ~scales
    )
    recorded_live = int(reqs.size[live].sum())
    cats: dict[str, int] | None = None
    bd = evd.breakdown
    if bd is not None and event is not None and 0 <= event < bd.n_events:
        cats = bd.split_at(event)
    elif evd.categories is not None:
        cats = {}
        for name in np.unique(evd.categories[live]).tolist():
            if name:
                cats[name] = int(reqs.size[live & (evd.categories == name)].sum())
    if cats is not None:
        before = max(sum(cats.values()) - recorded_live, 0)
    else:
        before = (
            int(reqs.initial.blk_requested[reqs.initial.blk_state == 0].sum())
            if reqs.initial.n_blocks
            else 0
        )
    activations = (
        int(reqs.size[live & (evd.categories == "activation")].sum())
        if evd.categories is not None
        else int(reqs.size[live & scales & (evd.phase == evidence.FORWARD)].sum())
    )
    out = {
        "categories": cats,
        "scales_with_batch": int(reqs.size[live & scales].sum()),
        "activations": activations,
        "activations_forward": int(
            reqs.size[live & scales & (evd.phase == evidence.FORWARD)].sum()
        ),
        "model_state": int(reqs.size[live & state_rules].sum()),
        "optimizer_state": int(reqs.size[live & _optimizer_state(evd, j)].sum()),
        "kept_each_iteration": int(reqs.size[live & (j.rule == scaling.KEPT_EACH)].sum()),
        "other_fixed": int(reqs.size[live & ~scales & ~state_rules].sum()),
        "before_recording": before,
        "event": event,
    }
    return out


def _reserved_before_recording(case: Case) -> int:
    """Bytes of the segments the device held when the recording started: a prediction
    made from the window keeps them (it cannot tell what made them)."""
    return int(case.requests.initial.seg_size.sum())


def _iterations_spanned(evd: evidence.Evidence, mask: np.ndarray, reqs) -> int:
    """How many distinct iterations the requests of ``mask`` were made in (0: no
    iterations known)."""
    bd = evd.breakdown
    its = bd.iterations if bd is not None else None
    if its:
        starts = np.array([it.start for it in its], np.int64)
        ev = reqs.event[mask]
        inside = np.searchsorted(starts, ev, side="right") - 1
        return int(len(np.unique(inside[inside >= 0])))
    if evd.n_iterations:
        return int(len(np.unique(evd.iteration[mask & (evd.iteration >= 0)])))
    return 0


def _repeated_sites(evd: evidence.Evidence, mask: np.ndarray) -> bool:
    """Two or more allocations of ``mask`` share one call stack: the same code ran more
    than once (the repeated blocks of a model, whose saved activations checkpointing
    recomputes)."""
    sites = evd.site[mask]
    sites = sites[sites >= 0]
    return bool(len(sites)) and int(np.unique(sites, return_counts=True)[1].max()) >= 2


def _kept_each_iteration(case: Case, evd: evidence.Evidence, j: scaling.Judgement) -> np.ndarray:
    """Allocations the program keeps every iteration: never freed, growing with the batch,
    two or more from one call site (whatever rule judged them: the categories call kept
    graphs activations), with that site's last ones that the recording's end cut off."""
    reqs = case.requests
    n = len(reqs)
    never = (reqs.kind == rq.ALLOC) & (evd.free_at == n)
    if not never.any():
        return never
    cut = scaling.cut_off(reqs, evd, never)
    cand = never & ~cut & j.scales
    sites, counts = np.unique(evd.site[cand], return_counts=True)
    keeping = sites[counts >= 2]
    return never & j.scales & np.isin(evd.site, keeping)


def _demand(case, result, limit) -> int:
    """Peak reserved the run needs: under the limit when it fits, else without a limit
    (the run truncated at its OOM would understate it)."""
    if result.first_oom is None or limit is None:
        return result.peak_reserved_until_oom
    return simulate_requests(case.requests, result.config, None, case.gpu_bytes).peak_reserved


def _autocast_seen(case: Case, evd: evidence.Evidence, j: scaling.Judgement) -> bool:
    """The recording already runs under autocast: its forward passes make half-size copies
    of the weights (bf16 / fp16 casts of fp32 parameters) - of at least half the distinct
    parameter sizes, so that activations that happen to have such a size do not count.
    Without categories: many forward allocations of a model-state tensor's size."""
    reqs = case.requests
    alloc = reqs.kind == rq.ALLOC
    if evd.categories is not None and (evd.categories == "parameter_gathered").any():
        return not _sharded_in_full_precision(case, evd)
    if evd.categories is not None:
        params = alloc & (evd.categories == "parameter")
        sizes = np.unique(reqs.size[params])
        halves = sizes[sizes % 2 == 0] // 2
        if len(halves) >= 2:
            fwd = alloc & (evd.phase == evidence.FORWARD) & ~params
            return int(np.isin(halves, reqs.size[fwd]).sum()) >= len(halves) / 2
    return int((j.rule == scaling.STATE_SIZE)[evd.phase == evidence.FORWARD].sum()) > 8


def _sharded_in_full_precision(case: Case, evd: evidence.Evidence) -> bool:
    """Sharded training (FSDP) gathers each block's parameters from every rank, in bf16 /
    fp16 under a mixed-precision policy: a gathered tensor is ``world`` times a shard kept
    to the end (padded to a multiple of the ranks) in full precision, half that when
    gathered in half precision.  Whichever most gathered allocations of a forward match
    decides (FSDP1 also makes full-precision buffers once, lazily, in the first forward).
    Without the number of ranks (the capture's sidecar) it cannot be told: False."""
    world = world_size(case.snap.sidecar)
    if world is None or evd.category_reasons is None:
        return False
    reqs = case.requests
    alloc = reqs.kind == rq.ALLOC
    gathered = reqs.size[
        alloc & (evd.categories == "parameter_gathered") & (evd.phase == evidence.FORWARD)
    ]
    unsharded = (
        np.unique(
            reqs.size[alloc & (evd.category_reasons == "param_shard") & (evd.free_at >= len(reqs))]
        )
        * world
    )
    if not len(gathered) or not len(unsharded):
        return False

    def matches(size: np.ndarray) -> np.ndarray:
        # A shard times the ranks is the unsharded tensor plus its padding (fewer than
        # ``world`` elements of at most 8 bytes).
        pos = np.minimum(np.searchsorted(unsharded, size), len(unsharded) - 1)
        return (unsharded[pos] >= size) & (unsharded[pos] - size < world * 8)

    return int(matches(gathered).sum()) > int(matches(gathered * 2).sum())


def _split_estimate(
    rid, title, peak, floor, lim, predicted, low, high, change, where, detail, acts_on
) -> Remedy:
    """An estimated remedy from the split at the peak, its range ``low`` - ``high``
    (the segments reserved before the recording stay: the floor)."""
    p = max(int(predicted), floor)
    lo, hi = min(max(int(low), floor), p), max(int(high), p)
    return Remedy(
        rid,
        title,
        p,
        peak - p,
        ESTIMATED,
        change,
        where,
        None if lim is None else p <= lim,
        detail,
        acts_on=acts_on,
        predicted_peak_reserved_range=(lo, hi) if lo < hi else None,
    )


def _is_fragmentation(case: Case, recorded) -> bool:
    """The recorded run's first OOM was one of fragmentation (free bytes enough, no block)."""
    return getattr(recorded.first_oom, "kind", None) == "fragmentation"


def _fits(result, limit) -> bool | None:
    if limit is None:
        return None
    return result.first_oom is None and result.peak_reserved_until_oom <= limit


# -- the edited streams' runs, made where the stream is built ----------------------------
# An edited stream of a long recording is hundreds of MB: each is built, simulated and
# dropped inside one task of advise's pool (a worker, or this process one at a time),
# which answers only what the remedies read of its run.


@dataclass
class _Run:
    """An edited stream's run as a simulated remedy reads it."""

    reserved: np.ndarray  # the curve: reserved after each request
    demand: int  # :func:`_demand`
    fits: bool | None  # :func:`_fits`
    curve_x: np.ndarray | None  # the stream's trace events; None: the recorded stream's


def _run(edited: Case, case: Case, lim: int | None) -> _Run:
    res = edited.simulate(None, lim)
    cx = edited.curve_x()
    # A stream with its rows unchanged shares the recorded x: not sent back, not copied.
    return _Run(
        res.reserved,
        _demand(edited, res, lim),
        _fits(res, lim),
        None if cx is case.curve_x() else cx,
    )


def _peak(edited: Case, lim: int | None) -> int:
    return _demand(edited, edited.simulate(None, lim), lim)


def _kept_freed_run(
    case: Case, evd: evidence.Evidence, kept: np.ndarray, eval_loop: bool, lim: int | None
) -> tuple[_Run, bool]:
    """The run of ``case`` keeping nothing across iterations (an evaluation loop's graphs
    freed too, where it has any), and whether they were."""
    freed = changes.kept_freed(case, evd, kept)
    # An evaluation loop is told to run under no_grad too: its prediction is of both
    # (the graphs the kept outputs held go as a no_grad forward frees them).
    graphs = changes.graphs_freed(freed) if eval_loop else None
    return _run(graphs or freed, case, lim), graphs is not None


def _no_grad_run(
    case: Case, evd: evidence.Evidence, lim: int | None
) -> tuple[str | None, str, np.ndarray, _Run] | None:
    """(where, detail, allocations, run) of the no-grad remedy; None: none."""
    from . import no_grad

    ng = no_grad.plan(case, evd)
    if ng is None:
        return None
    return ng.where, ng.detail, ng.allocations, _run(ng.case, case, lim)


def _optimizer_runs(
    case: Case, evd: evidence.Evidence, state: np.ndarray, lim: int | None
) -> tuple[_Run, int]:
    """The 8-bit optimizer's run, and the peak without state nor step temporaries."""
    eight, none = changes.optimizer_cases(case, evd, state)
    return _run(eight, case, lim), _peak(none, lim)


def _checkpoint_peaks(case: Case, blocks: changes.Blocks, lim: int | None) -> tuple[int, int]:
    low, high = changes.checkpoint_cases(case, blocks)
    return _peak(low, lim), _peak(high, lim)


def _autocast_peaks(
    case: Case, evd: evidence.Evidence, j: scaling.Judgement, lim: int | None
) -> tuple[int, int, np.ndarray]:
    """(point, low, data): the peaks of :func:`.changes.autocast_cases`' runs."""
    low, point, data = changes.autocast_cases(case, evd, j)
    return _peak(point, lim), _peak(low, lim), data


def advise(
    case: Case, batch: int | None = None, limit: int | None = None, progress: Progress | None = None
) -> Advice:
    """The remedies for ``case`` (a what-if Case), ranked by predicted peak reserved.

    ``batch``: the recorded batch size (gives ``largest_batch_that_fits``);
    ``limit``: bytes allowed (default: the recording's, else the GPU's memory).
    """
    progress = progress or Progress()
    snap = case.snap
    lim, lim_source = case.effective_limit(limit)
    progress.update("judge", 0.0)
    evd = evidence.gather(case)
    j = scaling.judge(case, batch, evd)
    base = case.simulate(None, lim)
    recorded = case.recorded_run()
    # The baseline is what the run needs: after an OOM, its peak without a limit
    # (the failed request served), so savings compare demands, not truncated runs.
    peak = _demand(case, base, lim)
    at, at_event, moment_name = moment(case, evd, recorded)
    split = split_at(case, evd, j, at, at_event)
    floor = _reserved_before_recording(case)
    remedies: list[Remedy] = []
    n = len(case.requests)

    def simulated(
        rid,
        title,
        result,
        change,
        where,
        detail="",
        scaled=None,
        acts_on=None,
        pred: batch_scale.BatchPrediction | None = None,
    ) -> Remedy:
        if isinstance(result, _Run):  # an edited stream's, answered where it was built
            p, fits = result.demand, result.fits
            cx = case.curve_x() if result.curve_x is None else result.curve_x
        else:
            p, fits = _demand(scaled or case, result, lim), _fits(result, lim)
            # A stream with requests removed has its own x (the trace events it kept).
            cx = (scaled or case).curve_x()
        rng = pred.range if pred is not None and pred.is_estimate else None
        return Remedy(
            rid,
            title,
            p,
            peak - p,
            SIMULATED,
            change,
            where,
            fits,
            detail,
            result.reserved,
            cx,
            acts_on,
            rng,
            batch_estimate=pred is not None and pred.is_estimate,
        )

    # -- smaller batch (simulated) ---------------------------------------------------
    progress.update("search", 0.0)
    sub = Progress(lambda s, f: progress.update("search", f), progress.cancel_event)
    outside = outside_oom(snap) if recorded.first_oom is None else None
    if outside is not None and outside.device not in (None, case.device):
        outside = None
    unjudged = _batch_not_judged(outside, lim) if limit is None else None
    search = (
        batch_scale.largest_fitting_scale(case, j, lim, None, batch, 0.01, sub)
        if lim is not None and unjudged is None
        else None
    )
    # The safe answer: below the point answer while its uncertainty reaches the limit.
    near = (
        batch_scale.safe_answer(case, j, search, None, batch, 0.01, sub)
        if search is not None
        else None
    )
    safe = near.safe if near is not None else None
    if evd.categories is not None and (evd.categories == "input").any():
        input_sites = evd.site[evd.categories == "input"]
    else:
        input_sites = evd.site[
            (j.rule == scaling.INPUT_ONCE)
            | (evd.user_line & j.scales & (j.rule != scaling.KEPT_EACH))
        ]
    batch_where = _most_common_user_frame(snap, input_sites) if len(input_sites) else None
    anything_scales = bool((j.scales & (case.requests.kind == rq.ALLOC)).any())
    if not anything_scales:
        pass  # nothing grows with the batch: a smaller one would change nothing
    elif safe is not None and safe.scale < 1:
        f = safe.scale
        sc = batch_scale.scaled_case(case, j, f)
        res = safe.result
        what = f"batch {safe.batch}" if safe.batch else f"{float(f):.0%} of the batch"
        remedies.append(
            simulated(
                "smaller_batch",
                f"Smaller batch: the largest that fits ({what})",
                res,
                f"reduce the batch size to {safe.batch}"
                if safe.batch
                else f"reduce the batch size to {float(f):.0%} of the recorded one",
                batch_where,
                "re-simulated with every allocation that scales with the batch scaled"
                + _workspace_note(safe),
                sc,
                j.scales,
                safe,
            )
        )
        remedies[-1].batch, remedies[-1].batch_scale = safe.batch, float(f)
    else:
        f = Fraction(1, 2)
        sc = batch_scale.scaled_case(case, j, f)
        half = batch_scale.predict(case, j, f, lim, None, batch)
        res = half.result
        remedies.append(
            simulated(
                "smaller_batch",
                "Half the batch",
                res,
                f"halve the batch size (to {batch // 2})"
                if batch and batch >= 2
                else "halve the batch size",
                batch_where,
                "re-simulated with every allocation that scales with the batch halved"
                + _workspace_note(half),
                sc,
                j.scales,
                half,
            )
        )
        remedies[-1].batch = batch // 2 if batch and batch >= 2 else None
        remedies[-1].batch_scale = 0.5
    # -- the other simulations: independent runs, side by side -----------------------
    # What each remedy below needs to know before its runs.
    kept = _kept_each_iteration(case, evd, j)
    # Evidence for it: the same line kept something in two or more iterations.
    kept_remedy = bool(kept.any()) and _iterations_spanned(evd, kept, case.requests) >= 2
    eval_loop = not (evd.phase == evidence.BACKWARD).any() or evd.n_iterations == 0
    opt_state = _optimizer_state(evd, j) & (case.requests.kind == rq.ALLOC)
    opt = split["optimizer_state"]
    # A run that ran out of memory was cut at its OOM: an edited stream shows nothing of
    # what the change does after it, so the remedies below estimate from the split at
    # the OOM instead of simulating.
    cut = recorded.first_oom is not None
    act = split["activations"]
    if evd.categories is not None:
        activations = evd.categories == "activation"
    else:
        activations = j.scales & (evd.phase == evidence.FORWARD)
    idx_all = np.arange(n)
    live_activations = (
        activations & (case.requests.kind == rq.ALLOC) & (idx_all <= at) & (evd.free_at > at)
    )
    # Checkpointing needs saved activations made by repeated blocks; autocast needs
    # activations at all.
    blocks = (
        changes.repeated_blocks(case, evd, j)
        if act > 0 and _repeated_sites(evd, live_activations)
        else None
    )
    autocast = act > 0 and not _autocast_seen(case, evd, j)
    progress.update("allocator", 0.0)
    # One task per remedy (each builds its edited streams where it runs: none is held
    # here), the longest first, then the allocator settings; serially for a small case.
    confs = [c for c in RECOMMENDED if c and case.config_of(c) != case.recorded]
    tasks: dict[str, Callable[[], Any]] = {}
    if kept_remedy:
        tasks["free_kept"] = lambda: _kept_freed_run(case, evd, kept, eval_loop, lim)
    tasks["no_grad"] = lambda: _no_grad_run(case, evd, lim)
    if opt > 0 and opt_state.any() and not cut:
        tasks["optimizer"] = lambda: _optimizer_runs(case, evd, opt_state, lim)
    if blocks is not None and not cut:
        tasks["checkpoint"] = lambda: _checkpoint_peaks(case, blocks, lim)
    if autocast and not cut:
        tasks["autocast"] = lambda: _autocast_peaks(case, evd, j, lim)
    for conf in confs:
        tasks[f"allocator:{conf}"] = partial(case.simulate, conf, lim)
    keys = list(tasks)
    ran = dict(
        zip(
            keys,
            parallel.pmap(
                lambda key: tasks[key](),
                keys,
                work=parallel.simulation_work(n, native_sim.use_native()),
                progress=progress,
                stage="allocator",
            ),
        )
    )
    # -- allocator settings (simulated) ------------------------------------------------
    found = [(conf, ran[f"allocator:{conf}"]) for conf in confs]
    found.sort(
        key=lambda cr: (_fits(cr[1], lim) not in (True, None), cr[1].peak_reserved_until_oom)
    )
    for conf, res in found[:ALLOCATOR_REMEDIES]:
        # A setting that still runs out of memory, or needs as much, is no remedy
        # (`vramscope whatif --recommend` lists them all).
        # On a run that ran out of memory a setting that makes it fit is a remedy even
        # when it needs as much at its peak (fragmentation: the same bytes, placed so
        # that they fit).
        rescues = recorded.first_oom is not None and _fits(res, lim) is True
        if _fits(res, lim) is False or (_demand(case, res, lim) >= peak and not rescues):
            continue
        remedies.append(
            simulated(
                f"allocator:{conf}",
                f"Allocator setting {conf}",
                res,
                f"PYTORCH_CUDA_ALLOC_CONF={conf} (set before the process starts CUDA)",
                None,
                f"{res.n_cuda_malloc} cudaMalloc, fragmentation at the peak "
                f"{res.fragmentation_at_peak:.0%}",
            )
        )
    # -- free what is kept every iteration (simulated) ---------------------------------
    if kept_remedy:
        kept_run, graphs_freed = ran["free_kept"]
        site_where = _most_common_user_frame(snap, evd.site[kept])
        per = int(case.requests.size[kept].sum())
        if eval_loop:  # no backward, no optimizer step: evaluation (or no telling)
            change = (
                "keep `loss.item()` / `out.detach().cpu()`, not the tensors, and run "
                "evaluation under `with torch.no_grad():`"
            )
        else:
            change = (
                "do not keep tensors across iterations: `del` them, or keep `.item()` / `.detach()`"
            )
        r = simulated(
            "free_kept",
            "Free what is kept every iteration",
            kept_run,
            change,
            site_where,
            f"{plural(int(kept.sum()), 'allocation')} ({fb(per)}) never freed, made again and "
            "again at the same line; re-simulated with what the program's own line made "
            "to keep not made, and the rest freed at the end of its iteration"
            + (
                "; and with the graphs freed as a no_grad forward frees them"
                if graphs_freed
                else "; without no_grad the graph is still saved in each step, so no_grad "
                "saves more than this"
                if eval_loop
                else ""
            ),
            None,
            kept,
        )
        if r.saving_bytes > 0:
            remedies.append(r)
    # -- forward passes whose graph no backward uses: no_grad (simulated, no_grad.py) ---
    from . import no_grad

    if ran["no_grad"] is not None:
        ng_where, ng_detail, ng_allocations, ng_run = ran["no_grad"]
        r = simulated(
            "no_grad_forward",
            no_grad.TITLE,
            ng_run,
            no_grad.CHANGE,
            ng_where,
            ng_detail,
            None,
            ng_allocations,
        )
        if r.saving_bytes > 0:
            remedies.append(r)

    def bounded(r: Remedy, *ends: int) -> Remedy:
        """``r`` with the range its prediction lies in: the lowest and highest of
        ``ends`` and its point (None where they are one value: no range)."""
        p = r.predicted_peak_reserved_bytes
        lo, hi = min(p, *ends), max(p, *ends)
        r.predicted_peak_reserved_range = (lo, hi) if lo < hi else None
        return r

    # -- optimizer state: 8-bit, or none (simulated, with the range of both) ----------
    if opt > 0 and opt_state.any() and cut:
        remedies.append(
            _split_estimate(
                "8bit_optimizer",
                "8-bit optimizer state",
                peak,
                floor,
                lim,
                peak - opt * 3 // 4,
                peak - opt,
                peak - opt * 3 // 4 + 1,
                "use an 8-bit optimizer (e.g. `bitsandbytes.optim.AdamW8bit`, torchao's "
                "`AdamW8bit`) or SGD without momentum",
                _most_common_user_frame(snap, evd.site[opt_state]),
                f"estimated: three quarters of the {fb(opt)} of optimizer state live "
                f"{moment_name} (down to all of it: SGD without momentum)",
                opt_state,
            )
        )
    elif opt > 0 and opt_state.any():
        opt_where = _most_common_user_frame(snap, evd.site[opt_state])
        eight_run, none_peak = ran["optimizer"]
        r = simulated(
            "8bit_optimizer",
            "8-bit optimizer state",
            eight_run,
            "use an 8-bit optimizer (e.g. `bitsandbytes.optim.AdamW8bit`, torchao's "
            "`AdamW8bit`) or SGD without momentum",
            opt_where,
            f"re-simulated with the {fb(int(case.requests.size[opt_state].sum()))} of "
            "optimizer state allocations at a quarter of their bytes (two fp32 moments "
            "become two 8-bit ones); the range reaches down to no state and none of the "
            "step's temporaries (SGD without momentum), whose run is simulated too",
            None,
            opt_state,
        )
        remedies.append(bounded(r, none_peak))
    # -- estimated from the split at the peak, bounded by simulated runs --------------
    fwd_where = _most_common_user_frame(snap, evd.site[activations])

    def estimated(rid, title, predicted, change, where, detail, acts_on, low, high) -> Remedy:
        # The segments reserved before the recording stay in the prediction, as they
        # stay in the simulated ones: the window cannot tell what made them.
        p = int(predicted)
        lo, hi = min(int(low), p), max(int(high), p)
        if floor and min(lo, p) <= floor:
            detail += (
                f"; the {fb(floor)} reserved before the recording started stays "
                "reserved in this prediction (the window cannot show what made it)"
            )
        return Remedy(
            rid,
            title,
            p,
            peak - p,
            ESTIMATED,
            change,
            where,
            None if lim is None else p <= lim,
            detail,
            acts_on=acts_on,
            # a range of zero width is no range: the estimate is labelled alone
            predicted_peak_reserved_range=(lo, hi) if lo < hi else None,
        )

    if blocks is not None and cut:
        remedies.append(
            estimated(
                "gradient_checkpointing",
                "Gradient checkpointing of the repeated blocks",
                peak - act // 2,
                "checkpoint the repeated blocks: `torch.utils.checkpoint.checkpoint(block, x, "
                "use_reentrant=False)` (HF: `model.gradient_checkpointing_enable()`)",
                fwd_where,
                f"estimated: half (up to two thirds) of the {fb(act)} of activations live "
                f"{moment_name} (a checkpointed block keeps its input and recomputes the rest)",
                activations,
                max(peak - act * 2 // 3, floor),
                peak - act // 2,
            )
        )
    elif blocks is not None:
        a, b = ran["checkpoint"]
        remedies.append(
            estimated(
                "gradient_checkpointing",
                "Gradient checkpointing of the repeated blocks",
                (a + b) // 2,
                "checkpoint the repeated blocks: `torch.utils.checkpoint.checkpoint(block, x, "
                "use_reentrant=False)` (HF: `model.gradient_checkpointing_enable()`)",
                fwd_where,
                f"estimated: {plural(blocks.n_blocks, 'repeated block')}; re-simulated without "
                "their saved activations but one block's (recomputed one at a time in backward), "
                "and "
                "keeping besides each block's largest saved tensor (a checkpoint keeps the "
                "block's input, at most that large): the estimate is the middle of both runs; "
                f"the range adds to the higher one block's {fb(blocks.block_bytes)}, made again "
                "in backward where the cache may have no room for them",
                blocks.saved,
                min(a, b),
                max(a, b) + blocks.block_bytes,
            )
        )
    if autocast:
        # bf16 copies of the weights, cached for the forward and saved for backward.
        copies = (
            int(case.requests.size[(case.requests.kind == rq.ALLOC) & _parameters(evd, j)].sum())
            // 2
        )
        high = peak + copies
        change = "run forward and loss under `with torch.autocast('cuda', dtype=torch.bfloat16):`"
        if cut:  # from the split at the OOM: a quarter of the activations, up to half
            remedies.append(
                estimated(
                    "bf16_autocast",
                    "bf16 mixed precision (autocast)",
                    peak - act // 4 + copies,
                    change,
                    fwd_where,
                    f"estimated: a quarter of the {fb(act)} of activations "
                    f"live {moment_name} (autocast runs norms, softmax and the loss in fp32), "
                    f"plus {fb(copies)} of bf16 weight copies; the range goes from half of them "
                    "to nothing saved but the copies added",
                    activations,
                    max(peak - act // 2, floor),
                    high,
                )
            )
        else:
            point_peak, low_peak, data = ran["autocast"]
            remedies.append(
                estimated(
                    "bf16_autocast",
                    "bf16 mixed precision (autocast)",
                    min(point_peak + copies, high),
                    change,
                    fwd_where,
                    "estimated: re-simulated with the activations of the ops autocast runs in "
                    "bf16 (convolutions, linear layers, matmuls, attention) halved, of its fp32 "
                    "ops (norms, softmax, losses) kept, the rest at three quarters, plus "
                    f"{fb(copies)} of bf16 weight copies; the range goes from every activation "
                    "halved to nothing saved but the copies added",
                    data,
                    low_peak,
                    high,
                )
            )
    if evd.categories is not None and 0 <= at < n and evd.phase[at] == evidence.FORWARD:
        idx = np.arange(n)
        grads = (
            (case.requests.kind == rq.ALLOC)
            & (idx <= at)
            & (evd.free_at > at)
            & (evd.categories == "gradient")
        )
        kept_grads = int(case.requests.size[grads].sum())
        if kept_grads > 0:
            remedies.append(
                estimated(
                    "set_to_none",
                    "Free gradients before the forward pass (set_to_none)",
                    max(peak - kept_grads, floor),
                    "call `optimizer.zero_grad(set_to_none=True)` "
                    "(the default since torch 2.0) instead of zeroing gradients in place",
                    _most_common_user_frame(snap, evd.site[j.rule == scaling.OPTIMIZER]),
                    f"estimated: {fb(kept_grads)} of gradients are live at a peak in the forward "
                    "pass; with set_to_none they are made again in backward.  Reserved falls by "
                    "up to their bytes: the range reaches the recorded peak, where the freed "
                    "gradients' segments stay cached",
                    grads,
                    max(peak - kept_grads, floor),
                    peak,
                )
            )
    if lim is not None:
        for r in remedies:
            rng = r.predicted_peak_reserved_range
            r.range_holds_limit = rng is not None and rng[0] <= lim < rng[1]
    # A remedy that saves nothing is no remedy, unless it makes an OOM run fit.
    considered = len(remedies)
    remedies = [
        r for r in remedies if r.saving_bytes > 0 or (recorded.first_oom is not None and r.fits)
    ]
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
    # A rank of sharded training: what it holds of the model, and what more ranks would.
    bd = evd.breakdown
    sharding = bd.sharding(at_event) if bd is not None and 0 <= at_event < bd.n_events else None
    if sharding is not None:
        notes.append(sharding.note())
    fragmentation = recorded.first_oom is not None and _is_fragmentation(case, recorded)
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
    held = _held_by_others(case, recorded)
    freed = _free_the_gpu(case, peak, held, outside)
    cache = _return_the_cache(case, peak, outside)
    if freed is not None or cache is not None:
        # Another process (or memory outside the allocator) is the cause: those remedies
        # first; allocator settings only where they make the run fit as it is.
        remedies = [r for r in (freed, cache) if r is not None] + [
            r for r in remedies if not r.remedy.startswith("allocator:") or r.fits
        ]
    if held is not None and recorded.first_oom is not None:
        # The verdict every view shows for this OOM (summary, the GUI's banner): the
        # whole GPU first, then the allocator's judgement within what it could have had.
        # Its event among the device's (summary's): the model's first OOM under a limit
        # the device lowered during the run (other processes grew) can come earlier.
        trace = snap.trace
        event = int(np.count_nonzero(trace.device[: held.event_index] == held.device))
        text = f"out of memory at event {event}: {held.verdict}"
    elif recorded.first_oom is not None:
        text = (
            f"out of memory at event {recorded.first_oom.event}: {oom_verdict(recorded.first_oom)}"
        )
    elif outside is not None:
        text = f"out of memory outside the allocator: {outside.verdict}"
    elif lim is not None and peak > lim:  # a limit below the recorded run's own
        text = f"does not fit: peak reserved {fb(peak)} is above the limit {fb(lim)} ({lim_source})"
    elif lim is not None:
        text = f"fits: peak reserved {fb(peak)} of {fb(lim)} ({lim_source})"
    else:
        text = f"peak reserved {fb(peak)}; no memory limit known"
    return Advice(
        device=case.device,
        recorded_peak_reserved_bytes=case.recorded_peak,
        needed_peak_reserved_bytes=peak,
        memory_limit_bytes=lim,
        limit_source=lim_source,
        verdict=text,
        split_at_peak=split,
        remedies=remedies,
        moment=moment_name,
        fragmentation=fragmentation,
        notes=notes,
        largest_scale_that_fits=float(safe.scale) if safe is not None else None,
        largest_batch_that_fits=safe.batch if safe is not None else None,
        recorded_batch=batch,
        search_capped=bool(search and search.capped and near is not None and not near.stepped_down),
        batch_workspaces=int(j.uncertain_workspace.sum()),
        near_limit=near,
        batch_not_judged=unjudged,
        sharding=sharding.to_dict() if sharding is not None else None,
    )


def _batch_not_judged(outside, lim: int | None) -> str | None:
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


def _held_by_others(case: Case, recorded):
    """The recorded OOM's report (:mod:`..analysis.oom`) when the device was full because
    of other processes or memory outside the allocator (``gpu_shortfall``); else None."""
    if recorded.first_oom is None:
        return None
    report = last_oom(case.snap)
    if report is None or report.device != case.device or report.gpu_shortfall is None:
        return None
    return report


def _free_the_gpu(case: Case, peak: int, held, outside) -> Remedy | None:
    """Free or move what else held the GPU: the other processes named (pid, command line,
    bytes), another device, ``CUDA_VISIBLE_DEVICES``.  Not simulated: the program's peak
    is its own, unchanged; it fits when that peak is under what the allocator could have
    had with them gone."""
    if held is not None:
        short = held.gpu_shortfall
        holders = short["holders"]
        freed, limit = short["freed_bytes"], short["could_have_bytes"] + short["freed_bytes"]
    elif outside is not None and outside.device_free_bytes is not None:
        acc = _outside_accounting(case)
        holders = [h.to_dict() for h in acc.holders_by_size()] if acc is not None else []
        freed = sum(h["used_bytes"] for h in holders)
        if not holders or freed <= outside.device_free_bytes:
            return None  # the others held less than was left: not what ran out
        limit = None  # the library's need is not recorded: whether it fits is not known
    else:
        return None
    dev = f"device {case.device}"
    # The freest other device, said as the verdict says it (where every device was listed).
    od = (held if held is not None else outside).other_device
    move = (
        f"or run on another device: {od['words']}"
        if od is not None and od["fits"]
        else f"{od['words']}"
        if od is not None
        else "or run on a device with room: `CUDA_VISIBLE_DEVICES=N` (`nvidia-smi` lists "
        "each device's free memory)"
    )
    pick = ", or pick a freer device" if od is None or od["fits"] else ""
    if holders:
        named = [GpuHolder(**h).label() for h in holders[:3]]
        if len(holders) == 1:
            who = f"{named[0]}, which holds {fb(freed)} of {dev}"
        else:
            more = f" and {len(holders) - 3} more" if len(holders) > 3 else ""
            who = (
                ", ".join(f"{n} ({fb(h['used_bytes'])})" for n, h in zip(named, holders))
                + f"{more}, which hold {fb(freed)} of {dev}"
            )
        title = f"Free or move the other process{'es' if len(holders) > 1 else ''} on {dev}{pick}"
        change = f"stop or move {who}; {move}"
    else:
        title = "Free the memory this process holds outside the allocator"
        change = (
            f"{fb(freed)} of {dev} is held outside PyTorch's allocator by this process "
            "(CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers, other libraries): "
            "free what it no longer needs"
            + (
                f"; {move}"
                if od is not None
                else ", or run on a device with more room (`CUDA_VISIBLE_DEVICES=N`)"
            )
        )
    fits = peak <= limit if limit is not None else None
    detail = "not simulated: the program's own peak reserved is unchanged; " + (
        f"the allocator could have had {fb(limit)} with that memory free, "
        f"{'above' if fits else 'still below'} the {fb(peak)} the run needs"
        if limit is not None
        else "the library's allocation failed outside PyTorch's allocator, whose need "
        "the recording does not hold"
    )
    return Remedy(
        "free_gpu",
        title,
        peak,
        0,
        GPU_FREED,
        change,
        None,
        fits,
        detail,
        limit_with_change_bytes=limit,
    )


def _return_the_cache(case: Case, peak: int, outside) -> Remedy | None:
    """After an OOM outside the allocator: the allocator's wholly free segments, handed
    back by ``torch.cuda.empty_cache()``, when they are more than the GPU had free (a
    library's handle or workspace then finds room).  Not simulated, its fit not known."""
    if outside is None or outside.device_free_bytes is None:
        return None
    whole = releasable_bytes(case.snap, case.device)
    if whole <= outside.device_free_bytes:
        return None
    where = f"  [{outside.where}]" if outside.where else ""
    return Remedy(
        "empty_cache",
        "Return the allocator's free segments to the GPU (empty_cache)",
        peak,
        0,
        GPU_FREED,
        f"call `torch.cuda.empty_cache()` before the call that failed{where}: "
        f"{fb(whole)} of wholly free segments go back to the GPU, where "
        f"{outside.library} can allocate (the GPU had {fb(outside.device_free_bytes)} free)",
        None,
        None,
        "not simulated: the program's own peak reserved is unchanged; the "
        "library's allocation failed outside PyTorch's allocator, whose need the recording "
        "does not hold",
        limit_with_change_bytes=None,
    )


def _outside_accounting(case: Case):
    from ..analysis.gpu_accounting import gpu_accounting

    acc = gpu_accounting(case.snap)
    return acc if acc.known else None


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
    from ..categories.breakdown import format_split

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
