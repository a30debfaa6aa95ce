"""Compare two snapshots: what grew, by allocation stack, device and pool.

Stacks and frames are interned per file, so stack ids mean nothing across
files.  Live blocks (allocated or pending free) are grouped instead by a
*stack key*: the tuple of their resolved frames ``(filename, line, name)``,
outermost first.  By default the key is folded to the user's own frames (as
the call tree folds them), so the same model line allocating through a
different torch internal path still matches; without user frames the most
telling frame stands in (innermost torch Python frame, else native frame).

* **added**: a key only B holds live memory under; **removed**: only A;
  **changed**: both, with different bytes; **unchanged**: same bytes.
* Rows are sorted by growth (bytes in B - bytes in A), largest first.
* The stack deltas add up exactly to ``delta active_bytes``.
* ``depth=1`` keys by the allocating line alone (two entry points reaching the
  same model code), ``lines=False`` ignores line numbers (before / after an
  edit); a call-tree diff (:attr:`SnapshotDiff.tree`) merges the keys by path.

Figure deltas are ``memory_stats(B) - memory_stats(A)`` for everything, per
device, and per ``(device, pool id, stream, small/large)``; pools are matched
by the pool's id tuple (not its index, which is per file).  On snapshots
taken with :mod:`vramscope.capture` (or a ``NAME.json`` with
``memory_stats``) these deltas equal the differences of the allocator's own
counters, which :attr:`SnapshotDiff.counters` carries beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..analysis.calltree import site_frames
from ..analysis.figures import MemoryStats, Selection, memory_stats, pool_keys
from ..analysis.focus import default_trace_device
from ..analysis.oom import last_oom, oom_reports
from ..core import frames as fr
from ..core.snapshot import BlockState, Snapshot
from ..core.units import format_bytes, plural

STATUS_ADDED = "added"
STATUS_REMOVED = "removed"
STATUS_CHANGED = "changed"
STATUS_UNCHANGED = "unchanged"

STAT_FIELDS = tuple(f.name for f in fields(MemoryStats))
# Counters of torch.cuda.memory_stats() whose differences the diff reports
# beside its own (when both files have a sidecar).
COUNTER_KEYS = (
    "reserved_bytes.all.current",
    "allocated_bytes.all.current",
    "active_bytes.all.current",
    "requested_bytes.all.current",
    "segment.all.current",
    "inactive_split_bytes.all.current",
    "reserved_bytes.all.peak",
    "allocated_bytes.all.peak",
    "active_bytes.all.peak",
    "requested_bytes.all.peak",
    "num_ooms",
)
NO_STACK_FRAME = ("<no stack recorded>", 0, "")

Frame = tuple[str, int, str]  # (filename, line, name)


def frame_label(frame: Frame) -> str:
    """``file.py:123 name``, as the rest of the viewer labels frames."""
    filename, line, name = frame
    if frame == NO_STACK_FRAME:
        return filename
    base = filename.rsplit("/", 1)[-1] or "??"
    return f"{base}:{line} {name}" if line else f"{base} {name}"


@dataclass
class StackDiff:
    """Live memory under one stack key in A and in B."""

    key: tuple[Frame, ...]  # outermost first
    bytes_a: int = 0
    bytes_b: int = 0
    count_a: int = 0
    count_b: int = 0
    stacks_a: list[int] = field(default_factory=list)  # stack ids in A with this key
    stacks_b: list[int] = field(default_factory=list)

    @property
    def delta(self) -> int:
        return self.bytes_b - self.bytes_a

    @property
    def delta_count(self) -> int:
        return self.count_b - self.count_a

    @property
    def status(self) -> str:
        if not self.count_a:
            return STATUS_ADDED
        if not self.count_b:
            return STATUS_REMOVED
        return STATUS_CHANGED if self.bytes_a != self.bytes_b else STATUS_UNCHANGED

    @property
    def label(self) -> str:
        """The innermost frame of the key: the line that allocated."""
        return frame_label(self.key[-1]) if self.key else frame_label(NO_STACK_FRAME)

    def frame_labels(self) -> list[str]:
        """The key's frames, innermost first (traceback order, most telling first)."""
        return [frame_label(f) for f in reversed(self.key)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "delta_bytes": self.delta,
            "bytes_a": self.bytes_a,
            "bytes_b": self.bytes_b,
            "count_a": self.count_a,
            "count_b": self.count_b,
            "delta_count": self.delta_count,
            "label": self.label,
            "frames": self.frame_labels(),
        }


