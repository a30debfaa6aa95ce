"""Forward passes that build a graph no backward uses: run them under ``torch.no_grad()``.

A forward pass run with autograd on saves, for the backward pass, most of the
tensors it makes (the inputs of every op that needs them for its gradient):
they live until the graph is dropped, which without a ``backward()`` is when
the program drops the output (after ``loss.item()``).  A validation or
evaluation forward without ``torch.no_grad()`` so holds the whole graph of a
forward pass at its end, where under ``no_grad`` each intermediate goes as soon
as the ops after it have consumed it.

**Detection** (:func:`candidates`, :func:`find`; numpy columns over the request
stream and :mod:`.evidence`, no object per request):

* a candidate is an allocation made in a forward phase and freed in the window,
  with no backward-phase allocation and no out-of-memory error between its
  allocation and its free (no backward ran while it lived);
* its free is part of a *graph drop*: a run of consecutive frees (no allocation
  between them) that releases at least :data:`MIN_DROPPED` candidates, and at least
  :data:`MIN_SHARE` of the allocations made since the earliest of them, made by
  :data:`MIN_SITES` call sites or more - a graph
  holds most of what its forward made and goes at once when its last reference
  goes; a no-grad forward frees its intermediates between its ops, and its
  return releases only its outputs and locals;
* the candidates are grouped by the line of the program that ran the forward:
  the innermost frame of the program's own code in their stacks (as
  :func:`.evidence.user_frame`: the line of ``model(x)``).  Each line with a graph
  drop is a finding.

A graph that is never dropped in the window (outputs kept in a list) is the
``free_kept`` remedy's (:mod:`.catalogue.kept`): its frees are not in the recording.  A
training forward's saved tensors are freed by its backward (backward allocations
between); a no-grad forward's intermediates are freed one by one: neither is a
candidate.  No recording of tests/data/truth but the ones without ``no_grad``
has a finding.

**The edit** (:func:`free_points`, :func:`freed_earlier`): each candidate's free
is moved to where a no-grad forward frees it, which the recording cannot show
(no graph, no saved-tensor list); by the structure of a forward:

* its call site allocates again later in the same pass (the same line of the next
  repeated block): freed right after that - an intermediate of one block is gone
  when the next block makes the same one (an upper bound for most: they go after
  the next op or two);
* made after the pass's last repeated block (the head: final norm, logits, loss):
  its recorded free - the outputs are what the program holds until ``.item()``;
* else (one-off tensors inside the body): right after the next allocation, the
  next op's output, made while its input is still referenced.

Checked where the real answer is known: GPT-2's ``eval_keeps_outputs`` with each
iteration's outputs dropped at its end (its graphs then go as a validation loop's
do) re-simulates to 474 MiB reserved; the same program under ``no_grad``
(``eval_no_grad``) peaked at 478 MiB.  Allocated bytes are lower (322 vs
391 MiB): HF's key/value cache, two tensors per layer that the output holds, is
freed one block later instead of at the end.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..core.units import format_bytes as fb
from ..core.units import plural
from ..whatif import Case
from ..whatif import requests as rq
from . import evidence

MIN_DROPPED = 8  # candidates one graph drop releases, at least
# ... and at least this share of the allocations made since the earliest of them: a graph
# holds most of what its forward made (0.6 - 0.9 of the allocations in the training runs of
# tests/data/truth, 0.36 with checkpointing), where a function's return under no_grad
# releases its outputs and locals (0.13 of a GPT-2 forward).
MIN_SHARE = 0.4
MIN_SITES = 3  # ... made by this many call sites at least


@dataclass
class Finding:
    """Forward passes at one line of the program whose graphs no backward used."""

    where: str | None  # file.py:LINE of the forward call (None: no program frame)
    allocations: np.ndarray  # bool per request: the saved tensors of those forwards
    moves: tuple[np.ndarray, np.ndarray]  # (allocation, request after which it is freed)
    forwards: int  # graph drops (forward passes) at that line
    iterations: int  # distinct iterations they were made in (0: no iterations known)
    bytes_per_forward: int  # the largest graph dropped at once (requested bytes)

    @property
    def count(self) -> int:
        return int(self.allocations.sum())


def _free_rows(reqs) -> np.ndarray:
    k = reqs.kind
    return ((k == rq.FREE) | (k == rq.FREE_REQ) | (k == rq.FREE_DONE)) & (reqs.ref >= 0)


# Modules that run only while torch.compile builds a graph: its pattern passes trace
# sample tensors on the device (forward-like allocations dropped together, no backward),
# which is no forward of the program.
_COMPILE_TIME = ("/torch/_inductor/fx_passes/", "/torch/_inductor/pattern_matcher.py")


def _compiling(snap, site: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Bool per request of ``mask``: made inside a compile-time pass (:data:`_COMPILE_TIME`)."""
    stacks, _ = evidence.stack_table(np.where(mask, site, -1))
    compiling = np.zeros(int(site.max()) + 2 if len(site) else 1, bool)  # by stack id; -1 last
    for s_ in stacks.tolist():
        names = (
            snap.frames.filename_of(f).replace("\\", "/")
            for f in snap.stacks.frame_ids(int(s_)).tolist()
        )
        compiling[s_] = any(m in fn for fn in names for m in _COMPILE_TIME)
    if not compiling.any():
        return np.zeros(len(site), bool)
    return mask & compiling[site]


