"""A loaded snapshot plus the derived data every view shares.

Built once per load, on the loader thread: frame categories, the most telling
frame per stack and its label, and the last OOM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import frames as fr
from .analysis import Selection
from .oom import OomReport, last_oom
from .snapshot import Snapshot
from .units import format_address


@dataclass
class Document:
    snap: Snapshot
    categories: np.ndarray  # per frame
    top_frame: np.ndarray  # per stack: frame id or -1
    top_label: np.ndarray  # per stack: str (object array)
    top_rank: np.ndarray  # per stack: rank of top_label in sorted order (int64)
    oom: OomReport | None

    @classmethod
    def build(cls, snap: Snapshot) -> "Document":
        cats = fr.frame_categories(snap.frames)
        top = fr.top_frames(snap.stacks, cats)
        labels = np.empty(len(top), dtype=object)
        cache: dict[int, str] = {}
        for i, fid in enumerate(top.tolist()):
            if fid < 0:
                labels[i] = ""
                continue
            text = cache.get(fid)
            if text is None:
                text = cache[fid] = fr.frame_view(snap.frames, fid, cats[fid]).short
            labels[i] = text
        rank = np.empty(len(top), dtype=np.int64)
        if len(top):
            rank[np.argsort(labels.astype(str), kind="stable")] = np.arange(len(top))
        return cls(snap, cats, top, labels, rank, last_oom(snap))

    @property
    def name(self) -> str:
        return Path(self.snap.path).name if self.snap.path else "(snapshot)"

    def stack_label(self, stack: int) -> str:
        return "" if stack < 0 or stack >= len(self.top_label) else self.top_label[stack]

    def block_stack(self, block: int) -> int:
        return int(self.snap.blocks.stack[block])

    def block_top_label(self, block: int) -> str:
        return self.stack_label(self.block_stack(block))

    def blocks_in(self, selection: Selection) -> np.ndarray:
        """Block rows of the selected segments, ascending."""
        snap = self.snap
        if not len(snap.blocks):
            return np.zeros(0, dtype=np.int64)
        mask = selection.segment_mask(snap)[snap.blocks.segment]
        return np.flatnonzero(mask)

    def oom_in(self, selection: Selection) -> bool:
        """Is the last OOM's request about segments in this selection?"""
        o = self.oom
        if o is None:
            return False
        if selection.device is not None and selection.device != o.device:
            return False
        if selection.stream is not None and selection.stream != o.stream:
            return False
        if selection.is_small is not None and selection.is_small != (o.pool_kind == "small"):
            return False
        if selection.pool is not None and selection.pool != o.pool:
            return False
        return True


def pool_label(pool: tuple[int, int]) -> str:
    if tuple(pool) == (0, 0):
        return "pool (0, 0)"
    return f"private pool ({pool[0]}, {pool[1]})"


def stream_label(stream: int) -> str:
    return "stream 0" if stream == 0 else f"stream {format_address(stream)}"
