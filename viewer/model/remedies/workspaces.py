"""Library workspaces at another batch size: a fixed part plus a per-sample part.

cuDNN's convolution workspaces (:attr:`~.scaling.Judgement.workspace`: made and freed
inside one operation, not a per-sample tensor's size) are not proportional to the batch.
Measured allocation by allocation on ResNet-18 at batch 16/32/48/64 (the truth sweeps,
tests/model/test_remedies_workspaces.py), while cuDNN keeps its algorithm a workspace is

    size = s x W + k x O + d

* ``W``: the convolution's weight, or under autocast its half-precision copy (the
  weight gradient allocated beside it in backward, the copy beside it in forward; else
  one of the weights found so), kept ``s`` times: once in forward and
  backward-data (e.g. 9 MiB + 2 x grad + 16 B), several times in backward-filter
  (split-K partial weight gradients: 15 x 147456 B + 2 x grad + 679 B at every batch of
  layer1);
* ``O``: an activation of the same operation (its output, input or gradient, allocated
  just before), ``k`` a small multiple (1/2 .. 8), which grows with the batch;
* ``d``: a few hundred bytes of alignment (|d| < 1 KiB).

From one recording the decomposition is found by testing the recorded size against
those candidates: the weight beside it (or, once, any weight found beside a backward
workspace: any parameter's size would match by chance too often), the activations
made just before it, whole and half multiples.  Among the decompositions that explain the
recorded bytes to within ``d``, the one with the fewest weight copies and the largest
per-sample part is taken (the least fixed memory: nearest to proportional).  Its fixed
part ``s x W + d`` stays at another batch, ``k x O`` scales.  A backward workspace that
no decomposition explains keeps the weight beside it as its fixed part; any other scales
in proportion.

What one recording cannot show is the algorithm cuDNN picks at another batch: measured,
layer1's forward workspace is ``W + 1 x O`` at batch 16 and 32 but ``W + 2 x O`` at 48
and 64, and the split count changes (8 copies at batch 16, 15 at 32).  The choice can
also switch to another kind of algorithm: MobileNetV3's and EfficientNet-B0's
backward-filter workspaces are a copy of both operands (input and output gradient,
1.007-1.026 x their sum) at every batch up to 56 but under 0.5 MiB at 64 and above
(H100, cuDNN 9.19, heuristics mode; PyTorch passes cuDNN's first choice through, with no
filter of its own by size).  So each workspace also carries its :attr:`WorkspaceModel.operands`,
the two per-sample allocations made just before it, as the size such a copy would take.
The size is an estimate (the what-if says so and gives a range,
:func:`.batch_scale.estimate_range`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..whatif import requests as rq
from . import evidence as ev

ALIGN_SLACK = 1024  # |d|: the remainder of the decomposition, bytes
MAX_SPLITS = 16  # copies of the weight beside it (split-K partial gradients)
MAX_MULTIPLE = 8  # k: activations per workspace, in halves up to this
UNIT_LOOKBACK = 16  # requests before the workspace searched for its activations
WEIGHT_WINDOW = 4  # requests either side searched for the weight (gradient) beside it
MIN_UNIT = 4096  # smaller: statistics and norm-layer vectors, not a convolution's tensors
MIN_WEIGHT = 512  # smaller: not taken as a weight beside a possible workspace

# How a workspace's fixed part was found (int8 per request).
NONE, DECOMPOSED, WEIGHT_BESIDE = range(3)
HOW = (
    "proportional",
    "fixed weight part + per-sample part (decomposed)",
    "the weight beside it fixed, the rest per-sample",
)


@dataclass
class WorkspaceModel:
    """Per request: the bytes of a workspace that stay at any batch size."""

    fixed: np.ndarray  # int64; 0 for every request that is not a workspace
    how: np.ndarray  # int8: NONE / DECOMPOSED / WEIGHT_BESIDE
    multiple: np.ndarray  # float64: k (activations per workspace); 0 when not decomposed
    # int64: the two largest per-sample allocations made just before a workspace, summed
    # (a convolution's input and output or their gradients): what an algorithm that
    # copies both operands asks for; 0 for every other request.
    operands: np.ndarray
    # bool: of the candidates passed in, those made beside a convolution's weight (see
    # :attr:`.scaling.Judgement.maybe_workspace`).
    maybe: np.ndarray


def weight_sizes(case, evd: ev.Evidence) -> np.ndarray:
    """Sorted sizes of the parameters: made by nn.Module (or categorised parameter)."""
    reqs = case.requests
    alloc = reqs.kind == rq.ALLOC
    m = alloc & (evd.provenance == ev.PROV_MODULE_STATE)
    if evd.categories is not None:
        m |= alloc & (evd.categories == "parameter")
    s = np.unique(reqs.size[m].astype(np.int64))
    return s[s > 512]


def _decompose(
    size: int, units: list[int], beside: int, weights: np.ndarray
) -> tuple[int, float] | None:
    """(fixed part, k) of the decomposition of ``size`` (see the module), or None."""
    if not units:
        return None
    halves = np.arange(1, 2 * MAX_MULTIPLE + 1, dtype=np.int64)
    o = np.asarray(units, np.int64)
    twice = halves[None, :] * o[:, None]  # 2 k O
    ok_half = twice % 2 == 0
    ko = (twice // 2)[ok_half]
    k = np.broadcast_to(halves[None, :] / 2, twice.shape)[ok_half]
    fixed = size - ko
    keep = fixed > -ALIGN_SLACK
    ko, k, fixed = ko[keep], k[keep], fixed[keep]
    best: tuple | None = None
    cands = (
        [(0, 0)]
        + ([(beside, MAX_SPLITS)] if beside else [])
        + [(int(w), 1) for w in weights.tolist() if w != beside]
    )
    for w, most in cands:
        if w:
            s = np.rint(fixed / w).astype(np.int64)
            d = fixed - s * w
        else:
            s = np.zeros(len(fixed), np.int64)
            d = fixed
        good = (np.abs(d) < ALIGN_SLACK) & (s >= 0) & (s <= most)
        if not good.any():
            continue
        # Fewest weight copies, then the largest per-sample part.
        order = np.lexsort((-ko[good], s[good]))
        j = int(order[0])
        key = (int(s[good][j]), -int(ko[good][j]))
        if best is None or key < best[0]:
            best = (key, int(fixed[good][j]), float(k[good][j]))
    return (best[1], best[2]) if best is not None else None


def fixed_parts(
    case,
    evd: ev.Evidence,
    workspace: np.ndarray,
    scales: np.ndarray,
    judged_fixed: np.ndarray,
    batch: int | None = None,
    candidates: np.ndarray | None = None,
) -> WorkspaceModel:
    """The :class:`WorkspaceModel` of a request stream.

    ``workspace``: bool per request (:attr:`~.scaling.Judgement.workspace`); ``scales``:
    judged to grow with the batch; ``judged_fixed``: judged model state (the weight
    gradients beside a backward workspace are); ``batch``: the recorded batch size, when
    known (an activation of the operation is then a whole number of bytes per sample);
    ``candidates``: per-sample-sized scratch allocations that may be workspaces too (kept
    in :attr:`WorkspaceModel.maybe` when a weight is beside them; never decomposed)."""
    reqs = case.requests
    n = len(reqs)
    size = reqs.size.astype(np.int64)
    alloc = reqs.kind == rq.ALLOC
    fixed = np.zeros(n, np.int64)
    how = np.zeros(n, np.int8)
    mult = np.zeros(n, np.float64)
    operands = np.zeros(n, np.int64)
    maybe = np.zeros(n, bool)
    cand = candidates & ~workspace if candidates is not None else np.zeros(n, bool)
    rows = np.flatnonzero(workspace)
    if not len(rows) and not cand.any():
        return WorkspaceModel(fixed, how, mult, operands, maybe)
    weights = weight_sizes(case, evd)
    # A weight, or its half-precision copy (autocast makes one beside each convolution
    # in forward, and its gradient in backward).
    weight_set = set(weights.tolist()) | {w // 2 for w in weights.tolist() if w % 2 == 0}
    unit_ok = alloc & scales & ~workspace & (size > MIN_UNIT)
    if batch:
        unit_ok &= size % int(batch) == 0
    beside_ok = alloc & judged_fixed & (size > MIN_UNIT)  # not a norm layer's vector
    beside = _beside(np.flatnonzero(workspace), size, beside_ok, weight_set)
    # A candidate needs only some weight's size beside it: a 1x1 convolution's weight
    # can be as small as a norm layer's vector (16 x 64 fp32 = 4 KiB in MobileNetV3).
    near = _beside(
        np.flatnonzero(cand), size, alloc & judged_fixed & (size > MIN_WEIGHT), weight_set
    )
    for i in near:
        maybe[i] = True
        operands[i] = _operands(i, size, unit_ok)
    # The convolutions' weights: those found beside a workspace (a weight gradient in
    # backward, autocast's weight copy in forward).  Only they can be the fixed part of
    # a workspace with none beside it: any parameter's size would match by chance too
    # often.
    conv_weights = np.array(sorted({w for i, w in beside.items() if workspace[i]}), np.int64)
    cache: dict[tuple, tuple[int, float] | None] = {}
    for i in rows.tolist():
        s = int(size[i])
        w = beside.get(i, 0)
        units: list[int] = []
        for k in range(i - 1, max(-1, i - UNIT_LOOKBACK - 1), -1):
            if unit_ok[k] and int(size[k]) not in units:
                units.append(int(size[k]))
        operands[i] = _operands(i, size, unit_ok)
        key = (s, w, tuple(units))
        if key not in cache:
            cache[key] = _decompose(s, units, w, conv_weights)
        got = cache[key]
        if got is not None:
            fixed[i], mult[i] = max(got[0], 0), got[1]
            how[i] = DECOMPOSED
        elif w:
            fixed[i] = w
            how[i] = WEIGHT_BESIDE
    return WorkspaceModel(fixed, how, mult, operands, maybe)


def _beside(rows: np.ndarray, size: np.ndarray, ok: np.ndarray, weight_set: set) -> dict[int, int]:
    """Row -> the size of the weight allocated beside it (within :data:`WEIGHT_WINDOW`
    requests either side, smaller than it), for the rows that have one."""
    n = len(size)
    out: dict[int, int] = {}
    for i in rows.tolist():
        s = int(size[i])
        for dist in range(1, WEIGHT_WINDOW + 1):
            # i + 1 is the workspace's own free: the next request after it is i + 2.
            near = [
                k
                for k in (i - dist, i + 1 + dist)
                if 0 <= k < n and ok[k] and size[k] < s and int(size[k]) in weight_set
            ]
            if near:
                out[i] = int(size[near[0]])
                break
    return out


def _operands(i: int, size: np.ndarray, unit_ok: np.ndarray) -> int:
    """The two largest per-sample allocations made just before request ``i``, summed."""
    lo = max(0, i - UNIT_LOOKBACK)
    made = np.sort(size[lo:i][unit_ok[lo:i]])
    return int(made[-2:].sum())