@dataclass
class DiffNode:
    """A call-tree node of the diff: live bytes under a call path in A and B."""

    label: str
    frame: Frame | None
    bytes_a: int = 0
    bytes_b: int = 0
    count_a: int = 0
    count_b: int = 0
    children: dict[Frame, "DiffNode"] = field(default_factory=dict)
    rows: list[int] = field(default_factory=list)  # indices into SnapshotDiff.stacks

    @property
    def delta(self) -> int:
        return self.bytes_b - self.bytes_a

    def sorted_children(self) -> list["DiffNode"]:
        """Largest growth first, then largest shrink last (by delta, then label)."""
        return sorted(self.children.values(), key=lambda n: (-n.delta, n.label))

    def walk(self):
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.sorted_children()))


@dataclass
class ScopeDelta:
    """Figures of one scope (everything, a device, a pool) in A and B."""

    a: MemoryStats
    b: MemoryStats

    def delta(self, name: str):
        return getattr(self.b, name) - getattr(self.a, name)

    def deltas(self) -> dict[str, int | float]:
        return {name: self.delta(name) for name in STAT_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "delta": self.deltas()}


@dataclass(frozen=True)
class PoolId:
    """A pool matched across files: the pool's id tuple, not its per-file index."""

    device: int
    pool_id: tuple[int, int]
    stream: int
    is_small: bool

    def selection(self, snap: Snapshot) -> Selection | None:
        if self.pool_id not in [tuple(p) for p in snap.pools]:
            return None
        index = [tuple(p) for p in snap.pools].index(self.pool_id)
        return Selection(self.device, index, self.stream, self.is_small)


@dataclass
class SnapshotDiff:
    a: Snapshot
    b: Snapshot
    total: ScopeDelta
    devices: dict[int, ScopeDelta]
    pools: dict[PoolId, ScopeDelta]
    stacks: list[StackDiff]  # by growth, largest first
    tree: DiffNode
    counters: dict[str, dict[str, int]] | None  # allocator counters of the sidecars
    peaks: dict[str, dict[str, int | None]] | None = None  # replayed peaks, when asked
    fold: bool = True
    lines: bool = True
    depth: int | None = None

    def delta(self, name: str):
        return self.total.delta(name)

    def by_status(self, status: str) -> list[StackDiff]:
        return [s for s in self.stacks if s.status == status]

    def growing(self) -> list[StackDiff]:
        return [s for s in self.stacks if s.delta > 0]

    def shrinking(self) -> list[StackDiff]:
        return sorted((s for s in self.stacks if s.delta < 0), key=lambda s: s.delta)

    def stack_mask(self, side: str, rows: list[int] | None = None) -> np.ndarray:
        """Per stack id of A (``side="a"``) or B: is it under the given rows of
        :attr:`stacks` (all rows with a non-zero delta by default)?"""
        snap = self.a if side == "a" else self.b
        mask = np.zeros(len(snap.stacks), dtype=bool)
        picked = self.stacks if rows is None else [self.stacks[i] for i in rows]
        for s in picked:
            if rows is None and not s.delta:
                continue
            ids = [i for i in (s.stacks_a if side == "a" else s.stacks_b) if i >= 0]
            mask[ids] = True
        return mask

    def to_dict(self, top: int = 20) -> dict[str, Any]:
        """JSON-ready: ``delta_<figure>`` for every figure, scopes, top stacks."""
        out: dict[str, Any] = {
            "a": _side_dict(self.a, self.total.a),
            "b": _side_dict(self.b, self.total.b),
        }
        for name, value in self.total.deltas().items():
            out[f"delta_{name}"] = value
        if self.peaks:
            for name, v in self.peaks.items():
                out[f"delta_{name}"] = v["delta"]
        out["peaks"] = self.peaks
        out["counters"] = self.counters
        out["devices"] = [{"device": d, **sd.to_dict()} for d, sd in sorted(self.devices.items())]
        out["pools"] = [
            {
                "device": k.device,
                "pool_id": list(k.pool_id),
                "stream": k.stream,
                "segment_type": "small" if k.is_small else "large",
                **sd.to_dict(),
            }
            for k, sd in sorted(self.pools.items(), key=lambda kv: _pool_sort(kv[0]))
        ]
        counts = {s: 0 for s in (STATUS_ADDED, STATUS_REMOVED, STATUS_CHANGED, STATUS_UNCHANGED)}
        for s in self.stacks:
            counts[s.status] += 1
        out["stack_counts"] = counts
        out["stack_key"] = {"fold": self.fold, "lines": self.lines, "depth": self.depth}
        out["top_stacks"] = [s.to_dict() for s in self.growing()[:top]]
        out["top_shrinking_stacks"] = [s.to_dict() for s in self.shrinking()[:top]]
        return out


