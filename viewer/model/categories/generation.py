"""Generation (``model.generate()`` with a key/value cache): forward passes without backward
or optimizer, one per token, that hand a growing cache from each pass to the next.

Inference cut by forward passes gives one "iteration" per token: hundreds, none of them
telling.  Here the forward-only iterations that pass memory to one another are joined
into **requests** (the prefill and its decode steps), and what they pass is the
**KV cache**:

- a *link* joins forward-only iteration ``i`` to ``i + 1`` when an allocation made in
  ``i``'s forward pass is freed inside ``i + 1``'s forward pass (a cache that
  concatenates: each step makes the longer tensor and drops the old one).  An
  evaluation loop frees what it kept outside its forward passes (``del``, a rebound
  name), so it never links;
- a *request* is a run of linked iterations with at least :data:`MIN_LINKS` links whose
  carried bytes grow from decode step to decode step (the cache gains a token per
  step); a hook that keeps a same-sized tensor per forward does not grow;
- its *KV cache* is what a forward pass of the request made and the next forward pass
  still finds alive, freed by the time the next request's first forward starts (or
  alive at the end of the recording); in the request's last step, what that step made
  by the call stacks that made the carried cache before and kept after the pass.

Nothing here runs on a trace with a backward pass or an optimizer step: training
iterations stay what they were.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..replay.timeline import Intervals
from .iterations import PH_FORWARD, Iteration, IterationOf, Phases

MIN_LINKS = 3  # links (forward passes - 1) of the shortest request recognised
GROWING_SHARE = 0.9  # decode links whose carried bytes do not shrink, at least


@dataclass(frozen=True)
class Request:
    """One generation request: iterations ``first..last`` of the forward-only cut."""

    first: int
    last: int


@dataclass
class Generation:
    """The requests found and the allocations that are their KV cache."""

    requests: list[Request]
    carried: np.ndarray  # interval ids: made in one forward, alive into a later one
    last_step: np.ndarray  # interval ids: the last step's cache (matched by stack / size)


def _forward_bounds(ph: Phases, n_it: int) -> tuple[np.ndarray, np.ndarray]:
    """(first event, exclusive end) of the forward runs of every iteration (-1, -1: none)."""
    s, e = ph.phase_runs().of(PH_FORWARD)
    fs = np.full(n_it, -1, np.int64)
    fe = np.full(n_it, -1, np.int64)
    if not len(s):
        return fs, fe
    own = np.asarray(ph.iteration[s], np.int64)
    ok = own >= 0
    big = np.iinfo(np.int64).max
    first = np.full(n_it, big, np.int64)
    np.minimum.at(first, own[ok], s[ok])
    np.maximum.at(fe, own[ok], e[ok])
    fs[first < big] = first[first < big]
    return fs, fe


def find_generation(iv: Intervals, ph: Phases, n: int) -> Generation | None:
    """The generation requests of a forward-only trace and their KV cache (None: none)."""
    its = ph.iterations
    if len(its) < MIN_LINKS + 1 or n == 0:
        return None
    cand = np.array([it.kind == "eval" for it in its], bool)
    if cand.sum() < MIN_LINKS + 1:
        return None
    n_it = len(its)
    fs, fe = _forward_bounds(ph, n_it)
    cand &= fs >= 0
    s, e = iv.start, iv.end
    made = np.flatnonzero(s >= 0)
    made = made[ph.phase[s[made]] == PH_FORWARD]
    if not len(made):
        return None
    own = np.asarray(ph.iteration[s[made]], np.int64)
    keep = own >= 0
    made, own = made[keep], own[keep]
    order = np.argsort(own, kind="stable")  # by iteration: each one's a slice
    made, own = made[order], own[order]
    pair = own + 1 < n_it
    pair[pair] = cand[own[pair]] & cand[own[pair] + 1]
    pm, po = made[pair], own[pair]
    nxt = po + 1
    em = e[pm]
    # Freed inside the next iteration's forward pass.
    link_alloc = (em >= fs[nxt]) & (em < fe[nxt])
    link_alloc &= ph.phase[np.minimum(em, n - 1)] == PH_FORWARD
    carried_bytes = np.bincount(
        po[link_alloc], weights=iv.requested[pm[link_alloc]], minlength=n_it
    ).astype(np.int64)
    requests = _requests(carried_bytes > 0, carried_bytes)
    if not requests:
        return None
    # The KV cache: per request, made in a forward that is not its last, alive into the
    # next forward, gone before the next forward outside the request (or alive at the end).
    req_of = np.full(n_it, -1, np.int64)
    limit = np.full(len(requests), n, np.int64)
    for r, rq in enumerate(requests):
        req_of[rq.first : rq.last + 1] = r
        later = np.flatnonzero(fs[rq.last + 1 :] >= 0)
        if len(later):
            limit[r] = fs[rq.last + 1 + int(later[0])]
    r_of = req_of[po]
    in_req = (r_of >= 0) & (req_of[nxt] == r_of)
    carried = in_req & (em >= fs[nxt]) & (em <= limit[np.maximum(r_of, 0)])
    last_ids = _last_steps(iv, requests, fe, limit, pm[carried], po[carried], made, own)
    return Generation(requests, pm[carried], last_ids)


def _requests(link: np.ndarray, carried_bytes: np.ndarray) -> list[Request]:
    """Runs of linked iterations long enough and growing like a cache."""
    out: list[Request] = []
    i, n_it = 0, len(link)
    while i < n_it:
        if not link[i]:
            i += 1
            continue
        j = i
        while j < n_it and link[j]:
            j += 1
        # Links i..j-1 join iterations i..j.
        if j - i >= MIN_LINKS:
            decode = carried_bytes[i + 1 : j]  # the prefill's link carries what it made
            steps = np.diff(decode)
            if decode[-1] > decode[0] and (steps >= 0).mean() >= GROWING_SHARE:
                out.append(Request(i, j))
        i = j
    return out


def _last_steps(
    iv: Intervals,
    requests: list[Request],
    fe: np.ndarray,
    limit: np.ndarray,
    carried: np.ndarray,
    own_c: np.ndarray,
    made: np.ndarray,
    own: np.ndarray,
) -> np.ndarray:
    """Per request, what its last forward made like the carried cache and kept after it
    (``made``/``own``: the allocations made in forward passes and their iteration, sorted
    by iteration; ``carried``/``own_c`` likewise for the carried cache)."""
    e = iv.end
    out = []
    for r, rq in enumerate(requests):
        lo, hi = np.searchsorted(own, [rq.last, rq.last + 1])
        ids = made[lo:hi]
        ids = ids[(e[ids] >= fe[rq.last]) & (e[ids] <= limit[r])]
        if not len(ids):
            continue
        c0, c1 = np.searchsorted(own_c, [rq.first + 1, rq.last])
        stacks = iv.stack[carried[c0:c1]]  # the decode steps' cache (not the prefill's)
        stacks = np.unique(stacks[stacks >= 0])
        out.append(ids[np.isin(iv.stack[ids], stacks)])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def merge_requests(ph: Phases, requests: list[Request]) -> Phases:
    """``ph`` with each request's iterations joined into one of kind ``generate`` (the
    iterations renumbered; the phases themselves unchanged)."""
    its = ph.iterations
    first_of = {rq.first: rq for rq in requests}
    out: list[Iteration] = []
    i = 0
    while i < len(its):
        rq = first_of.get(i)
        if rq is None:
            out.append(replace(its[i], index=len(out)))
            i += 1
            continue
        part = its[rq.first : rq.last + 1]
        top = max(part, key=lambda it: it.peak_bytes)  # the first at the maximum
        # A request's phases in its own words: the prefill (its first forward pass), decode
        # (a later one), or sampling between them (logits processors, top-k).
        phase = {"forward": "prefill" if top is part[0] else "decode", "other": "sampling"}.get(
            top.peak_phase, top.peak_phase
        )
        out.append(
            Iteration(
                index=len(out),
                start=part[0].start,
                end=part[-1].end,
                peak_bytes=top.peak_bytes,
                peak_event=top.peak_event,
                peak_phase=phase,
                kind="generate",
                complete=part[-1].complete,
                phases_guessed=any(it.phases_guessed for it in part),
                decode_steps=rq.last - rq.first,
            )
        )
        i = rq.last + 1
    lo = np.array([it.start for it in out], np.int64)
    n = len(ph.phase)
    end = int(ph.iteration.end) if isinstance(ph.iteration, IterationOf) else its[-1].end + 1
    return replace(ph, iterations=out, iteration=IterationOf(lo, end, n))