def candidates(case: Case, evd: evidence.Evidence) -> np.ndarray:
    """Bool per request: forward allocations freed in a graph drop that no backward
    ran before (see the module docstring)."""
    reqs = case.requests
    n = len(reqs)
    kind = reqs.kind
    alloc = kind == rq.ALLOC
    freed = np.flatnonzero(alloc & (evd.free_at < n) & (evd.phase == evidence.FORWARD))
    # No backward allocation between the allocation and its free (running counts, of at
    # most n: int32, half the memory of the default).
    bwd = np.cumsum(alloc & (evd.phase == evidence.BACKWARD), dtype=np.int32)
    cand = np.zeros(n, bool)
    cand[freed] = bwd[evd.free_at[freed]] == bwd[freed]
    if cand.any():
        cand &= ~_compiling(case.snap, evd.site, cand)
    if not cand.any():
        return cand
    # Runs of consecutive free rows (an allocation or anything else ends a run).
    is_free = _free_rows(reqs)
    run_id = np.cumsum(~is_free, dtype=np.int32)  # equal within one run of frees
    # Candidates each run releases, and the allocations made since its earliest one.
    freeing = np.flatnonzero(is_free & (kind != rq.FREE_DONE))
    by_cand = freeing[cand[reqs.ref[freeing]]]
    runs = run_id[by_cand]
    n_runs = int(run_id[-1]) + 1
    counts = np.bincount(runs, minlength=n_runs)
    earliest = np.full(n_runs, n, np.int64)
    np.minimum.at(earliest, runs, reqs.ref[by_cand])
    start = np.full(n_runs, n, np.int64)
    np.minimum.at(start, runs, by_cand)
    made = np.cumsum(alloc, dtype=np.int32)
    used = counts > 0
    since = np.zeros(n_runs, np.int64)
    since[used] = made[start[used] - 1] - made[earliest[used]] + 1
    # A forward cut short by an out-of-memory error drops its graph too: not this.
    ooms = np.cumsum(kind == rq.OOM, dtype=np.int32)
    oom_between = np.zeros(n_runs, bool)
    oom_between[used] = ooms[start[used] - 1] > ooms[earliest[used]]
    # From several ops (a graph saves inputs of matmuls, norms, activations, the loss), not
    # one line's outputs released together.
    # Distinct (run, site) pairs as one integer each (sites are -1 or more).
    wide = int(evd.site.max()) + 2 if n else 1
    pairs = np.unique(runs.astype(np.int64) * wide + evd.site[reqs.ref[by_cand]] + 1)
    sites = np.bincount(pairs // wide, minlength=n_runs)
    big = (
        (counts >= MIN_DROPPED)
        & (counts >= MIN_SHARE * np.maximum(since, 1))
        & (sites >= MIN_SITES)
        & ~oom_between
    )
    out = np.zeros(n, bool)
    ok = by_cand[big[runs]]
    out[reqs.ref[ok]] = True
    return out


def find(case: Case, evd: evidence.Evidence) -> list[Finding]:
    """The lines whose forward passes dropped graphs no backward used, most bytes first."""
    reqs = case.requests
    n = len(reqs)
    cand = candidates(case, evd)
    if not cand.any():
        return []
    snap = case.snap
    rows = np.flatnonzero(cand)
    cache: dict[int, str | None] = {}
    sites = evd.site[rows]
    uniq, inv = np.unique(sites, return_inverse=True)
    lines = [evidence.user_frame(snap, int(s), cache) for s in uniq.tolist()]
    names, line_of_site = np.unique(
        np.array([x or "" for x in lines], dtype=object), return_inverse=True
    )
    line_id = line_of_site[inv]
    # The graph drop of each candidate: its free's run of frees.
    is_free = _free_rows(reqs)
    run_id = np.cumsum(~is_free)
    drop = run_id[evd.free_at[rows]]
    alloc = reqs.kind == rq.ALLOC
    alloc_rows = np.flatnonzero(alloc)
    out: list[Finding] = []
    # One slice of candidates per line (rows stay ascending inside each).
    order = np.argsort(line_id, kind="stable")
    bounds = np.searchsorted(line_id[order], np.arange(len(names) + 1))
    for k, name in enumerate(names.tolist()):
        sl = order[bounds[k] : bounds[k + 1]]
        if len(sl) < MIN_DROPPED:
            continue
        r, d = rows[sl], drop[sl]
        drops, per_drop = np.unique(d, return_counts=True)
        drops = drops[per_drop >= MIN_DROPPED]
        keep = np.isin(d, drops)
        r, d = r[keep], d[keep]
        if not len(r):
            continue
        its = evd.iteration[r]
        n_its = int(len(np.unique(its[its >= 0]))) if evd.n_iterations else 0
        a_of, k_of = free_points(evd.site, r, d, alloc_rows, evd.free_at)
        mask = np.zeros(n, bool)
        mask[r] = True
        per = np.bincount(np.searchsorted(drops, d), weights=reqs.size[r], minlength=len(drops))
        out.append(Finding(name or None, mask, (a_of, k_of), len(drops), n_its, int(per.max())))
    out.sort(key=lambda f: -int(reqs.size[f.allocations].sum()))
    return out


def free_points(
    site: np.ndarray,
    rows: np.ndarray,
    drop: np.ndarray,
    alloc_rows: np.ndarray,
    free_at: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(allocation, request after which a no-grad forward would free it) for the
    candidates ``rows`` (ascending) of the graph drops ``drop`` (one id per forward):

    * its call site allocates again later in the same forward (the next of the
      repeated blocks): freed right after that allocation - without a graph, an
      intermediate of one block is gone when the next block makes the same one;
    * else, made after the forward's repeated blocks (its last allocation from a site
      seen before in it): the head - the outputs the program holds (logits, loss) and
      what makes them - keeps its recorded free;
    * else: freed right after the next allocation request (the next op's output,
      made while its input is still referenced; the input goes when the code drops it).

    Allocations already freed by then keep their recorded free."""
    n = len(rows)
    if not n:
        return rows, rows
    # One op call can make several allocations from one stack (layer_norm's output,
    # mean and rstd): consecutive allocations from one site are one call.
    a_site = site[alloc_rows]
    call_of_alloc = np.cumsum(np.r_[True, a_site[1:] != a_site[:-1]])
    call = call_of_alloc[np.searchsorted(alloc_rows, rows)]
    s = site[rows]
    # In (forward, site, row) order: the first allocation of the next call from the
    # same site in the same forward, and whether an earlier call made one.
    order = np.lexsort((rows, s, drop))
    ro, so, do, co = rows[order], s[order], drop[order], call[order]
    group_start = np.r_[True, (so[1:] != so[:-1]) | (do[1:] != do[:-1])]
    call_start = group_start | np.r_[True, co[1:] != co[:-1]]
    pos = np.arange(n)
    starts = np.flatnonzero(call_start)
    nxt = np.searchsorted(starts, pos, side="right")
    nxt_pos = np.where(nxt < len(starts), starts[np.minimum(nxt, len(starts) - 1)], n)
    ok_next = nxt_pos < n
    ok_next[ok_next] = ~group_start[nxt_pos[ok_next]]
    tmp = np.where(ok_next, ro[np.minimum(nxt_pos, n - 1)], -1)
    nxt_same = np.empty(n, np.int64)
    nxt_same[order] = tmp
    group_first_call = np.maximum.accumulate(np.where(group_start, pos, 0))
    first_call_end = np.searchsorted(starts, group_first_call, side="right")
    later_call = pos >= np.where(
        first_call_end < len(starts), starts[np.minimum(first_call_end, len(starts) - 1)], n
    )
    seen_before = np.empty(n, bool)
    seen_before[order] = later_call & ~group_start
    # The last allocation of each forward from a site an earlier call of it used.
    ids = np.unique(drop)
    g = np.searchsorted(ids, drop)
    last_rep = np.full(len(ids), -1, np.int64)
    np.maximum.at(last_rep, g[seen_before], rows[seen_before])
    head = rows > last_rep[g]
    nxt_alloc = alloc_rows[
        np.minimum(np.searchsorted(alloc_rows, rows, side="right"), len(alloc_rows) - 1)
    ]
    at = np.where(nxt_same >= 0, nxt_same, np.where(head, -1, nxt_alloc))
    ok = (at > rows) & (at < free_at[rows])
    return rows[ok], at[ok]


def freed_earlier(case: Case, allocs: np.ndarray, after: np.ndarray) -> Case:
    """``case`` with the free of allocation ``allocs[i]`` moved to right after request
    ``after[i]`` (earlier than recorded; a later one is left where it was).  Frees moved
    behind one request keep their recorded order; a free's trace event becomes that
    request's (the curve's x stays in order)."""
    reqs = case.requests
    n = len(reqs)
    if not len(allocs) or not n:
        return case
    target = np.full(n, -1, np.int64)
    target[allocs] = after
    is_free = _free_rows(reqs)
    refs = np.where(is_free, reqs.ref, 0)
    to = np.where(is_free, target[refs], -1)
    idx = np.arange(n, dtype=np.int64)
    moving = is_free & (to >= 0) & (to < idx)
    key = idx * 2
    key[moving] = to[moving] * 2 + 1
    order = np.argsort(key, kind="stable")
    new_index = np.empty(n, np.int64)
    new_index[order] = idx
    ref = reqs.ref.copy()
    m = ref >= 0
    ref[m] = new_index[ref[m]]
    event = reqs.event.copy()
    event[moving] = reqs.event[to[moving]]
    tag = reqs.seg_tag.copy()
    ok = (tag >= 0) & (tag < n)
    tag[ok] = new_index[tag[ok]]
    seg_order = (
        np.argsort(np.where(tag < 0, -1, tag), kind="stable") if ok.any() else np.arange(len(tag))
    )
    out = dataclasses.replace(
        reqs,
        kind=reqs.kind[order],
        size=reqs.size[order],
        stream=reqs.stream[order],
        pool=reqs.pool[order],
        ref=ref[order],
        event=event[order],
        seg_tag=tag[seg_order],
        seg_action=reqs.seg_action[seg_order],
        seg_addr=reqs.seg_addr[seg_order],
        seg_size=reqs.seg_size[seg_order],
    )
    return case.with_requests(out)


TITLE = "Run this forward under torch.no_grad()"
CHANGE = (
    "run this forward under `with torch.no_grad():` (or `torch.inference_mode()`): "
    "it builds a graph that no backward uses"
)


@dataclass
class Plan:
    """The remedy's edited run and what it says."""

    where: str | None
    allocations: np.ndarray  # bool per request: the saved tensors it frees earlier
    case: Case  # the request stream with those frees moved
    detail: str


