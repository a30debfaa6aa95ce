"""The live bytes at one instant of a recording, split the two ways advise reads them.

:func:`moment` picks the instant (the first OOM, else the peak of requested bytes, the
instant ``summary`` calls "at the peak"); :func:`split_at` splits what is live there by
what it is (the categories) and by how it scales with the batch (:mod:`.scaling`).  The
masks of parameters and optimizer state are the catalogue's too (:mod:`.catalogue`).
"""

from __future__ import annotations

import numpy as np

from ..whatif import Case
from ..whatif import requests as rq
from . import evidence, scaling


def parameters(evd: evidence.Evidence, j: scaling.Judgement) -> np.ndarray:
    """Allocations that are parameters: by category when known, else module state."""
    if evd.categories is not None:
        return evd.category_in("parameter")
    return j.rule == scaling.MODULE_STATE


def optimizer_state(evd: evidence.Evidence, j: scaling.Judgement) -> np.ndarray:
    """Allocations that are optimizer state: by category when known, else kept optimizer
    allocations."""
    if evd.categories is not None:
        return evd.category_in("optimizer_state")
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
    # The allocations made up to ``request`` and freed after it, as rows: each figure
    # below sums the few live rows, not a mask of the whole stream.
    upto = max(min(request + 1, len(reqs)), 0)
    rows = np.flatnonzero((reqs.kind[:upto] == rq.ALLOC) & (evd.free_at[:upto] > request))
    size = reqs.size[rows]
    rule = j.rule[rows]
    scales = j.scales[rows]
    forward = evd.phase[rows] == evidence.FORWARD
    state_rules = (
        evidence.one_of(
            rule,
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
    if evd.categories is not None:
        # Model state in the categories' words: the parameters, gradients and optimizer
        # state the header shows, where they do not scale; a fixed temporary or workspace
        # of a weight's size is other fixed, so both axes name the same bytes alike.
        state_rules = ~scales & evd.category_in("parameter", "gradient", "optimizer_state")[rows]
    recorded_live = int(size.sum())
    cats: dict[str, int] | None = None
    bd = evd.breakdown
    if bd is not None and event is not None and 0 <= event < bd.n_events:
        cats = bd.split_at(event)
    elif evd.categories is not None:
        cats = {}
        live_cats = evd.categories[rows]
        for name in np.unique(live_cats).tolist():
            if name:
                cats[name] = int(size[live_cats == name].sum())
    if cats is not None:
        before = max(sum(cats.values()) - recorded_live, 0)
    else:
        before = (
            int(reqs.initial.blk_requested[reqs.initial.blk_state == 0].sum())
            if reqs.initial.n_blocks
            else 0
        )
    activations = (
        int(size[evd.category_in("activation")[rows]].sum())
        if evd.categories is not None
        else int(size[scales & forward].sum())
    )
    out = {
        "categories": cats,
        "scales_with_batch": int(size[scales].sum()),
        "activations": activations,
        "activations_forward": int(size[scales & forward].sum()),
        "model_state": int(size[state_rules].sum()),
        "optimizer_state": int(size[optimizer_state(evd, j)[rows]].sum()),
        "kept_each_iteration": int(size[rule == scaling.KEPT_EACH].sum()),
        "other_fixed": int(size[~scales & ~state_rules].sum()),
        "before_recording": before,
        "event": event,
    }
    return out


def reserved_before_recording(case: Case) -> int:
    """Bytes of the segments the device held when the recording started: a prediction
    made from the window keeps them (it cannot tell what made them)."""
    return int(case.requests.initial.seg_size.sum())
