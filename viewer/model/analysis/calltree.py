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


def call_tree(snap: Snapshot, stacks: np.ndarray, sizes: np.ndarray, categories: np.ndarray,
              fold: bool = True) -> CallNode:
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
                label = labels[fid] = fr.frame_view(snap.frames, fid, categories[fid]).short \
                    if fid >= 0 else "<no stack recorded>"
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
