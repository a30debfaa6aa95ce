"""Leaks: live bytes that grow iteration after iteration and are never freed,
grouped by the line of the user's own code that allocated them.

At an event K (the end of the recording by default), every allocation made
inside a complete iteration and still alive is a *survivor* of that
iteration.  A healthy training loop leaves survivors only in its first
iteration (optimizer state is created lazily there) and in its last one
(gradients, the loss and the next batch are still in use), so those two are
not looked at: a line is leaking when it left survivors in at least
:data:`MIN_SHARE` of the iterations between them (and at least
:data:`MIN_ITERATIONS`).  Its growth per iteration is the survivors' bytes of
those iterations divided by their number.

:func:`leak_interval_mask` and :func:`leaked_blocks` say which allocations (and blocks
at an instant) the leaks keep, so that the colour views and the report paint them as
a leak (:data:`LEAK_LABEL`) rather than as their category.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.frames import CAT_USER, frame_categories, top_frames
from ..core.snapshot import Snapshot
from ..core.units import format_bytes, plural
from ..replay.timeline import Intervals
from .iterations import Iteration, IterationOf

MIN_ITERATIONS = 2
MIN_SHARE = 0.6


@dataclass(frozen=True)
class Leak:
    """One leaking line of code."""

    frame: str  # "file.py:LINE" (file name only)
    filename: str  # the full path as recorded
    line: int
    function: str
    bytes_per_iteration: int
    iterations: int  # iterations that left survivors from this line
    live_bytes: int  # survivors' bytes at the event looked at
    per_iteration: tuple[int, ...]  # survivors' bytes per complete iteration
    stack: int  # a stack id of one survivor (to show where it came from)
    allocations: np.ndarray  # interval ids of the survivors (to highlight them)
    user_code: bool  # False: no frame of the user's own code; the innermost frame is named
    caller: str = ""  # "file.py:LINE" of the program's own file (not an installed library)
    # that led there, when ``frame`` is inside a library (transformers, timm, ...)

    def to_dict(self) -> dict:
        return {
            "frame": self.frame,
            "filename": self.filename,
            "line": self.line,
            "function": self.function,
            "bytes_per_iteration": self.bytes_per_iteration,
            "iterations": self.iterations,
            "live_bytes": self.live_bytes,
            "per_iteration_bytes": list(self.per_iteration),
            "user_code": self.user_code,
            "caller": self.caller or None,
        }

    def sentence(self) -> str:
        """'train.py:57 keeps 31.25 MiB per iteration (8 iterations, 250 MiB now)'."""
        via = f", called from {self.caller}" if self.caller else ""
        return (
            f"{self.frame} ({self.function}{via}) keeps "
            f"{format_bytes(self.bytes_per_iteration)} "
            f"per iteration ({plural(self.iterations, 'iteration')}, "
            f"{format_bytes(self.live_bytes)} now)"
        )


def leak_frames(snap: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    """(frame id, is user code) per stack: the innermost frame of the user's own code,
    else the most telling one; -1 for empty stacks."""
    cats = frame_categories(snap.frames)
    top = top_frames(snap.stacks, cats)
    user = np.zeros(len(top), bool)
    ok = top >= 0
    user[ok] = cats[top[ok]] == CAT_USER
    return top, user


def find_leaks(
    snap: Snapshot,
    iv: Intervals,
    iterations: list[Iteration],
    iteration_of_event: np.ndarray | IterationOf,
    at: int,
    frames: tuple[np.ndarray, np.ndarray] | None = None,
    exclude: np.ndarray | None = None,
) -> list[Leak]:
    """Leaking lines as of event ``at``, largest growth first (``exclude``: bool per
    allocation never counted, e.g. a generation's KV cache, freed when its request ends)."""
    done = [it for it in iterations if it.complete and it.end <= at]
    if len(done) < MIN_ITERATIONS + 2:
        return []
    eligible = np.array([it.index for it in done[1:-1]], np.int64)
    alive = np.flatnonzero((iv.start >= 0) & (iv.start <= at) & (iv.end > at))
    if exclude is not None:
        alive = alive[~exclude[alive]]
    if not len(alive):
        return []
    it_of = iteration_of_event[iv.start[alive]].astype(np.int64)
    # After the last iteration (the leaking line may run after the optimizer step): one
    # more span, counted in live bytes and iterations but never judged.
    last_end = iterations[-1].end
    it_of[iv.start[alive] > last_end] = len(iterations)
    top, user = frames if frames is not None else leak_frames(snap)
    stack = iv.stack[alive]
    fid = np.where(stack >= 0, top[np.clip(stack, 0, max(len(top) - 1, 0))] if len(top) else -1, -1)
    # Group by file:line (frames differing only in function name are one line).
    fr = snap.frames
    line_key = (
        np.where(
            fid >= 0,
            fr.filename[np.maximum(fid, 0)].astype(np.int64) * (1 << 31)
            + fr.line[np.maximum(fid, 0)],
            -1,
        )
        if len(fr)
        else np.full(len(fid), -1)
    )
    groups, group_of = np.unique(line_key, return_inverse=True)
    n_it = len(iterations) + 1
    elig_mask = np.zeros(n_it, bool)
    elig_mask[eligible] = True
    in_elig = (it_of >= 0) & elig_mask[np.where(it_of >= 0, it_of, n_it - 1)]
    req = iv.requested[alive]
    hits = np.zeros(len(groups), np.int64)
    key = group_of[in_elig].astype(np.int64) * n_it + it_of[in_elig]
    uk = np.unique(key)
    np.add.at(hits, uk // n_it, 1)
    need = max(MIN_ITERATIONS, math.ceil(MIN_SHARE * len(eligible)))
    out = []
    for g in np.flatnonzero(hits >= need).tolist():
        mine = group_of == g
        per_it = np.bincount(
            it_of[mine & (it_of >= 0)], weights=req[mine & (it_of >= 0)], minlength=n_it + 1
        ).astype(np.int64)
        per_done = tuple(int(per_it[it.index]) for it in done)
        growth = int(round(per_it[eligible].sum() / len(eligible)))
        if growth <= 0:
            continue
        ids = alive[mine & (it_of >= 0)]
        f = int(fid[np.flatnonzero(mine)[0]])
        st = int(iv.stack[ids[np.argmax(iv.requested[ids])]])
        if f >= 0:
            filename = fr.strings[fr.filename[f]]
            line = int(fr.line[f])
            function = fr.strings[fr.name[f]]
            frame = f"{filename.rsplit('/', 1)[-1]}:{line}"
            is_user = bool(user[stack[np.flatnonzero(mine)[0]]]) if len(user) else False
        else:
            filename, line, function, frame, is_user = "", 0, "", "(no stack)", False
        caller = _own_caller(snap, st, filename)
        out.append(
            Leak(
                caller=caller,
                frame=frame,
                filename=filename,
                line=line,
                function=function,
                bytes_per_iteration=growth,
                iterations=int((per_it > 0).sum()),
                live_bytes=int(per_it.sum()),
                per_iteration=per_done,
                stack=st,
                allocations=ids,
                user_code=is_user,
            )
        )
    out.sort(key=lambda lk: -lk.bytes_per_iteration)
    return out


def _own_caller(snap: Snapshot, stack: int, named_file: str) -> str:
    """The innermost frame of ``stack`` in the program's own files (the user's code, not an
    installed library), when the named frame is inside a library; else ''."""
    if stack < 0 or not any(m in named_file for m in _INSTALLED):
        return ""
    cats = frame_categories(snap.frames)
    for fid in snap.stacks.frame_ids(stack).tolist():
        if cats[fid] != CAT_USER:
            continue
        name = snap.frames.filename_of(fid)
        if not any(m in name for m in _INSTALLED):
            return f"{name.rsplit('/', 1)[-1]}:{int(snap.frames.line[fid])}"
    return ""


_INSTALLED = ("/site-packages/", "/dist-packages/")


# What the colour views (and the report) call what a leaking line keeps: painted as a leak
# rather than as its category ("unknown", mostly).
LEAK_LABEL = "leak"


def leak_interval_mask(bd) -> np.ndarray:
    """bool per allocation (interval id) of ``bd``'s device: kept by a leaking line
    (the survivors of every :attr:`MemoryBreakdown.leaks` entry)."""
    mask = np.zeros(len(bd.category), bool)
    for lk in bd.leaks:
        ids = np.asarray(lk.allocations, np.int64)
        mask[ids[(ids >= 0) & (ids < len(mask))]] = True
    return mask


def leaked_blocks(bd, k: int, addresses: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """bool per block address of ``addresses``: the allocation live there after event
    ``k`` is kept by a leaking line (``mask``: :func:`leak_interval_mask`, if made)."""
    addresses = np.asarray(addresses, np.int64)
    out = np.zeros(len(addresses), bool)
    if not bd.leaks or not len(addresses) or not bd.n_events:
        return out
    mask = leak_interval_mask(bd) if mask is None else mask
    live = bd.live(min(max(int(k), 0), bd.n_events - 1))
    live = live[mask[live]]
    if not len(live):
        return out
    keys = np.sort(bd.intervals.addr[live])
    pos = np.minimum(np.searchsorted(keys, addresses), len(keys) - 1)
    return keys[pos] == addresses
