"""Classify and format stack frames: user code first, interpreter noise out.

Frames come from torch's combined Python + C++ unwinder.  For a person the
interesting frame is the innermost line of *their* Python code; torch's own
Python, C++ kernels and CPython internals are folded away unless asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .snapshot import Frames, Snapshot, Stacks

# Frames that are never informative (the unwinder itself, CPython's eval loop,
# dispatcher boxing); the same ground memory_viz filters.
NOISE_NAMES = (
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "__libc_init_first",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
    "_PyEval_",
    "_PyObject_",
    "_PyFunction_",
    "PyCMethod_",
    "_PyRun_",
    "PyRun_",
    "Py_RunMain",
    "Py_BytesMain",
    "pymain_",
    "_PyVectorcall",
    "cfunction_call",
)
NOISE_FILES = (
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
    "memory_snapshot.cpp",
)
# Python files that belong to torch, the interpreter or vramscope, not to the
# user.  Other installed libraries (transformers, timm, ...) are the user's
# model code: that is what a person wants to see holding memory.
INTERNAL_PACKAGES = ("torch/", "vramscope/", "runpy", "_pytest/", "pytest/", "pluggy/")
INTERNAL_PY_MARKERS = ("<frozen ", "/runpy.py", "/vramscope/")


def is_internal_python(filename: str) -> bool:
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1].startswith(INTERNAL_PACKAGES)
    if filename.startswith("torch/") or "/torch/" in filename:
        return True
    if "/lib/python3" in filename:  # the standard library
        return True
    return any(m in filename for m in INTERNAL_PY_MARKERS)


CAT_USER = 0  # the user's Python code
CAT_TORCH = 1  # torch's (or the standard library's) Python code
CAT_CPP = 2  # native frames
CAT_NOISE = 3  # never informative


def is_python_file(filename: str) -> bool:
    return filename.endswith(".py") or (filename.startswith("<") and filename.endswith(">"))


def classify(filename: str, name: str) -> int:
    if any(m in name for m in NOISE_NAMES) or any(m in filename for m in NOISE_FILES):
        return CAT_NOISE
    if is_python_file(filename):
        return CAT_TORCH if is_internal_python(filename) else CAT_USER
    return CAT_CPP


def frame_categories(frames: Frames) -> np.ndarray:
    """Category of every interned frame (int8), computed once per snapshot."""
    cache: dict[tuple[int, int], int] = {}
    out = np.empty(len(frames), dtype=np.int8)
    for i in range(len(frames)):
        key = (int(frames.filename[i]), int(frames.name[i]))
        cat = cache.get(key)
        if cat is None:
            cat = cache[key] = classify(frames.strings[key[0]], frames.strings[key[1]])
        out[i] = cat
    return out


def top_frames(stacks: Stacks, categories: np.ndarray) -> np.ndarray:
    """Per stack, the most telling frame id (-1 when the stack is empty).

    The innermost user frame; else the innermost torch Python frame; else the
    innermost native frame that is not noise.
    """
    n = len(stacks)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(stacks.frames) == 0:
        return out
    starts = stacks.offsets[:-1]
    lengths = np.diff(stacks.offsets)
    nonempty = lengths > 0
    cats = categories[stacks.frames]
    positions = np.arange(len(stacks.frames), dtype=np.int64)
    big = np.int64(len(stacks.frames) + 1)
    for wanted in (CAT_USER, CAT_TORCH, CAT_CPP):
        cand = np.where(cats == wanted, positions, big)
        first = np.full(n, big, dtype=np.int64)
        first[nonempty] = np.minimum.reduceat(cand, starts[nonempty])
        take = (out < 0) & (first < big)
        out[take] = stacks.frames[first[take]]
    return out


def folded_frame_ids(
    snap: Snapshot, stack: int, categories: np.ndarray, fold: bool = True
) -> list[int]:
    """Frame ids of ``stack`` that name it, outermost first (``[]``: no frames).

    Folded: the user's frames; else the innermost torch Python frame; else the
    innermost native frame.  Unfolded: every frame but interpreter noise.
    """
    if stack < 0:
        return []
    ids = snap.stacks.frame_ids(stack)
    cats = categories[ids]
    if fold:
        keep = ids[cats == CAT_USER]
        if not len(keep):
            keep = ids[cats == CAT_TORCH][:1]
        if not len(keep):
            keep = ids[cats == CAT_CPP][:1]
    else:
        keep = ids[cats != CAT_NOISE]
    return keep[::-1].tolist()


@dataclass(frozen=True)
class FrameView:
    """One frame ready for display."""

    frame_id: int
    filename: str
    line: int
    name: str
    category: int

    @property
    def short(self) -> str:
        base = self.filename.rsplit("/", 1)[-1] or "??"
        return f"{base}:{self.line} {self.name}" if self.line else f"{base} {self.name}"

    @property
    def full(self) -> str:
        return f'File "{self.filename}", line {self.line}, in {self.name}'


def frame_view(frames: Frames, fid: int, category: int) -> FrameView:
    return FrameView(
        frame_id=int(fid),
        filename=frames.strings[frames.filename[fid]],
        line=int(frames.line[fid]),
        name=frames.strings[frames.name[fid]],
        category=int(category),
    )


def stack_views(
    snap: Snapshot,
    stack: int,
    categories: np.ndarray,
    show_torch: bool = False,
    show_cpp: bool = False,
    show_noise: bool = False,
) -> list[FrameView]:
    """Frames of ``stack`` for display: user Python frames first (innermost
    first), then, when asked for, torch internals and native frames."""
    ids = snap.stacks.frame_ids(stack)
    views = [frame_view(snap.frames, fid, categories[fid]) for fid in ids]
    shown = {CAT_USER}
    if show_torch:
        shown.add(CAT_TORCH)
    if show_cpp:
        shown.add(CAT_CPP)
    if show_noise:
        shown.add(CAT_NOISE)
    picked = [v for v in views if v.category in shown]
    if not picked:
        # No user code in this stack (e.g. C++-only stacks): show what is
        # informative rather than an empty panel.
        picked = [v for v in views if v.category != CAT_NOISE]
    # User frames first, each group keeping innermost-first order.
    return sorted(picked, key=lambda v: v.category != CAT_USER)


def format_stack(views: list[FrameView]) -> str:
    """Text for the clipboard, Python-traceback style (innermost first)."""
    return "\n".join(v.full for v in views)


def stacks_matching(snap: Snapshot, text: str) -> np.ndarray:
    """Boolean per stack: does any frame's file or function contain ``text``?"""
    n = len(snap.stacks)
    if not text:
        return np.ones(n, dtype=bool)
    needle = text.lower()
    strings = snap.frames.strings
    hit_string = np.fromiter((needle in s.lower() for s in strings), dtype=bool, count=len(strings))
    frames = snap.frames
    hit_frame = (
        hit_string[frames.filename] | hit_string[frames.name] if len(frames) else np.zeros(0, bool)
    )
    if not len(snap.stacks.frames):
        return np.zeros(n, dtype=bool)
    hits = hit_frame[snap.stacks.frames].astype(np.int64)
    lengths = np.diff(snap.stacks.offsets)
    out = np.zeros(n, dtype=bool)
    nonempty = lengths > 0
    out[nonempty] = np.add.reduceat(hits, snap.stacks.offsets[:-1][nonempty]) > 0
    return out