def plan(case: Case, evd: evidence.Evidence) -> Plan | None:
    """The no-grad remedy of ``case``: every finding's frees moved at once (None: no
    forward in the recording dropped a graph that no backward used)."""
    found = find(case, evd)
    if not found:
        return None
    reqs = case.requests
    allocs = np.concatenate([f.moves[0] for f in found])
    after = np.concatenate([f.moves[1] for f in found])
    mask = np.logical_or.reduce([f.allocations for f in found])
    top = found[0]
    total = int(reqs.size[mask].sum())
    its = f" in {plural(top.iterations, 'iteration')}" if top.iterations else ""
    others = [f.where for f in found[1:] if f.where]
    detail = (
        f"{plural(int(mask.sum()), 'allocation')} ({fb(total)}) made by "
        f"{plural(top.forwards, 'forward pass', 'forward passes')}{its} freed together "
        "when the output "
        f"was dropped, no backward between (up to {fb(top.bytes_per_forward)} a pass): "
        "a graph that no backward used; re-simulated with each freed where a no-grad "
        "forward frees it: after its line's next call in the pass (the next repeated "
        "block), the pass's outputs as recorded, the rest after the next allocation"
    )
    if others:
        detail += "; also at " + ", ".join(others)
    return Plan(top.where, mask, freed_earlier(case, allocs, after), detail)