def _pool_sort(k: PoolId):
    return (k.device, k.pool_id, k.stream, k.is_small)


def _side_dict(snap: Snapshot, stats: MemoryStats) -> dict[str, Any]:
    oom = last_oom(snap)
    return {
        "file": snap.path,
        "format": snap.source_format,
        **stats.to_dict(),
        "oom": oom.verdict if oom is not None else None,
    }


# --------------------------------------------------------------------------- stack keys


def stack_key_ids(
    snap: Snapshot,
    stack: int,
    categories: np.ndarray,
    fold: bool = True,
    sites: np.ndarray | None = None,
) -> list[int]:
    """Frame ids of ``stack``'s key, outermost first (``[]``: no stack recorded);
    the call tree's folding rule (:func:`frames.folded_frame_ids`).  Folded, a stack with
    none of the user's frames is keyed by its allocation site (``sites``:
    :func:`..analysis.calltree.site_frames`), never by the allocator's own frame, which
    every allocation passes through."""
    ids = fr.folded_frame_ids(snap, stack, categories, fold)
    if (
        fold
        and sites is not None
        and 0 <= stack < len(sites)
        and len(ids) == 1
        and categories[ids[0]] != fr.CAT_USER
        and sites[stack] >= 0
    ):
        return [int(sites[stack])]
    return ids


def stack_keys(
    snap: Snapshot,
    stacks: list[int],
    categories: np.ndarray | None = None,
    fold: bool = True,
    lines: bool = True,
    depth: int | None = None,
) -> dict[int, tuple[Frame, ...]]:
    """The key (resolved frames, outermost first) of each stack id in ``stacks``;
    ``depth`` keeps only that many innermost frames."""
    cats = fr.frame_categories(snap.frames) if categories is None else categories
    frames = snap.frames
    sites = site_frames(snap, cats) if fold else None
    resolved: dict[int, Frame] = {}
    out: dict[int, tuple[Frame, ...]] = {}
    for sid in stacks:
        ids = stack_key_ids(snap, int(sid), cats, fold, sites)
        if depth:
            ids = ids[-depth:]
        key = []
        for fid in ids:
            f = resolved.get(fid)
            if f is None:
                f = resolved[fid] = (
                    frames.strings[frames.filename[fid]],
                    int(frames.line[fid]) if lines else 0,
                    frames.strings[frames.name[fid]],
                )
            key.append(f)
        out[int(sid)] = tuple(key) if key else (NO_STACK_FRAME,)
    return out


