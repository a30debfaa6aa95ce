"""Who holds memory: live bytes grouped by allocation stack as a call tree.

Roots are outermost frames (``<module>``), leaves the innermost; each node
holds the bytes and count of live blocks whose stack passes through it.
Frames of torch internals, C++ and the interpreter can be folded away so the
tree names the user's model code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core import frames as fr
from ..core.snapshot import Snapshot


@dataclass
class CallNode:
    label: str  # "file.py:123 function", or "<no stack>"
    frame: int  # frame id, -1 for the root and synthetic nodes
    bytes: int = 0
    count: int = 0
    stacks: list[int] = field(default_factory=list)  # stacks ending at or below this node
    children: dict[tuple[int, str], "CallNode"] = field(default_factory=dict)

    def sorted_children(self) -> list["CallNode"]:
        return sorted(self.children.values(), key=lambda n: (-n.bytes, n.label))

    def walk(self):
        yield self
        for child in self.sorted_children():
            yield from child.walk()


def call_tree(
    snap: Snapshot, stacks: np.ndarray, sizes: np.ndarray, categories: np.ndarray, fold: bool = True
) -> CallNode:
    """Tree of ``sizes`` (per allocation) grouped by ``stacks`` (stack id per allocation).

    ``fold`` keeps only the user's frames (falling back to the most telling
    frame when a stack has none), so internals do not bury the model code.
    """
    root = CallNode("all live memory", -1)
    if not len(stacks):
        return root
    ids, inverse = np.unique(stacks, return_inverse=True)
    per_bytes = np.bincount(inverse, weights=sizes.astype(np.float64)).astype(np.int64)
    per_count = np.bincount(inverse)
    root.bytes = int(per_bytes.sum())
    root.count = int(per_count.sum())
    labels: dict[int, str] = {}
    for sid, nbytes, count in zip(ids.tolist(), per_bytes.tolist(), per_count.tolist()):
        path = _path(snap, sid, categories, fold)
        node = root
        node.stacks.append(sid)
        for fid in path:
            label = labels.get(fid)
            if label is None:
                label = labels[fid] = (
                    fr.frame_view(snap.frames, fid, categories[fid]).short
                    if fid >= 0
                    else "<no stack recorded>"
                )
            key = (fid, label)
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = CallNode(label, fid)
            child.bytes += nbytes
            child.count += count
            child.stacks.append(sid)
            node = child
    return root


def _path(snap: Snapshot, stack: int, categories: np.ndarray, fold: bool) -> list[int]:
    """Frame ids from outermost to innermost; ``[-1]`` for a stack with none."""
    return fr.folded_frame_ids(snap, stack, categories, fold) or [-1]


# --- where the memory was allocated: one frame per stack ----------------------------------
#: Native frames of the allocator and the tensor factories: every allocation passes through
#: them, so they never say where one was made.
ALLOCATOR_FILES = ("CUDACachingAllocator", "/c10/", "c10/core/", "c10/cuda/", "EmptyTensor.cpp")
#: Generated dispatcher wrappers (RegisterCUDA.cpp, ...): they make an operator's output,
#: the operator itself is the frame further out.
DISPATCH_FILE_PREFIX = "Register"
ALLOCATOR_NAMES = (
    "c10::",
    "at::detail::",
    "at::empty",
    "at::native::empty",
    "at::_ops::empty",
    "at::TensorBase::",
    "at::Tensor::",
    "at::meta::",
    "at::(anonymous namespace)::create_out",
)


def _qualified(name: str) -> str:
    """``at::detail::_empty_generic<long>`` of a demangled native frame's name (no return
    type, no arguments: ``c10::`` in an argument list says nothing of the function)."""
    head = name.split("(", 1)[0].strip()
    return head.rsplit(" ", 1)[-1]


def allocator_frames(snap: Snapshot) -> np.ndarray:
    """Bool per interned frame: the allocator's or a tensor factory's native frame."""
    frames = snap.frames
    strings = frames.strings
    bad_file = {
        i
        for i, s in enumerate(strings)
        if any(m in s for m in ALLOCATOR_FILES)
        or s.rsplit("/", 1)[-1].startswith(DISPATCH_FILE_PREFIX)
    }
    bad_name = {i for i, s in enumerate(strings) if _qualified(s).startswith(ALLOCATOR_NAMES)}
    if not len(frames):
        return np.zeros(0, bool)
    return np.isin(frames.filename, list(bad_file) or [-1]) | np.isin(
        frames.name, list(bad_name) or [-1]
    )


def site_frames(snap: Snapshot, categories: np.ndarray | None = None) -> np.ndarray:
    """Per stack id, the frame that says where its allocation was made (-1: none).

    The innermost of the user's frames; else the innermost torch Python frame; else the
    innermost native frame that is neither interpreter noise nor the allocator itself
    (``CUDACachingAllocator.cpp``, ``c10::``: every allocation passes through those);
    the allocator's frame only where a stack has nothing else."""
    cats = fr.frame_categories(snap.frames) if categories is None else categories
    plain = fr.top_frames(snap.stacks, cats)
    bad = allocator_frames(snap)
    if not bad.any():
        return plain
    skipped = cats.copy()
    skipped[bad] = fr.CAT_NOISE
    better = fr.top_frames(snap.stacks, skipped)
    return np.where(better >= 0, better, plain)


@dataclass
class Site:
    """Live bytes allocated at one frame (the user's line where the stack has one)."""

    label: str  # "file.py:123 function", or "<no stack recorded>"
    filename: str
    line: int
    function: str
    bytes: int
    count: int

    def to_dict(self) -> dict:
        return {
            "frame": self.label,
            "filename": self.filename,
            "line": self.line,
            "function": self.function,
            "bytes": self.bytes,
            "count": self.count,
        }


def top_sites(
    snap: Snapshot,
    stacks: np.ndarray,
    sizes: np.ndarray,
    top: int = 5,
    sites: np.ndarray | None = None,
) -> list[Site]:
    """The ``top`` frames holding the most of ``sizes`` (one per allocation, with its stack
    id in ``stacks``), largest first; ``sites``: :func:`site_frames` when the caller has
    it.  Columns only: grouped with numpy, one Python object per site returned."""
    if not len(stacks) or top <= 0:
        return []
    sites = site_frames(snap) if sites is None else sites
    st = np.asarray(stacks, np.int64)
    valid = (st >= 0) & (st < len(sites))
    fid = np.full(len(st), -1, np.int64)
    fid[valid] = sites[st[valid]]
    ids, inv = np.unique(fid, return_inverse=True)
    nbytes = np.zeros(len(ids), np.int64)
    np.add.at(nbytes, inv, np.asarray(sizes, np.int64))  # exact in int64
    counts = np.bincount(inv, minlength=len(ids))
    order = np.lexsort((ids, -nbytes))[:top]
    frames = snap.frames
    out = []
    for j in order.tolist():
        f = int(ids[j])
        if f < 0:
            out.append(Site("<no stack recorded>", "", 0, "", int(nbytes[j]), int(counts[j])))
            continue
        view = fr.frame_view(frames, f, 0)
        out.append(
            Site(view.short, view.filename, view.line, view.name, int(nbytes[j]), int(counts[j]))
        )
    return out