def live_by_stack(snap: Snapshot) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack ids holding live blocks (allocated or pending free), their bytes and counts."""
    b = snap.blocks
    live = (b.state == BlockState.ALLOCATED) | (b.state == BlockState.PENDING_FREE)
    stacks = b.stack[live].astype(np.int64)
    sizes = b.size[live].astype(np.int64)
    if not len(stacks):
        z = np.zeros(0, np.int64)
        return z, z, z
    ids, inv = np.unique(stacks, return_inverse=True)
    per_bytes = np.zeros(len(ids), dtype=np.int64)
    np.add.at(per_bytes, inv, sizes)  # exact in int64 (no float rounding)
    return ids, per_bytes, np.bincount(inv, minlength=len(ids)).astype(np.int64)


# --------------------------------------------------------------------------- the diff


def diff_snapshots(
    a: Snapshot,
    b: Snapshot,
    fold: bool = True,
    lines: bool = True,
    depth: int | None = None,
    categories_a: np.ndarray | None = None,
    categories_b: np.ndarray | None = None,
    timelines: tuple[Any, Any] | None = None,
) -> SnapshotDiff:
    """Compare ``a`` (before) with ``b`` (after).

    ``fold=False`` keys stacks by every non-noise frame instead of the user's;
    ``lines=False`` ignores line numbers (matches a function across an edit);
    ``depth=1`` keys by the allocating line alone (matches it whoever called
    it, e.g. two scripts or a moved caller), ``depth=N`` by the N innermost frames.
    ``timelines`` (``build_timeline`` of each) adds the replayed peaks' deltas.
    """
    groups: dict[tuple[Frame, ...], StackDiff] = {}
    for side, snap, cats in (("a", a, categories_a), ("b", b, categories_b)):
        ids, nbytes, counts = live_by_stack(snap)
        keys = stack_keys(snap, ids.tolist(), cats, fold, lines, depth)
        for sid, nb, cnt in zip(ids.tolist(), nbytes.tolist(), counts.tolist()):
            key = keys[sid]
            g = groups.get(key)
            if g is None:
                g = groups[key] = StackDiff(key)
            if side == "a":
                g.bytes_a += nb
                g.count_a += cnt
                g.stacks_a.append(sid)
            else:
                g.bytes_b += nb
                g.count_b += cnt
                g.stacks_b.append(sid)
    rows = sorted(groups.values(), key=lambda s: (-s.delta, -max(s.bytes_a, s.bytes_b), s.label))
    total = ScopeDelta(memory_stats(a), memory_stats(b))
    devices = {
        d: ScopeDelta(memory_stats(a, Selection(device=d)), memory_stats(b, Selection(device=d)))
        for d in sorted(set(a.devices) | set(b.devices))
    }
    pools: dict[PoolId, ScopeDelta] = {}
    ids_a = {_pool_id(a, k): k for k in pool_keys(a)}
    ids_b = {_pool_id(b, k): k for k in pool_keys(b)}
    for pid in sorted(set(ids_a) | set(ids_b), key=_pool_sort):
        sa = memory_stats(a, ids_a[pid].selection()) if pid in ids_a else _EMPTY
        sb = memory_stats(b, ids_b[pid].selection()) if pid in ids_b else _EMPTY
        pools[pid] = ScopeDelta(sa, sb)
    return SnapshotDiff(
        a,
        b,
        total,
        devices,
        pools,
        rows,
        _tree(rows),
        _counters(a, b),
        _peaks(timelines, (a, b)) if timelines else None,
        fold,
        lines,
        depth,
    )


def _pool_id(snap: Snapshot, k) -> PoolId:
    p = snap.pools[k.pool]
    return PoolId(k.device, (int(p[0]), int(p[1])), k.stream, k.is_small)


_ZEROS: dict[str, Any] = {name: (0.0 if name == "fragmentation" else 0) for name in STAT_FIELDS}
_EMPTY = MemoryStats(**_ZEROS)


def _tree(rows: list[StackDiff]) -> DiffNode:
    root = DiffNode("all live memory", None)
    for i, s in enumerate(rows):
        node = root
        nodes = [root]
        for f in s.key:
            child = node.children.get(f)
            if child is None:
                child = node.children[f] = DiffNode(frame_label(f), f)
            nodes.append(child)
            node = child
        for n in nodes:
            n.bytes_a += s.bytes_a
            n.bytes_b += s.bytes_b
            n.count_a += s.count_a
            n.count_b += s.count_b
            n.rows.append(i)
    return root


def _counters(a: Snapshot, b: Snapshot) -> dict[str, dict[str, int]] | None:
    sa = (a.sidecar or {}).get("memory_stats")
    sb = (b.sidecar or {}).get("memory_stats")
    if not isinstance(sa, dict) or not isinstance(sb, dict):
        return None
    out = {}
    for key in COUNTER_KEYS:
        va, vb = sa.get(key), sb.get(key)
        if isinstance(va, int) and isinstance(vb, int):
            out[key] = {"a": va, "b": vb, "delta": vb - va}
    return out or None


def _peaks(timelines, snaps: tuple[Snapshot, Snapshot]) -> dict[str, dict[str, int | None]]:
    """Each side's peaks on the device it answers for (the last OOM's, else the highest
    peak: :func:`..analysis.focus.default_trace_device`), never a maximum over devices
    that are not the same GPU."""
    out: dict[str, dict[str, int | None]] = {}
    values = []
    for tl, snap in zip(timelines, snaps):
        side: dict[str, int | None] = {}
        dev = default_trace_device(snap) if tl is not None else None
        rep = tl.replay(dev) if tl is not None and dev is not None else None
        for curve in ("reserved", "allocated", "active", "requested"):
            side[curve] = int(rep.peak(curve)[0]) if rep is not None and len(rep) else None
        values.append(side)
    for curve in ("reserved", "allocated", "active", "requested"):
        va, vb = values[0][curve], values[1][curve]
        out[f"peak_{curve}_bytes"] = {
            "a": va,
            "b": vb,
            "delta": vb - va if va is not None and vb is not None else None,
        }
    return out


# --------------------------------------------------------------------------- text


TEXT_FIGURES = (
    ("reserved_bytes", "reserved"),
    ("allocated_bytes", "allocated"),
    ("active_bytes", "active"),
    ("requested_bytes", "requested"),
    ("free_bytes", "free in segments"),
    ("largest_free_block_bytes", "largest free block"),
    ("fragmentation", "fragmentation"),
    ("segment_count", "segments"),
    ("expandable_segment_count", "expandable segments"),
    ("allocation_count", "allocations"),
)


def signed_bytes(n: int) -> str:
    return ("+" if n > 0 else "") + format_bytes(n) if n else "0 B"


def format_text(diff: SnapshotDiff, top: int = 10) -> str:
    """A human-readable report of the diff."""
    # The columns are "A" and "B": the full paths are printed once above them (a file name
    # as a column heading made the table hundreds of characters wide).
    lines = [f"A: {diff.a.path or '(snapshot)'}", f"B: {diff.b.path or '(snapshot)'}", ""]
    w = 12
    lines.append(f"{'':<20}{'A':>{w}}  {'B':>{w}}  {'B - A':>12}")

    def row(label, va, vb, d, fmt, sfmt):
        lines.append(f"{label:<20}{fmt(va):>{w}}  {fmt(vb):>{w}}  {sfmt(d):>12}")

    for key, label in TEXT_FIGURES:
        va, vb = getattr(diff.total.a, key), getattr(diff.total.b, key)
        if key == "expandable_segment_count" and not (va or vb):
            continue
        if key == "fragmentation":
            row(label, va, vb, vb - va, lambda v: f"{v:.1%}", lambda d: f"{d * 100:+.1f} pt")
        elif key.endswith("_bytes"):
            row(label, va, vb, vb - va, format_bytes, signed_bytes)
        else:
            row(label, va, vb, vb - va, lambda v: f"{v:,}", lambda d: f"{d:+,}")
    if diff.peaks:
        for curve in ("reserved", "allocated"):
            p = diff.peaks[f"peak_{curve}_bytes"]
            if p["delta"] is not None:
                row(f"peak {curve}", p["a"], p["b"], p["delta"], format_bytes, signed_bytes)
    lines.extend(_oom_lines(diff, row))
    if len(diff.devices) > 1:
        lines.append("")
        for d, sd in sorted(diff.devices.items()):
            lines.append(
                f"device {d}: reserved {signed_bytes(sd.delta('reserved_bytes'))}, "
                f"allocated {signed_bytes(sd.delta('allocated_bytes'))}"
            )
    changed_pools = [
        (k, sd)
        for k, sd in diff.pools.items()
        if sd.delta("reserved_bytes") or sd.delta("allocated_bytes")
    ]
    if len(diff.pools) > 1 and changed_pools:
        lines.append("")
        lines.append("by pool (device, pool, stream, small/large):")
        for k, sd in sorted(changed_pools, key=lambda kv: _pool_sort(kv[0])):
            stream = "0" if not k.stream else f"0x{k.stream:x}"
            lines.append(
                f"  cuda:{k.device} pool {k.pool_id} stream {stream} "
                f"{'small' if k.is_small else 'large'}: reserved "
                f"{signed_bytes(sd.delta('reserved_bytes'))}, allocated "
                f"{signed_bytes(sd.delta('allocated_bytes'))}"
            )
    counts = {s: len(diff.by_status(s)) for s in (STATUS_ADDED, STATUS_REMOVED, STATUS_CHANGED)}
    lines.append("")
    lines.append(
        f"live memory by allocation stack: {counts[STATUS_ADDED]} added, "
        f"{counts[STATUS_REMOVED]} removed, {counts[STATUS_CHANGED]} changed"
    )
    grow = diff.growing()[:top]
    shrink = diff.shrinking()[:top]
    labels = distinct_labels(grow + shrink)
    if grow:
        lines.append("top stacks by growth:")
        lines.extend(_stack_line(s, labels[id(s)]) for s in grow)
    if shrink:
        lines.append("top stacks by shrink:")
        lines.extend(_stack_line(s, labels[id(s)]) for s in shrink)
    return "\n".join(lines)


def distinct_labels(rows: list[StackDiff]) -> dict[int, str]:
    """``id(row)`` -> its label, made distinct: rows whose allocating line is the same
    (different callers) get "called from" their nearest caller that tells them apart
    (``#2``, ``#3`` where none does, e.g. keys that differ only by line numbers cut off)."""
    by_label: dict[str, list[StackDiff]] = {}
    for s in rows:
        by_label.setdefault(s.label, []).append(s)
    out: dict[int, str] = {}
    for label, same in by_label.items():
        if len(same) == 1:
            out[id(same[0])] = label
            continue
        for n, s in enumerate(same):
            callers = list(reversed(s.key[:-1]))  # nearest caller first
            others = [set(o.key[:-1]) for o in same if o is not s]
            pick = next((f for f in callers if any(f not in o for o in others)), None)
            out[id(s)] = (
                f"{label}, called from {frame_label(pick)}"
                if pick is not None
                else f"{label} #{n + 1}"
            )
    return out


def _oom_lines(diff: SnapshotDiff, row) -> list[str]:
    """The OOM count of each side (in its trace) as a figure row, then each side's last verdict."""
    reports = [oom_reports(diff.a), oom_reports(diff.b)]
    na, nb = len(reports[0]), len(reports[1])
    row("OOMs (in the trace)", na, nb, nb - na, lambda v: f"{v:,}", lambda d: f"{d:+,}")
    lines = []
    for side, found in zip("AB", reports):
        if found:
            last = found[-1]
            lines.append(
                f"{side}'s {'last ' if len(found) > 1 else ''}OOM: "
                f"{format_bytes(last.requested_bytes)} requested on device "
                f"{last.device}: {last.verdict}"
            )
    return lines


def _stack_line(s: StackDiff, label: str | None = None) -> str:
    return (
        f"  {signed_bytes(s.delta):>12}  {s.status:<8} {label or s.label}  "
        f"({format_bytes(s.bytes_a)} in {plural(s.count_a, 'block')} -> "
        f"{format_bytes(s.bytes_b)} in {plural(s.count_b, 'block')})"
    )
